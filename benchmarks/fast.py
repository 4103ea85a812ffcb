"""Fast soft ranks: the O(n log n) methods against torchsort, and every method at n = 1000.

Prints three tables:

1. time (median of interleaved repeats, ms) of soft_rank forward and
   forward+backward, float32, B = 20 rows of n and one row at n = 10^5 and
   10^6: rankops ``permutahedron`` and ``lapsum`` on torch (CPU), JAX
   (``jax.jit``) and NumPy (``rankops.vjp``),
   next to ``torchsort.soft_rank`` (when installed) measured in the same run,
   with the ratio rankops / torchsort;
2. peak memory of one torch forward+backward at B = 1, n = 10^6, each
   contender in a fresh process: the resident set polled while the call
   runs, minus the resident set just before it (input and gradient
   included: 8 MB at n = 10^6);
3. all five methods at B = 20, n = 1000 on torch: forward+backward time, peak
   memory (as in 2.) and the distance to the hard ranks at default settings
   (max |soft - rankdata|).

torchpsort, SoftTorch (torch) and SoftJAX (jax.jit) join tables 1 and 2 when
installed, at the settings that equal strength 1, l2 (their values agree with
rankops' to float32 rounding).

Usage: python -m benchmarks.fast [--sizes 100 1000 10000 100000] [--batch 20] [--single 100000 1000000]
                                 [--repeats 7] [--big 1000000] [--quick] [--backend torch|jax]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from typing import Any, Callable

import numpy as np

from ._timing import interleaved_medians

METHODS = {"permutahedron": {}, "lapsum": {}}


def _median_ms(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    return {k: 1e3 * v for k, v in interleaved_medians(fns, repeats).items()}


def _contenders(x: np.ndarray) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """name -> (forward, forward+backward) closures on the same float32 data."""
    import jax
    import jax.numpy as jnp
    import torch

    import rankops

    out: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}
    xt = torch.from_numpy(x)
    xj = jnp.asarray(x)
    ct = np.random.default_rng(1).normal(size=x.shape).astype(np.float32)
    ctt, ctj = torch.from_numpy(ct), jnp.asarray(ct)
    for m in METHODS:
        def t_fwd(m: str = m) -> Any:
            with torch.no_grad():
                return rankops.soft_rank(xt, method=m)

        def t_bwd(m: str = m) -> Any:
            leaf = xt.detach().requires_grad_(True)
            rankops.soft_rank(leaf, method=m).backward(ctt)
            return leaf.grad

        out[f"rankops {m} torch"] = (t_fwd, t_bwd)
        j_fwd = jax.jit(lambda v, m=m: rankops.soft_rank(v, method=m))
        j_bwd = jax.jit(jax.grad(lambda v, m=m: jnp.sum(rankops.soft_rank(v, method=m) * ctj)))
        out[f"rankops {m} jax-jit"] = (lambda f=j_fwd: f(xj).block_until_ready(), lambda f=j_bwd: f(xj).block_until_ready())

        def n_bwd(m: str = m) -> Any:
            _, fn = rankops.vjp(rankops.soft_rank, x, method=m)
            return fn(ct)

        out[f"rankops {m} numpy"] = (lambda m=m: rankops.soft_rank(x, method=m), n_bwd)
    if importlib.util.find_spec("torchsort") is not None:
        import torchsort

        def ts_fwd() -> Any:
            with torch.no_grad():
                return torchsort.soft_rank(xt)

        def ts_bwd() -> Any:
            leaf = xt.detach().requires_grad_(True)
            torchsort.soft_rank(leaf).backward(ctt)
            return leaf.grad

        out["torchsort (C++)"] = (ts_fwd, ts_bwd)
    out.update(_pure_peers(x, xt, ctt, xj, ctj))
    out.update(_sorts(xt, ctt, xj, ctj))
    return out


def _sorts(xt: Any, ctt: Any, xj: Any, ctj: Any) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """Each backend's own sort, forward and forward+backward (a gather back): the floor under any sort-based soft rank."""
    import jax
    import jax.numpy as jnp
    import torch

    def t_fwd() -> Any:
        with torch.no_grad():
            return torch.sort(xt, dim=-1).values

    def t_bwd() -> Any:
        leaf = xt.detach().requires_grad_(True)
        torch.sort(leaf, dim=-1).values.backward(ctt)
        return leaf.grad

    j_fwd = jax.jit(lambda v: jnp.sort(v, axis=-1))
    j_bwd = jax.jit(jax.grad(lambda v: jnp.sum(jnp.sort(v, axis=-1) * ctj)))
    return {
        "reference: torch.sort": (t_fwd, t_bwd),
        "reference: jnp.sort jax-jit": (lambda: j_fwd(xj).block_until_ready(), lambda: j_bwd(xj).block_until_ready()),
    }


# SoftTorch / SoftJAX project z / softness onto the permutahedron of rho / (n - 1)
# and scale back by n - 1; the l2 projection is positively homogeneous, so
# softness = strength (n - 1) is torchsort's (and rankops') strength.
def _soft_kwargs(n: int) -> dict[str, Any]:
    return {"softness": float(max(n - 1, 1)), "mode": "c0", "method": "fast_soft_sort", "descending": False, "standardize": False}


def _pure_peers(x: np.ndarray, xt: Any, ctt: Any, xj: Any, ctj: Any) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """torchpsort and SoftTorch (torch) and SoftJAX (jax.jit), l2 at strength 1, when installed.

    They declare Python >= 3.12 but run on 3.11: docs/benchmarks.md says how
    to install them (``pip install --ignore-requires-python``).
    """
    import torch

    n = x.shape[-1]
    fns: dict[str, Callable[[Any], Any]] = {}
    if importlib.util.find_spec("torchpsort") is not None:
        import torchpsort

        fns["torchpsort (numba PAV)"] = lambda v: torchpsort.soft_rank(v, tau=1.0, reg="l2")
    if importlib.util.find_spec("softtorch") is not None:
        import softtorch

        fns["SoftTorch fast_soft_sort"] = lambda v: softtorch.rank(v, dim=-1, **_soft_kwargs(n))
    out: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}
    for name, f in fns.items():
        def fwd(f: Callable[[Any], Any] = f) -> Any:
            with torch.no_grad():
                return f(xt)

        def bwd(f: Callable[[Any], Any] = f) -> Any:
            leaf = xt.detach().requires_grad_(True)
            f(leaf).backward(ctt)
            return leaf.grad

        out[name] = (fwd, bwd)
    # SoftJAX's PAV is a sequential lax.fori_loop: 9.7 s per call at n = 10^5 (measured once), so it stops at 10^4
    if importlib.util.find_spec("softjax") is not None and n <= 10_000:
        import jax
        import jax.numpy as jnp
        import softjax

        sj = jax.jit(lambda v: softjax.rank(v, axis=-1, **_soft_kwargs(n)))
        sjb = jax.jit(jax.grad(lambda v: jnp.sum(softjax.rank(v, axis=-1, **_soft_kwargs(n)) * ctj)))
        out["SoftJAX fast_soft_sort jax-jit"] = (lambda: sj(xj).block_until_ready(), lambda: sjb(xj).block_until_ready())
    return out


def time_table(shapes: list[tuple[int, int]], repeats: int, series: dict[str, dict[int, float]] | None = None,
               backend: str | None = None) -> list[str]:
    """The time table's rows, one block per (B, n); ``series`` (when given) receives contender -> {n: fwd+bwd ms} of the largest B, for the plot.

    ``backend`` ("torch", "jax"): only that backend's contenders (torchsort and the backend's sort as references),
    so that no other framework's threads share the cores while they run.
    """
    rows = ["| B | n | contender | forward ms | fwd+bwd ms | fwd+bwd / torchsort | fwd+bwd / its backend's sort |",
            "|---|---|---|---|---|---|---|"]
    top = max(b for b, _ in shapes)
    for b, n in shapes:
        x = np.random.default_rng(0).normal(size=(b, n)).astype(np.float32)
        cont = _contenders(x)
        if n > 10_000:  # NumPy's portable scans are O(n log n) Python-level steps: skip the big ones
            cont = {k: v for k, v in cont.items() if "numpy" not in k}
        if backend is not None:
            cont = {k: v for k, v in cont.items() if k == "torchsort (C++)" or _backend_of(k) == backend}
        fwd = _median_ms({k: v[0] for k, v in cont.items()}, repeats)
        both = _median_ms({k: v[1] for k, v in cont.items()}, repeats)
        ref = both.get("torchsort (C++)")
        for k in cont:
            ratio = f"{both[k] / ref:.2f}" if ref else "-"
            sort = {"jax": "reference: jnp.sort jax-jit", "torch": "reference: torch.sort"}.get(_backend_of(k), "")
            to_sort = f"{both[k] / both[sort]:.2f}" if sort in both and not k.startswith("reference") else "-"
            rows.append(f"| {b} | {n} | {k} | {fwd[k]:.2f} | {both[k]:.2f} | {ratio} | {to_sort} |")
            if series is not None and b == top and not k.startswith("reference"):
                series.setdefault(k, {})[n] = both[k]
    return rows


def _backend_of(contender: str) -> str:
    """"jax", "torch" or "numpy": the framework a contender of the time table runs on."""
    if "jax" in contender.lower():
        return "jax"
    return "numpy" if contender.endswith("numpy") else "torch"


def plot(path: str, series: dict[str, dict[int, float]], batch: int) -> None:
    """Forward+backward time against n, log-log, one line per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, by_n in sorted(series.items()):
        ns = sorted(by_n)
        ax.plot(ns, [by_n[n] for n in ns], marker="o", label=name, linestyle="--" if "torchsort" in name else "-")
    ax.set(xscale="log", yscale="log", xlabel="n", ylabel="forward+backward (ms)",
           title=f"soft_rank, float32 CPU, B = {batch}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


_MEMORY_CHILD = r"""
import gc, json, os, sys, threading, time, numpy as np, torch
name, b, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
page = os.sysconf("SC_PAGE_SIZE")

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page

x = torch.from_numpy(np.random.default_rng(0).normal(size=(b, n)).astype(np.float32))
ct = torch.ones_like(x)
soft = dict(softness=float(max(n - 1, 1)), mode="c0", method="fast_soft_sort", descending=False, standardize=False)
if name == "torchsort":
    import torchsort; f = lambda v: torchsort.soft_rank(v)
elif name == "torchpsort":
    import torchpsort; f = lambda v: torchpsort.soft_rank(v, tau=1.0, reg="l2")
elif name == "SoftTorch":
    import softtorch; f = lambda v: softtorch.rank(v, dim=-1, **soft)
else:
    import rankops; f = lambda v: rankops.soft_rank(v, method=name)
f(x[:1, :100].detach().requires_grad_(True)).backward(ct[:1, :100])  # imports and first-call setup
gc.collect()
base, peak, stop = rss(), [0], threading.Event()

def sample():  # the resident set, polled while the call runs: its growth over the baseline
    while not stop.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.0005)

t = threading.Thread(target=sample); t.start()
leaf = x.detach().requires_grad_(True)
f(leaf).backward(ct)
stop.set(); t.join()
peak[0] = max(peak[0], rss())
print(json.dumps((peak[0] - base) / 2**30))
"""


_PEERS = {"torchsort": "torchsort", "torchpsort": "torchpsort", "SoftTorch": "softtorch"}


def _peak_gib(name: str, batch: int, n: int) -> float:
    """Peak resident-set growth (GiB) of one torch forward+backward of ``name``, in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, name, str(batch), str(n)], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def memory_table(n: int) -> list[str]:
    rows = [f"| contender (torch, B = 1, n = {n}) | peak resident-set growth, fwd+bwd (GiB) |", "|---|---|"]
    names = list(METHODS) + [k for k, mod in _PEERS.items() if importlib.util.find_spec(mod) is not None]
    for name in names:
        rows.append(f"| {name} | {_peak_gib(name, 1, n):.3f} |")
    return rows


def methods_table(batch: int, n: int, repeats: int) -> list[str]:
    import torch
    from scipy.stats import rankdata

    import rankops

    x = np.random.default_rng(0).normal(size=(batch, n)).astype(np.float32)
    xt = torch.from_numpy(x)
    hard = rankdata(x, axis=-1)
    fns = {}
    for m in ("sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum"):
        def bwd(m: str = m) -> Any:
            leaf = xt.detach().requires_grad_(True)
            rankops.soft_rank(leaf, method=m).sum().backward()
            return leaf.grad

        fns[m] = bwd
    times = _median_ms(fns, max(1, repeats // 2))
    rows = [f"| method (torch, B = {batch}, n = {n}, defaults) | fwd+bwd ms | peak memory, fwd+bwd (MiB) | max abs(soft - rankdata) |",
            "|---|---|---|---|"]
    for m in fns:
        with torch.no_grad():
            gap = float(np.abs(rankops.soft_rank(xt, method=m).numpy() - hard).max())
        rows.append(f"| {m} | {times[m]:.1f} | {1024 * _peak_gib(m, batch, n):.1f} | {gap:.3g} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10_000, 100_000])
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--single", type=int, nargs="*", default=[100_000, 1_000_000], help="sizes also timed with B = 1")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: checks that every contender runs")
    ap.add_argument("--plot", help="also save the time plot (PNG) here")
    ap.add_argument("--backend", choices=["torch", "jax"], help="the time table only, with that backend's contenders alone")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.batch, args.repeats, args.big, args.single = [16, 64], 2, 1, 4096, [128]
    series: dict[str, dict[int, float]] = {}
    shapes = [(args.batch, n) for n in args.sizes] + [(1, n) for n in args.single]
    print("\n".join(time_table(shapes, args.repeats, series, args.backend)))
    if args.backend:
        return 0
    print()
    print("\n".join(memory_table(args.big)))
    print()
    print("\n".join(methods_table(args.batch, 1000 if not args.quick else 64, args.repeats)))
    if args.plot:
        plot(args.plot, series, args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
