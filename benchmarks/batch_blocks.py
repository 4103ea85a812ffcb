"""An eager batch of Sinkhorn problems on a CPU, whole or in blocks that fit a core's cache.

Prints one table: the time (median of interleaved repeats, ms) of
``soft_rank(x, method="sinkhorn")`` on a (B, n) batch of standard normal
rows, torch (eager, one thread) and NumPy, float64 and float32: the
forward alone, and on torch forward+backward of ``sum(ranks ** 2)`` with the
implicit backward (the default) and unrolled (``implicit=False``). Three
routes of the same call, measured in the same run:

- "whole": the batch's iterations over all its (n, n) matrices at once
  (the route before blocks: ``WHOLE_BYTES`` raised past the batch);
- "blocks": rankops' route, blocks of problems whose matrices hold about
  ``CACHE_BYTES`` (1 MiB); batches of at most ``WHOLE_BYTES`` (2 MiB), and
  problems of less than ``SMALL_PROBLEM_BYTES`` (128 KiB: n < 128 in
  float64, n < 182 in float32), whole;
- "rows": the rows one call each, the bound for a block of one problem.

"MiB" is one (B, n, n) matrix; the ratio is whole's time over the blocks'.
Both routes give the same numbers up to the order in which a matrix
product sums (tests/test_cache_blocks.py).

``--backward``: the implicit backward alone instead (the forward run
once, untimed, in blocks; its graph kept): torch's ``autograd.grad`` and
NumPy's ``rankops.vjp`` pullback of the same loss, whole against blocks
(the CG's and the products with the plan).

Usage: python -m benchmarks.batch_blocks [--repeats 3] [--quick] [--backward]
"""

from __future__ import annotations

import argparse
import functools
import platform
from typing import Any, Callable
from unittest import mock

import numpy as np

import rankops
from rankops._lib._adapters import _generic

from ._timing import interleaved_medians

SIZES = ((64, 100), (64, 200), (4, 300), (32, 300), (16, 600), (20, 1000))


def _call(backend: str, x: np.ndarray, mode: str) -> Callable[[Any], Any]:
    """One call on a batch of ``backend``'s arrays: the forward, or forward+backward (``mode``)."""
    if backend == "numpy":
        return lambda a: rankops.soft_rank(a, method="sinkhorn")
    import torch

    def run(a: Any) -> Any:
        if mode == "fwd":
            with torch.no_grad():
                return rankops.soft_rank(a, method="sinkhorn")
        t = a.detach().requires_grad_(True)
        ranks = rankops.soft_rank(t, method="sinkhorn", implicit=mode == "fwd+bwd implicit")
        return torch.autograd.grad((ranks ** 2).sum(), t)[0]

    return run


def _timed_row(backend: str, dtype: str, label: str, batch: int, n: int, call: Callable[[], Any],
               row_calls: list[Callable[[], Any]], repeats: int) -> str:
    """One table row: ``call`` on the batch whole (``WHOLE_BYTES`` raised past it) and in blocks, interleaved with the
    rows one call each (``row_calls``)."""

    def whole() -> Any:
        with mock.patch.object(_generic, "WHOLE_BYTES", 1 << 62):
            return call()

    times = interleaved_medians({"whole": whole, "blocks": call, "rows": lambda: [c() for c in row_calls]}, repeats)
    mib = batch * n * n * np.dtype(dtype).itemsize / 2**20
    whole_ms, blocks_ms, rows_ms = (times[k] * 1e3 for k in ("whole", "blocks", "rows"))
    return (f"| {backend} | {dtype} | {label} | {batch} | {n} | {mib:.1f} | {whole_ms:.1f} | {blocks_ms:.1f} | "
            f"{whole_ms / blocks_ms:.2f}x | {rows_ms:.1f} |")


def _row(backend: str, dtype: str, batch: int, n: int, mode: str, repeats: int) -> str:
    x = np.random.default_rng(n).normal(size=(batch, n)).astype(dtype)
    if backend == "torch":
        import torch

        a = torch.asarray(x)
        rows = [a[i : i + 1] for i in range(batch)]
    else:
        a, rows = x, [x[i : i + 1] for i in range(batch)]
    call = _call(backend, x, mode)
    return _timed_row(backend, dtype, mode, batch, n, lambda: call(a), [functools.partial(call, r) for r in rows], repeats)


def _backward_row(backend: str, dtype: str, batch: int, n: int, repeats: int) -> str:
    x = np.random.default_rng(n).normal(size=(batch, n)).astype(dtype)

    def pullback(a: Any) -> Callable[[], Any]:
        if backend == "numpy":
            ranks, pull = rankops.vjp(rankops.soft_rank, a, method="sinkhorn")
            return lambda: pull(2 * ranks)
        import torch

        t = torch.asarray(a).requires_grad_(True)
        loss = (rankops.soft_rank(t, method="sinkhorn") ** 2).sum()
        return lambda: torch.autograd.grad(loss, t, retain_graph=True)

    return _timed_row(backend, dtype, "bwd implicit", batch, n, pullback(x), [pullback(x[i : i + 1]) for i in range(batch)],
                      repeats)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: checks that it runs (benchmarks.docs --quick)")
    parser.add_argument("--backward", action="store_true", help="the implicit backward alone, the forward untimed")
    args = parser.parse_args(argv)
    sizes = ((8, 64), (4, 300)) if args.quick else SIZES
    repeats = 1 if args.quick else args.repeats
    import torch

    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, numpy {np.__version__}, {platform.machine()}, one thread; "
          f"CACHE_BYTES {_generic.CACHE_BYTES >> 10} KiB, WHOLE_BYTES {_generic.WHOLE_BYTES >> 20} MiB, "
          f"SMALL_PROBLEM_BYTES {_generic.SMALL_PROBLEM_BYTES >> 10} KiB; "
          f"median of {repeats} interleaved runs; ratio: whole over blocks")
    print("| backend | dtype | pass | B | n | MiB | whole (ms) | blocks (ms) | ratio | rows (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    if args.backward:
        for backend, dtype in (("torch", "float64"), ("torch", "float32"), ("numpy", "float64")):
            for batch, n in sizes[1:]:
                print(_backward_row(backend, dtype, batch, n, repeats), flush=True)
        return
    for backend, modes in (("torch", ("fwd", "fwd+bwd implicit", "fwd+bwd unrolled")), ("numpy", ("fwd",))):
        for dtype in ("float64", "float32"):
            for mode in modes:
                for batch, n in sizes:
                    print(_row(backend, dtype, batch, n, mode, repeats), flush=True)


if __name__ == "__main__":
    main()
