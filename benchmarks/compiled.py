"""soft_rank under ``torch.compile(fullgraph=True)`` against eager, and against torchsort's eager C++ call, in one run.

One table: forward+backward time (median of interleaved repeats, ms,
float32, torch CPU or CUDA when present) of ``soft_rank`` per method,
eager and compiled, next to ``torchsort.soft_rank`` when installed, with
the ratio compiled / torchsort, and the seconds the first
compiled call took (tracing and inductor). The permutahedron and LapSum
run at torchsort's default temperature (``strength=1.0``, ``alpha=1.0``,
regularization l2), not at rankops' default ``softness=1``, which sets
each row's own (sharper, at these rows) and so is not the same problem. The
Sinkhorn rows run at its defaults and smaller n: its default plan is n x n.

Usage: python -m benchmarks.compiled [--repeats 7] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import warnings
from typing import Any, Callable

from ._timing import interleaved_medians

# torchsort's default temperature, for the methods compared with it
NATIVE = {"permutahedron": {"strength": 1.0}, "lapsum": {"alpha": 1.0}}
CASES = [("permutahedron", 20, 1000), ("lapsum", 20, 1000), ("permutahedron", 1, 100_000), ("lapsum", 1, 100_000), ("sinkhorn", 20, 200)]


def _fwd_bwd(torch: Any, f: Callable[[Any], Any], x: Any, ct: Any) -> Callable[[], Any]:
    def run() -> Any:
        leaf = x.detach().requires_grad_(True)
        f(leaf).backward(ct)
        return leaf.grad

    return run


def table(cases: list[tuple[str, int, int]], repeats: int) -> list[str]:
    import torch

    import rankops

    device = "cuda" if torch.cuda.is_available() else "cpu"
    has_torchsort = importlib.util.find_spec("torchsort") is not None
    rows = [
        f"soft_rank forward+backward on torch {device}, float32, median of {repeats} interleaved repeats (ms)",
        "",
        "| method | B | n | eager | compiled | torchsort | compiled / torchsort | first compiled call (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, b, n in cases:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(b, n, generator=gen).to(device)
        ct = torch.randn(b, n, generator=gen).to(device)

        def f(v: Any, method: str = method) -> Any:
            return rankops.soft_rank(v, method=method, **NATIVE.get(method, {}))

        torch._dynamo.reset()
        compiled = torch.compile(f, fullgraph=True)
        fns = {"eager": _fwd_bwd(torch, f, x, ct), "compiled": _fwd_bwd(torch, compiled, x, ct)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes while it compiles
            t0 = time.perf_counter()
            fns["compiled"]()
            first = time.perf_counter() - t0
        if has_torchsort and method != "sinkhorn":
            import torchsort

            fns["torchsort"] = _fwd_bwd(torch, torchsort.soft_rank, x, ct)
        ms = {k: 1e3 * v for k, v in interleaved_medians(fns, repeats).items()}
        ref = ms.get("torchsort")
        ratio = f"{ms['compiled'] / ref:.2f}" if ref else "-"
        rows.append(
            f"| {method} | {b} | {n} | {ms['eager']:.2f} | {ms['compiled']:.2f} | {f'{ref:.2f}' if ref else '-'} | {ratio} | {first:.1f} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: checks that every row runs")
    args = ap.parse_args(argv)
    cases = CASES
    if args.quick:
        cases, args.repeats = [(m, 2, 16) for m in ("permutahedron", "lapsum", "sinkhorn")], 1
    print("\n".join(table(cases, args.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
