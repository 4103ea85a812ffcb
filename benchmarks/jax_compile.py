"""JAX compile time of every method against the row length, the KL permutahedron's run time against L2's, and JAX's
log-cumsum-exp.

First table: seconds to trace, lower and compile ``jax.jit`` of one
``soft_rank`` forward and its gradient (``jax.value_and_grad`` of the sum of
the ranks, one program) on a (4, n) float32 batch, JAX's default
compilation, one fresh program per cell (each n is a new shape), with the
ratio of the longest row to the shortest; ``jnp.sort``'s own (a weighted sum
of the sorted row) is the reference row. Second table: forward+backward
time (median of interleaved repeats, ms, float32) of the permutahedron with
``regularization="kl"`` and ``"l2"``, jitted JAX and eager torch
(``torch.set_num_threads(1)``), at B = 20, n = 1000 and B = 1, n = 10^5;
eager torch's KL also with its last drops left to the pooling rounds
(``rankops._cores.windows`` off, as under ``jax.jit``), in the same run.
Third table: the permutahedron's soft sort and rank under ``jax.jit`` with
the pooling rounds' extensions (``rankops._cores.extensions``) and without
them, each program compiled once and then timed interleaved. Fourth table:
the log-cumsum-exp of the KL fit's merge rounds and extensions
and of ListMLE (``eps=0``) on JAX, XLA's ``lax.cumlogsumexp`` against the
adapter's blocked scan (``rankops._lib._adapters._jax_scans``): jitted
forward time (median of interleaved repeats, ms, float32) and the compile
seconds of ``jit(grad)`` of a sum of its squares.

Usage: python -m benchmarks.jax_compile [--lengths 10 1000 100000 1000000] [--repeats 7] [--quick] [--kl-only]
"""

from __future__ import annotations

import argparse
import time
from fractions import Fraction
from typing import Any, Callable

from ._common import fresh_jax_programs
from ._timing import interleaved_medians

METHODS: list[tuple[str, dict[str, Any]]] = [
    ("jnp.sort", {}),
    ("permutahedron", {}),
    ("permutahedron", {"regularization": "kl"}),
    ("permutahedron", {"regularization": "lp", "p": 4.0 / 3.0}),
    ("permutahedron", {"regularization": "lp", "p": 1.5}),
    ("permutahedron", {"regularization": "lp", "p": 1.25}),
    ("lapsum", {}),
    ("softsort", {}),
    ("neuralsort", {}),
    ("diffsort", {"network": "bitonic"}),
    ("sinkhorn", {}),
]
# the methods with an n x n matrix (SoftSort, NeuralSort, Sinkhorn's plan) or O(n log^2 n) layers stop here
DENSE_LONGEST = {"softsort": 2000, "neuralsort": 2000, "sinkhorn": 2000, "diffsort": 100_000}


def _label(method: str, options: dict[str, Any]) -> str:
    return method + "".join(f", {k} = {Fraction(v).limit_denominator(8)}" if k == "p" else f", {v}" for k, v in options.items())


def compile_seconds(method: str, options: dict[str, Any], n: int) -> float:
    import jax
    import jax.numpy as jnp

    import rankops

    x = jnp.asarray(jax.random.normal(jax.random.PRNGKey(0), (4, n)), dtype=jnp.float32)
    if method == "jnp.sort":  # the reference: the backend's own sort, its gradient a scatter
        f = jax.jit(jax.value_and_grad(lambda v: jnp.sum(jnp.sort(v, axis=-1) * jnp.arange(n))))
    else:
        f = jax.jit(jax.value_and_grad(lambda v: jnp.sum(rankops.soft_rank(v, method=method, **options))))
    start = time.perf_counter()
    f.lower(x).compile()
    return time.perf_counter() - start


def compile_table(lengths: list[int]) -> list[str]:
    lines = ["| method | " + " | ".join(f"n = {n:,}" for n in lengths) + " | longest / shortest |",
             "| --- |" + " ---: |" * (len(lengths) + 1)]
    for method, options in METHODS:
        cells, seconds = [], []
        for n in lengths:
            if n > DENSE_LONGEST.get(method, n):
                cells.append("-")
                continue
            s = compile_seconds(method, options, n)
            seconds.append(s)
            cells.append(f"{s:.2f}")
        ratio = f"{seconds[-1] / seconds[0]:.1f}x" if len(seconds) > 1 else "-"
        lines.append(f"| {_label(method, options)} | " + " | ".join(cells) + f" | {ratio} |")
    return lines


def _runners(batch: int, n: int) -> dict[str, Callable[[], Any]]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    import rankops

    x = np.random.default_rng(0).normal(size=(batch, n)).astype(np.float32)
    runs: dict[str, Callable[[], Any]] = {}
    for reg in ("l2", "kl"):
        g = jax.jit(jax.grad(lambda v, reg=reg: jnp.sum(rankops.soft_rank(v, method="permutahedron", regularization=reg) ** 2)))
        xj = jnp.asarray(x)
        g(xj).block_until_ready()
        runs[f"jax {reg}"] = lambda g=g, xj=xj: g(xj).block_until_ready()
        xt = torch.asarray(x)

        def eager(reg: str = reg, xt: Any = xt) -> Any:
            leaf = xt.detach().requires_grad_(True)
            (rankops.soft_rank(leaf, method="permutahedron", regularization=reg) ** 2).sum().backward()
            return leaf.grad

        runs[f"torch {reg}"] = eager
    runs["torch kl, rounds only"] = lambda: _rounds_only(runs["torch kl"])
    return runs


def _rounds_only(run: Callable[[], Any]) -> Any:
    """``run()`` with the KL fit's windows off, as on a GPU: every pooling round runs on the whole row."""
    from unittest import mock

    from rankops._cores import windows

    with mock.patch.object(windows, "pays", lambda v: False):
        return run()


def kl_table(shapes: list[tuple[int, int]], repeats: int) -> list[str]:
    import torch

    torch.set_num_threads(1)
    lines = ["| backend | B | n | l2 (ms) | kl (ms) | kl / l2 | kl, rounds only (ms) | its / l2 |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for batch, n in shapes:
        medians = interleaved_medians(_runners(batch, n), repeats)
        for backend in ("jax", "torch"):
            l2, kl = medians[f"{backend} l2"] * 1e3, medians[f"{backend} kl"] * 1e3
            rounds = medians.get(f"{backend} kl, rounds only")
            alone = f"{rounds * 1e3:.3g} | {rounds * 1e3 / l2:.2f}" if rounds else "- | -"
            lines.append(f"| {backend} | {batch} | {n:,} | {l2:.3g} | {kl:.3g} | {kl / l2:.2f} | {alone} |")
    return lines


def extensions_table(shapes: list[tuple[int, int]], repeats: int) -> list[str]:
    """The permutahedron's soft rank and sort (default softness) under ``jax.jit``, forward+backward, with the pooling
    rounds' extensions and without (``rankops._cores.extensions``: the rows' snowballing chains pooled on), each
    program traced and compiled once, then timed interleaved."""
    from unittest import mock

    import jax
    import jax.numpy as jnp
    import numpy as np

    import rankops
    from rankops._cores import isotonic

    lines = ["| operator | regularization | B | n | with (ms) | without (ms) | without / with |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for batch, n in shapes:
        x = jnp.asarray(np.random.default_rng(0).normal(size=(batch, n)).astype(np.float32))
        for op in ("soft_sort", "soft_rank"):
            for reg in ("l2", "kl"):
                runs = {}
                for name in ("with", "without"):
                    fresh_jax_programs()
                    grad = jax.jit(jax.grad(lambda v, op=op, reg=reg: jnp.sum(
                        getattr(rankops, op)(v, method="permutahedron", regularization=reg) ** 2)))
                    with mock.patch.object(isotonic, "Extension", (lambda rule: None) if name == "without" else isotonic.Extension):
                        compiled = grad.lower(x).compile()  # an executable: no later trace, whatever the caches hold
                    compiled(x).block_until_ready()
                    runs[name] = lambda compiled=compiled: compiled(x).block_until_ready()
                fresh_jax_programs()
                medians = interleaved_medians(runs, repeats)
                on, off = medians["with"] * 1e3, medians["without"] * 1e3
                lines.append(f"| {op} | {reg} | {batch} | {n:,} | {on:.3g} | {off:.3g} | {off / on:.2f} |")
    return lines


def cumlogsumexp_table(shapes: list[tuple[int, int]], repeats: int) -> list[str]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from rankops._lib._adapters._jax_scans import cumlogsumexp

    routes = {"lax.cumlogsumexp": lambda z: jax.lax.cumlogsumexp(z, axis=z.ndim - 1),
              "blocked scan": lambda z: cumlogsumexp(z, False)}
    lines = ["| shape | " + " | ".join(f"{r} (ms)" for r in routes) + " | ratio | " + " | ".join(f"{r}, compile (s)" for r in routes) + " |",
             "| --- |" + " ---: |" * (2 * len(routes) + 1)]
    for shape in shapes:
        z = jnp.asarray(np.random.default_rng(0).normal(size=shape).astype(np.float32))
        runs = {}
        for name, f in routes.items():
            g = jax.jit(f)
            g(z).block_until_ready()
            runs[name] = lambda g=g: g(z).block_until_ready()
        medians = interleaved_medians(runs, repeats)
        compiled = []
        for f in routes.values():
            start = time.perf_counter()
            jax.jit(jax.grad(lambda v, f=f: jnp.sum(f(v) ** 2))).lower(z).compile()
            compiled.append(time.perf_counter() - start)
        times = [medians[r] * 1e3 for r in routes]
        lines.append(f"| {shape} | " + " | ".join(f"{t:.3g}" for t in times) + f" | {times[0] / times[1]:.1f}x | "
                     + " | ".join(f"{c:.2f}" for c in compiled) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 1000, 100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="n = 10 and 100, 2 repeats, a small KL case (smoke test)")
    parser.add_argument("--kl-only", action="store_true", help="the second table alone")
    args = parser.parse_args(argv)
    lengths, repeats, shapes = args.lengths, args.repeats, [(20, 1000), (1, 100_000)]
    if args.quick:
        lengths, repeats, shapes = [10, 100], 2, [(2, 100)]
    if not args.kl_only:
        print("JAX compile seconds of jit(value_and_grad(sum of soft_rank)), (4, n) float32, default compilation\n")
        print("\n".join(compile_table(lengths)))
    print("\npermutahedron forward+backward, kl against l2: median of interleaved repeats (ms), float32\n")
    print("\n".join(kl_table(shapes, repeats)))
    print("\npermutahedron under jax.jit, forward+backward, the default softness: the pooling rounds' extensions on and off\n")
    print("\n".join(extensions_table(shapes, repeats)))
    scans = [(2, 100)] if args.quick else [(256, 64), (20, 1000), (1, 100_000)]
    print("\nJAX log-cumsum-exp along the last axis, float32: XLA's against the adapter's blocked scan\n")
    print("\n".join(cumlogsumexp_table(scans, repeats)))


if __name__ == "__main__":
    main()
