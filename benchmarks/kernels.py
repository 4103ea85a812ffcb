"""Kernels on permutations: Kendall Gram matrices by signs and by merges, against scipy.stats.kendalltau.

Prints two tables:

1. time (median of interleaved repeats, ms) of ``kendall_kernel(x, y)`` for
   N = M vectors of p entries (float64, ties included: integer data in
   [0, p/2)), ``algorithm="signs"`` and ``"merges"`` on NumPy and torch,
   next to ``scipy.stats.kendalltau`` (tau-b; equal to tau-a without ties,
   the same pair counting) called in a loop over the N x M pairs;
2. ``soft_kendall_tau`` forward+backward on torch for one pair of rows of
   p entries (streamed: memory O(p x block)), with its peak resident-set
   growth measured in a fresh process.

Usage: python -m benchmarks.kernels [--vectors 16] [--sizes 16 64 256 1024 4096] [--soft 1000 10000 100000] [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any, Callable

import numpy as np

from ._timing import interleaved_medians


def _scipy_loop(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from scipy.stats import kendalltau

    return np.array([[kendalltau(a, b).statistic for b in y] for a in x])


def kernel_table(vectors: int, sizes: list[int], repeats: int) -> list[str]:
    import torch

    import rankops

    rows = [f"| p | N = M | {' | '.join(NAMES)} | merges / signs (numpy) |", "|---|---|" + "---|" * (len(NAMES) + 1)]
    for p in sizes:
        rng = np.random.default_rng(0)
        x = rng.integers(0, max(2, p // 2), size=(vectors, p)).astype(np.float64)
        y = rng.integers(0, max(2, p // 2), size=(vectors, p)).astype(np.float64)
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        fns: dict[str, Callable[[], Any]] = {
            "signs numpy": lambda: rankops.kendall_kernel(x, y, algorithm="signs"),
            "merges numpy": lambda: rankops.kendall_kernel(x, y, algorithm="merges"),
            "signs torch": lambda: rankops.kendall_kernel(xt, yt, algorithm="signs"),
            "merges torch": lambda: rankops.kendall_kernel(xt, yt, algorithm="merges"),
            "scipy kendalltau loop": lambda: _scipy_loop(x, y),
        }
        med = {k: 1e3 * v for k, v in interleaved_medians(fns, repeats).items()}
        cells = " | ".join(f"{med[k]:.2f}" for k in NAMES)
        rows.append(f"| {p} | {vectors} | {cells} | {med['merges numpy'] / med['signs numpy']:.2f} |")
    return rows


NAMES = ["signs numpy", "merges numpy", "signs torch", "merges torch", "scipy kendalltau loop"]

_MEMORY_CHILD = r"""
import json, os, sys, threading, time, numpy as np, torch, rankops
p = int(sys.argv[1])
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
rng = np.random.default_rng(0)
x = torch.from_numpy(rng.normal(size=p)).requires_grad_(True)
y = torch.from_numpy(rng.normal(size=p)).requires_grad_(True)
rankops.soft_kendall_tau(x[:64], y[:64]).backward()
base, peak, stop = rss(), [0], threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], rss()); time.sleep(0.001)
t = threading.Thread(target=sample); t.start()
start = time.perf_counter()
rankops.soft_kendall_tau(x, y).backward()
elapsed = time.perf_counter() - start
stop.set(); t.join()
print(json.dumps({"ms": 1e3 * elapsed, "peak_mib": (max(peak[0], rss()) - base) / 2**20}))
"""


def soft_table(sizes: list[int]) -> list[str]:
    rows = ["| p | soft_kendall_tau fwd+bwd, torch (ms, one call) | peak resident-set growth (MiB) | p x p float64 would be (MiB) |",
            "|---|---|---|---|"]
    for p in sizes:
        out = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, str(p)], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(f"| {p} | {r['ms']:.1f} | {r['peak_mib']:.1f} | {p * p * 8 / 2**20:.0f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vectors", type=int, default=16)
    ap.add_argument("--sizes", type=int, nargs="*", default=[16, 64, 256, 1024, 4096])
    ap.add_argument("--soft", type=int, nargs="*", default=[1000, 10_000, 100_000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: checks that every contender runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.vectors, args.sizes, args.soft, args.repeats = 3, [8, 40], [200], 1
    print("\n".join(kernel_table(args.vectors, args.sizes, args.repeats)))
    print()
    print("\n".join(soft_table(args.soft)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
