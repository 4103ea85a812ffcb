"""Seconds ``torch.compile(fullgraph=True)`` takes to compile each operator and method, forward and backward, against n.

One table: the first call of a compiled forward+backward (the sum of the
squared output, differentiated) on a (4, n) float32 batch, torch CPU (or
CUDA when present), one thread: tracing, AOT autograd, inductor's code
generation and its C++ (or Triton) compiles, then the run. Each cell runs
in a fresh process with an empty inductor cache, as a user's first training
step would. The reference row is a graph of torch's own ops (a sort and a
softmax): what any compiled function pays here, whatever it holds.
``longest / shortest``: the ratio of the longest row's seconds to the
shortest's (a loop compiled once, not unrolled per entry or layer, keeps it
near 1).

Usage: python -m benchmarks.compile_time [--lengths 100 1000 100000] [--rows TEXT ...] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

# (label, operator, options); the sorting networks and the dense methods stop at DENSE_LONGEST
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("torch.sort (reference)", "reference", {}),
    ("soft_rank, softsort", "soft_rank", {"method": "softsort"}),
    ("soft_rank, neuralsort", "soft_rank", {"method": "neuralsort"}),
    ("soft_rank, lapsum", "soft_rank", {"method": "lapsum"}),
    ("soft_rank, permutahedron", "soft_rank", {"method": "permutahedron"}),
    ("soft_rank, permutahedron, kl", "soft_rank", {"method": "permutahedron", "regularization": "kl"}),
    ("soft_rank, diffsort, odd_even", "soft_rank", {"method": "diffsort", "network": "odd_even"}),
    ("soft_rank, diffsort, bitonic", "soft_rank", {"method": "diffsort", "network": "bitonic"}),
    ("soft_rank, sinkhorn", "soft_rank", {"method": "sinkhorn"}),
    ("soft_sort, sinkhorn, unrolled", "soft_sort", {"method": "sinkhorn", "implicit": False}),
    ("soft_quantile (sinkhorn)", "soft_quantile", {}),
    ("soft_topk_mask, lapsum", "soft_topk_mask", {"method": "lapsum"}),
    ("isotonic_regression", "isotonic_regression", {}),
    # the p-norm regularizer at its default p = 4/3 (Sander et al. 2023), and the rank at p = 3/2
    ("soft_rank, permutahedron, lp", "soft_rank", {"method": "permutahedron", "regularization": "lp"}),
    ("soft_rank, permutahedron, lp, p = 3/2", "soft_rank", {"method": "permutahedron", "regularization": "lp", "p": 1.5}),
    ("soft_sort, permutahedron, lp", "soft_sort", {"method": "permutahedron", "regularization": "lp"}),
    ("soft_topk_mask, permutahedron, lp", "soft_topk_mask", {"method": "permutahedron", "regularization": "lp"}),
    ("soft_topk_magnitude, lp", "soft_topk_magnitude", {"regularization": "lp"}),
]
# O(n^2) memory (SoftSort, NeuralSort, a transport plan) or O(n) layers of O(n) (odd-even) stop here
DENSE_LONGEST = {"softsort": 2000, "neuralsort": 2000, "sinkhorn": 2000, "odd_even": 2000}


def _longest(operator: str, options: dict[str, Any]) -> float:
    method = options.get("method", "sinkhorn" if operator in ("soft_quantile", "soft_sort", "soft_rank") else "")
    return min(DENSE_LONGEST.get(method, float("inf")), DENSE_LONGEST.get(options.get("network", ""), float("inf")))


def _function(operator: str, options: dict[str, Any]) -> Callable[[Any], Any]:
    import torch

    import rankops

    if operator == "reference":
        return lambda v: torch.softmax(torch.sort(v, dim=-1)[0], dim=-1)
    if operator == "soft_quantile":
        return lambda v: rankops.soft_quantile(v, 0.3, **options)
    if operator == "soft_topk_magnitude":
        return lambda v: rankops.soft_topk_magnitude(v, 3, **options)
    if operator == "soft_topk_mask":
        return lambda v: rankops.soft_topk_mask(v, 3, **options)
    fn = getattr(rankops, operator)
    return lambda v: fn(v, **options)


def cell(operator: str, options: dict[str, Any], n: int) -> float:
    """Seconds of the first compiled forward+backward (run in a fresh process: see :func:`_child`)."""
    import warnings

    import torch

    torch.set_num_threads(1)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(4, n, generator=torch.Generator().manual_seed(0)).to(device).requires_grad_(True)
    f = _function(operator, options)
    compiled = torch.compile(lambda v: (f(v) ** 2).sum(), fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes while it compiles
        start = time.perf_counter()
        compiled(x).backward()
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start


def _child(operator: str, options: dict[str, Any], n: int) -> float:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        args = [sys.executable, "-m", "benchmarks.compile_time", "--cell", json.dumps([operator, options, n])]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:  # reported in its cell: the other cells still run
        print(f"{operator} {options} n={n} failed: {proc.stderr.strip()[-2000:]}", file=sys.stderr)
        return float("nan")
    return float(proc.stdout.strip().splitlines()[-1])


def table(lengths: list[int], cases: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Prints the table a row at a time (a row takes minutes); a cell that failed reads "failed"."""
    print("| operator, method | " + " | ".join(f"n = {n:,}" for n in lengths) + " | longest / shortest |")
    print("| --- |" + " ---: |" * (len(lengths) + 1), flush=True)
    for label, operator, options in cases:
        cells, seconds = [], []
        for n in lengths:
            if n > _longest(operator, options):
                cells.append("-")
                continue
            s = _child(operator, options, n)
            seconds.append(s)
            cells.append("failed" if s != s else f"{s:.1f}")
        ratio = f"{seconds[-1] / seconds[0]:.2f}" if len(seconds) > 1 else "-"
        print(f"| {label} | " + " | ".join(cells) + f" | {ratio} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", type=int, nargs="+", default=[100, 1000, 100_000])
    ap.add_argument("--quick", action="store_true", help="two rows at n = 16 and 32 (smoke test)")
    ap.add_argument("--rows", nargs="+", metavar="TEXT", help="only the rows whose label holds one of these (the reference always)")
    ap.add_argument("--cell", help=argparse.SUPPRESS)  # the child: one JSON [operator, options, n]
    args = ap.parse_args(argv)
    if args.cell:
        print(cell(*json.loads(args.cell)))
        return 0
    lengths, cases = args.lengths, CASES
    if args.rows:
        cases = [CASES[0]] + [c for c in CASES[1:] if any(text in c[0] for text in args.rows)]
    if args.quick:
        lengths, cases = [16, 32], [CASES[0], CASES[6]]
    print("torch.compile(fullgraph=True): seconds of the first forward+backward, (4, n) float32, fresh inductor cache\n")
    table(lengths, cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
