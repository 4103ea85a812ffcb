"""Sinkhorn ``soft_sort(x, topk=k)`` against the full soft sort it replaces.

The top-k construction transports the n entries onto k + 1 targets (k of
mass 1/n, one filler of mass (n - k)/n) instead of n, so its cost should be
about (k + 1)/n of the full sort's. Times ``rankops.soft_sort(x, topk=k)``
and ``rankops.soft_sort(x)`` (defaults otherwise) on one seeded (B, n)
float32 batch, forward and forward+backward of ``sum(w * out)``, on torch
CPU, median of interleaved repeats in this process; the full sort is the
reference of each row's ratio. Also prints how far the top-k values are
from the last k of the full soft sort: the two are equal only in the limit
epsilon -> 0. At one epsilon the top-k targets lie 1/k apart and the full
sort's 1/(n - 1), so the full sort blurs its largest values more (OTT-JAX's
top-k, which rankops matches, has the same targets).

    python -m benchmarks.topk_sort [--batch 20] [--n 1000] [--ks 1 10 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time


def _timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: checks that it runs (benchmarks.docs --quick)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.n, args.ks, args.repeats = 2, 64, [1, 10], 1

    import torch

    import rankops

    torch.manual_seed(0)
    x = torch.randn(args.batch, args.n)

    def case(k):
        kw = {} if k is None else {"topk": k}

        def fwd():
            with torch.no_grad():
                return rankops.soft_sort(x, **kw)

        def fwd_bwd():
            v = x.clone().requires_grad_(True)
            out = rankops.soft_sort(v, **kw)
            (out * torch.linspace(0.5, 1.5, out.shape[-1])).sum().backward()

        return fwd, fwd_bwd

    names = ["full"] + [f"topk={k}" for k in args.ks]
    cases = {name: case(None if name == "full" else k) for name, k in zip(names, [None, *args.ks])}
    for fwd, fwd_bwd in cases.values():  # warm-up
        fwd(), fwd_bwd()
    times = {name: ([], []) for name in names}
    for _ in range(args.repeats):  # interleaved, so drifts of the machine hit every case alike
        for name, (fwd, fwd_bwd) in cases.items():
            times[name][0].extend(_timed(fwd, 1))
            times[name][1].extend(_timed(fwd_bwd, 1))
    full = rankops.soft_sort(x)
    print(f"soft_sort on torch CPU, float32, B = {args.batch}, n = {args.n}, defaults; median of {args.repeats} repeats")
    print()
    print("| case | fwd (ms) | ratio | fwd+bwd (ms) | ratio | max abs diff to the full sort's last k |")
    print("|---|---|---|---|---|---|")
    ref_f, ref_b = (statistics.median(t) for t in times["full"])
    for name, k in zip(names, [None, *args.ks]):
        f, b = (statistics.median(t) for t in times[name])
        diff = "(reference)" if k is None else f"{float((rankops.soft_sort(x, topk=k) - full[:, -k:]).abs().max()):.1e}"
        print(f"| {name} | {f * 1e3:.1f} | {f / ref_f:.3f}x | {b * 1e3:.1f} | {b / ref_b:.3f}x | {diff} |")


if __name__ == "__main__":
    main()
