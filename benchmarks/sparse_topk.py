"""Smooth and sparse: the p-norm regularized permutahedron against l2 (Sander et al. 2023).

Prints three tables:

1. time (median of interleaved repeats, ms) of one forward+backward,
   float32: ``soft_rank``, ``soft_sort`` (at p = 1.25 n <= 10^4: see below), ``soft_topk_mask`` and
   ``soft_topk_magnitude`` (k = n / 10) with
   ``method="permutahedron"``, ``regularization="l2"`` and ``"lp"`` at
   p = 3/2, 4/3 (closed forms) and 1.25 (Newton's method), ``strength=0.1``
   (the rank and the sort also at the default softness)
   on standard normal rows, at B = 20, n = 1000 and B = 1, n = 10^5, on
   torch (eager, one thread) and JAX (``jax.jit``); the last column is the
   time over l2's measured in the same run;
2. ``soft_rank`` alone across the knob, torch, at both sizes: ``softness``
   0.3, 1 (the default), 3, 10 and n / 20, and ``strength`` 10, 1, 0.1,
   0.01 and 0.001; how many pooling rounds a row needs, and so its time,
   depends on where its blocks form, which each regularizer does at its own
   knob value. Each size ends with the slowest time of each column over the
   softness rows and over the strength rows, and their ratio to l2's
   slowest;
3. the share of exact zeros and ones of those top-k masks, and of exact zeros
   and entries kept exactly (``x_i``) of the top-k in magnitude (their sparsity).

With numba installed (``pip install rankops-xp[bench]``), two more tables
against the route of the paper's reference code (sequential PAV compiled by
numba on the host, reached through ``jax.pure_callback``;
:mod:`benchmarks._host_pav`), the p = 4/3 top-k mask and soft rank on JAX:

4. time of one forward under ``jax.jit`` (ms), float32, both routes, and
   the callback's over rankops' measured in the same run;
5. whether each route runs under ``jax.jit`` on a batch sharded over two
   devices (a subprocess with two XLA CPU devices), and where its output lies;

and last

6. ``soft_rank`` at p whose ``q = p / (p - 1)`` is no integer (1.4, 1.35,
   1.3: no closed forms or moments, Newton's steps over the entries and
   threshold splits), torch and JAX, at the default softness and at
   strength 1 and 0.1, at both sizes.

``--plot PATH`` draws the paper's Figure 1: ``x(s) = (3, 1, -1 + s, s)``,
k = 2, the sum of mask entries 2 and 3 as s varies, for the hard mask,
l2, p = 4/3 and LapSum (``alpha=1``), all at strength (alpha) 1.

Usage: python -m benchmarks.sparse_topk [--repeats 7] [--quick] [--plot PATH]
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

import numpy as np

from ._timing import interleaved_medians

REGULARIZERS = {"l2": {"regularization": "l2"}, "p = 3/2": {"regularization": "lp", "p": 1.5},
                "p = 4/3": {"regularization": "lp", "p": 4 / 3}, "p = 1.25": {"regularization": "lp", "p": 1.25}}


def _step(backend: str, op: str, opts: dict, x: np.ndarray, strength: float | None = 0.1, softness: float | None = None) -> Callable[[], Any]:
    """One forward+backward of ``sum(op(x) * w)`` on ``backend``, ready to time (``strength`` and ``softness`` None: the
    default)."""
    import rankops

    k = max(1, x.shape[-1] // 10)
    w = np.random.default_rng(1).normal(size=x.shape).astype(np.float32)
    kw = {"method": "permutahedron", **opts, **({} if strength is None else {"strength": strength}),
          **({} if softness is None else {"softness": softness})}

    def value(a: Any) -> Any:
        if op == "soft_topk_mask":
            return rankops.soft_topk_mask(a, k, **kw)
        if op == "soft_topk_magnitude":
            return rankops.soft_topk_magnitude(a, k, strength=strength, **opts)
        return getattr(rankops, op)(a, **kw)

    if backend == "torch":
        import torch

        xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w)
        return lambda: torch.autograd.grad((value(xt) * wt).sum(), xt)[0]
    import jax
    import jax.numpy as jnp

    grad = jax.jit(jax.grad(lambda a: jnp.sum(value(a) * jnp.asarray(w))))
    xj = jnp.asarray(x)
    return lambda: grad(xj).block_until_ready()


def _cells(ms: dict[str, float]) -> str:
    """A row's times (ms) in their columns' order, then the slowest over l2's: `` a | b | ... | ratio |``."""
    return " | ".join(f"{v:.3g}" for v in ms.values()) + f" | {max(ms.values()) / ms['l2']:.2f} |"


def _head(title: str, lead: tuple[str, ...], columns: Any) -> None:
    """A table's title, then its header: the ``lead`` columns, one per regularizer in ``columns``, and the ratio."""
    print(title + "\n")
    print("| " + " | ".join((*lead, *columns)) + " | slowest / l2 |")
    print("|" + "---|" * (len(lead) + len(columns) + 1))


def speed(sizes: list[tuple[int, int]], repeats: int) -> None:
    import torch

    torch.set_num_threads(1)
    _head("forward+backward, float32, median of interleaved repeats (ms; last column: / l2 in the same run)",
          ("backend", "operator", "B", "n", "knob"), REGULARIZERS)
    for b, n in sizes:
        x = np.random.default_rng(0).normal(size=(b, n)).astype(np.float32)
        for backend in ("torch", "jax"):
            for op in ("soft_rank", "soft_sort", "soft_topk_mask", "soft_topk_magnitude"):
                # the rank's and sort's blocks form where each regularizer's knob puts them: their default softness too
                for strength in (0.1, None) if op in ("soft_rank", "soft_sort") else (0.1,):
                    fns = {name: _step(backend, op, opts, x, strength) for name, opts in REGULARIZERS.items()}
                    ms = {k: 1e3 * v for k, v in interleaved_medians(fns, repeats).items()}
                    knob = "default softness" if strength is None else f"strength {strength:g}"
                    print(f"| {backend} | {op} | {b} | {n:,} | {knob} | {_cells(ms)}")


def by_knob(sizes: list[tuple[int, int]], repeats: int) -> None:
    import torch

    torch.set_num_threads(1)
    _head("\nsoft_rank forward+backward across the knob, torch, float32, median of interleaved repeats (ms; last column: "
          "/ l2 in the same row; the slowest rows: each column's slowest over the rows above, over l2's)", ("B", "n", "knob"),
          REGULARIZERS)
    for b, n in sizes:
        x = np.random.default_rng(0).normal(size=(b, n)).astype(np.float32)
        knobs = [("softness", s) for s in dict.fromkeys((0.3, 1.0, 3.0, 10.0, n / 20))] + [("strength", e) for e in (10.0, 1.0, 0.1, 0.01, 0.001)]
        slowest: dict[str, dict[str, float]] = {"softness": {}, "strength": {}}
        for name, value in knobs:
            fns = {k: _step("torch", "soft_rank", o, x, **{"strength": None, name: value}) for k, o in REGULARIZERS.items()}
            ms = {k: 1e3 * v for k, v in interleaved_medians(fns, repeats).items()}
            for k, v in ms.items():
                slowest[name][k] = max(slowest[name].get(k, 0.0), v)
            print(f"| {b} | {n:,} | {name} {value:g} | {_cells(ms)}")
        for name, ms in slowest.items():
            print(f"| {b} | {n:,} | slowest, {name} | {_cells(ms)}")


OTHER_P = {"l2": {"regularization": "l2"}, **{f"p = {p:g}": {"regularization": "lp", "p": p} for p in (1.4, 1.35, 1.3)}}


def other_p(sizes: list[tuple[int, int]], repeats: int) -> None:
    _head("\nsoft_rank forward+backward at p whose q = p / (p - 1) is no integer, float32, torch eager (one thread) and "
          "JAX under jit, median of interleaved repeats (ms; last column: / l2 in the same run)",
          ("backend", "B", "n", "strength"), OTHER_P)
    for backend in ("torch", "jax"):
        for b, n in sizes:
            x = np.random.default_rng(0).normal(size=(b, n)).astype(np.float32)
            for strength in (None, 1.0, 0.1):
                fns = {name: _step(backend, "soft_rank", opts, x, strength) for name, opts in OTHER_P.items()}
                ms = {k: 1e3 * v for k, v in interleaved_medians(fns, repeats).items()}
                label = "default" if strength is None else f"{strength:g}"
                print(f"| {backend} | {b} | {n:,} | {label} | {_cells(ms)}")


def sparsity(sizes: list[tuple[int, int]]) -> None:
    import rankops

    print("\nexact zeros / exact ones (the mask) or entries kept exactly (x_i, the magnitude) of k = n / 10, "
          "strength=0.1, standard normal rows\n")
    print("| operator | B | n | " + " | ".join(REGULARIZERS) + " |")
    print("|---|---|---|" + "---|" * len(REGULARIZERS))
    for op in ("soft_topk_mask", "soft_topk_magnitude"):
        for b, n in sizes:
            x = np.random.default_rng(0).normal(size=(b, n))
            cells = []
            for opts in REGULARIZERS.values():
                if op == "soft_topk_mask":
                    out = rankops.soft_topk_mask(x, max(1, n // 10), method="permutahedron", strength=0.1, **opts)
                    cells.append(f"{(out == 0).mean():.1%} / {(out == 1).mean():.1%}")
                else:
                    out = rankops.soft_topk_magnitude(x, max(1, n // 10), strength=0.1, **opts)
                    cells.append(f"{(out == 0).mean():.1%} / {(out == x).mean():.1%}")
            print(f"| {op} | {b} | {n:,} | " + " | ".join(cells) + " |")


_SHARDED = r"""
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import rankops
from benchmarks._host_pav import topk_mask_callback

mesh = Mesh(np.array(jax.devices()[:2]), ("b",))
x = jax.device_put(jnp.asarray(np.random.default_rng(0).normal(size=(4, 1000)), jnp.float32), NamedSharding(mesh, P("b")))
routes = {"rankops": lambda v: rankops.soft_topk_mask(v, 100, method="permutahedron", regularization="lp", p=4 / 3, strength=0.1),
          "pure_callback PAV": lambda v: topk_mask_callback(v, 100, 0.1)}
report = {}
for name, fn in routes.items():
    try:
        out = jax.jit(fn)(x)
        out.block_until_ready()
        report[name] = f"runs; output sharded as {out.sharding.spec}, on {len(out.sharding.device_set)} devices"
    except Exception as error:  # noqa: BLE001  (the table reports it)
        report[name] = f"fails: {type(error).__name__}: {str(error).splitlines()[0][:120]}"
print(json.dumps(report))
"""


def host_callback(sizes: list[tuple[int, int]], repeats: int) -> None:
    """Tables 3-4: rankops' p = 4/3 top-k mask and soft rank against the reference code's route (host PAV through
    pure_callback)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        print("\n(numba is not installed: the comparison with the reference code's host PAV is skipped; "
              "pip install rankops-xp[bench])")
        return
    import jax
    import jax.numpy as jnp

    import rankops
    from ._host_pav import rank_callback, topk_mask_callback

    print("\np = 4/3 top-k mask (k = n / 10) and soft rank, strength=0.1, one forward under jax.jit, float32, median of "
          "interleaved repeats (ms)\n")
    print("| operator | B | n | rankops | pure_callback PAV | callback / rankops |")
    print("|---|---|---|---|---|---|")
    lp = dict(method="permutahedron", regularization="lp", p=4 / 3, strength=0.1)
    for b, n in sizes:
        x = jnp.asarray(np.random.default_rng(0).normal(size=(b, n)).astype(np.float32))
        k = max(1, n // 10)
        # the same values in float32: the mask's entries within 1e-4, the ranks (up to n) within 1e-3 relative
        routes = {"soft_topk_mask": (lambda v: rankops.soft_topk_mask(v, k, **lp), lambda v: topk_mask_callback(v, k, 0.1), 1e-4),
                  "soft_rank": (lambda v: rankops.soft_rank(v, **lp), lambda v: rank_callback(v, 0.1), 1e-3)}
        for op, (mine, reference, tol) in routes.items():
            ours, theirs = jax.jit(mine), jax.jit(reference)
            got, want = np.asarray(ours(x)), np.asarray(theirs(x))
            assert np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))) <= tol, op
            fns = {"rankops": lambda: ours(x).block_until_ready(), "callback": lambda: theirs(x).block_until_ready()}
            ms = {key: 1e3 * v for key, v in interleaved_medians(fns, repeats).items()}
            print(f"| {op} | {b} | {n:,} | {ms['rankops']:.3g} | {ms['callback']:.3g} | {ms['callback'] / ms['rankops']:.2f} |")
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", _SHARDED], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    report = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"both": proc.stderr[-300:]}
    print("\nunder jax.jit, B = 4, n = 1000, the batch sharded over two XLA CPU devices\n")
    print("| route | result |")
    print("|---|---|")
    for name, result in report.items():
        print(f"| {name} | {result} |")


def plot(path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import rankops

    s = np.linspace(-2.0, 4.0, 601)
    x = np.stack([np.full_like(s, 3.0), np.ones_like(s), s - 1.0, s], axis=-1)
    curves = {
        "hard": (np.argsort(np.argsort(-x, axis=-1), axis=-1) < 2).astype(float),
        "l2": rankops.soft_topk_mask(x, 2, method="permutahedron", strength=1.0),
        "p = 4/3": rankops.soft_topk_mask(x, 2, method="permutahedron", regularization="lp", p=4 / 3, strength=1.0),
        "LapSum": rankops.soft_topk_mask(x, 2, method="lapsum", alpha=1.0),
    }
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, mask in curves.items():
        ax.plot(s, mask[:, 1] + mask[:, 2], label=name, lw=2 if name != "hard" else 1.2, ls="--" if name == "hard" else "-")
    ax.set_xlabel("s")
    ax.set_ylabel("mask of x(s) = (3, 1, -1 + s, s): entries 2 + 3")
    ax.set_title("k = 2: sparse masks (permutahedron) and a dense one (LapSum)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"\nfigure: {path}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="B = 2, n = 200 and B = 1, n = 2000, 2 repeats (a smoke test)")
    ap.add_argument("--plot", help="draw the paper's Figure 1 to this path")
    args = ap.parse_args(argv)
    sizes = [(2, 200), (1, 2000)] if args.quick else [(20, 1000), (1, 100_000)]
    speed(sizes, 2 if args.quick else args.repeats)
    by_knob(sizes, 2 if args.quick else args.repeats)
    sparsity(sizes)
    host_callback(sizes, 2 if args.quick else args.repeats)
    other_p(sizes, 2 if args.quick else args.repeats)
    if args.plot:
        plot(args.plot)


if __name__ == "__main__":
    main()
