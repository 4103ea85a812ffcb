"""Fast soft ranks: the O(n log n) methods against torchsort, and every method at n = 1000.

Prints three tables:

1. time (median of interleaved repeats, ms) of soft_rank forward and
   forward+backward, B rows of n, float32: rankops ``permutahedron`` and
   ``lapsum`` on torch (CPU), JAX (``jax.jit``) and NumPy (``rankops.vjp``),
   next to ``torchsort.soft_rank`` (when installed) measured in the same run,
   with the ratio rankops / torchsort;
2. peak memory of one torch forward+backward at B = 1, n = 10^6, each
   contender in a fresh process: the resident set polled while the call
   runs, minus the resident set just before it (input and gradient
   included: 8 MB at n = 10^6);
3. all five methods at B = 20, n = 1000 on torch: forward+backward time and
   the distance to the hard ranks at default settings (max |soft - rankdata|).

Usage: python -m benchmarks.fast [--sizes 100 1000 10000 100000] [--batch 20] [--repeats 7] [--big 1000000] [--quick]
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
    return out


def time_table(sizes: list[int], batch: int, repeats: int, series: dict[str, dict[int, float]] | None = None) -> list[str]:
    """The time table's rows; ``series`` (when given) receives contender -> {n: fwd+bwd ms} for the plot."""
    rows = ["| B | n | contender | forward ms | fwd+bwd ms | fwd+bwd / torchsort |", "|---|---|---|---|---|---|"]
    for n in sizes:
        b = batch if n < 100_000 else 1
        x = np.random.default_rng(0).normal(size=(b, n)).astype(np.float32)
        cont = _contenders(x)
        if n > 10_000:  # NumPy's portable scans are O(n log n) Python-level steps: skip the big ones
            cont = {k: v for k, v in cont.items() if "numpy" not in k}
        fwd = _median_ms({k: v[0] for k, v in cont.items()}, repeats)
        both = _median_ms({k: v[1] for k, v in cont.items()}, repeats)
        ref = both.get("torchsort (C++)")
        for k in cont:
            ratio = f"{both[k] / ref:.2f}" if ref else "-"
            rows.append(f"| {b} | {n} | {k} | {fwd[k]:.2f} | {both[k]:.2f} | {ratio} |")
            if series is not None:
                series.setdefault(k, {})[n] = both[k]
    return rows


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
           title=f"soft_rank, float32 CPU, B = {batch} (B = 1 from n = 10^5)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


_MEMORY_CHILD = r"""
import gc, json, os, sys, threading, time, numpy as np, torch
name, n = sys.argv[1], int(sys.argv[2])
page = os.sysconf("SC_PAGE_SIZE")

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page

x = torch.from_numpy(np.random.default_rng(0).normal(size=(1, n)).astype(np.float32))
ct = torch.ones_like(x)
if name == "torchsort":
    import torchsort; f = lambda v: torchsort.soft_rank(v)
else:
    import rankops; f = lambda v: rankops.soft_rank(v, method=name)
f(x[:, :1000].detach().requires_grad_(True)).backward(ct[:, :1000])  # imports and first-call setup
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


def memory_table(n: int) -> list[str]:
    rows = [f"| contender (torch, B = 1, n = {n}) | peak resident-set growth, fwd+bwd (GiB) |", "|---|---|"]
    names = list(METHODS) + (["torchsort"] if importlib.util.find_spec("torchsort") else [])
    for name in names:
        out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, name, str(n)], capture_output=True, text=True, check=True)
        rows.append(f"| {name} | {json.loads(out.stdout.strip().splitlines()[-1]):.3f} |")
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
    rows = [f"| method (torch, B = {batch}, n = {n}, defaults) | fwd+bwd ms | max abs(soft - rankdata) |", "|---|---|---|"]
    for m in fns:
        with torch.no_grad():
            gap = float(np.abs(rankops.soft_rank(xt, method=m).numpy() - hard).max())
        rows.append(f"| {m} | {times[m]:.1f} | {gap:.3g} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10_000, 100_000])
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: checks that every contender runs")
    ap.add_argument("--plot", help="also save the time plot (PNG) here")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.batch, args.repeats, args.big = [16, 64], 2, 1, 4096
    series: dict[str, dict[int, float]] = {}
    print("\n".join(time_table(args.sizes, args.batch, args.repeats, series)))
    print()
    print("\n".join(memory_table(args.big)))
    print()
    print("\n".join(methods_table(args.batch, 1000 if not args.quick else 64, args.repeats)))
    if args.plot:
        plot(args.plot, series, args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
