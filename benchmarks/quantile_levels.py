"""Several quantile levels: one transport per level (rankops) against one transport for all (OTT-JAX's interleaving).

``rankops.soft_quantile(x, levels)`` solves L problems of n x 3 (each
level's own targets 0, 1/2, 1, weighted (c - t/2, t, 1 - c - t/2), c the CDF
level (q (n - 1) + 1/2) / n of NumPy's linear position), batched
in one solve. OTT-JAX's ``soft_sort.quantile`` sorts the levels and solves
one n x (2L + 1) problem whose targets interleave L + 1 fillers with the L
blocks of width t: ``soft_sort(x, target_weights=b)[..., 1::2]`` with
``b = (q_1 - t/2, t, q_2 - q_1 - t, t, ..., 1 - q_L - t/2)`` on grid targets
(here with every q replaced by its c, so that the two forms compute the same thing).
The two agree as epsilon -> 0 (each block's value tends to the mean of the
quantile function over [c - t/2, c + t/2]) as long as the blocks do not
overlap (levels at least t apart: the one-transport form needs sorted,
separated levels, which an array of levels, being data, cannot be checked
for without reading it); at one epsilon they differ, because the interleaved
targets lie 1/(2L) apart instead of 1/2.

Times both on one seeded (B, n) float32 torch batch at the defaults
(epsilon 1e-2, implicit gradients), forward and forward+backward of
``sum(w * out)``, median of interleaved repeats in this process; the
per-level solve is the reference of each row's ratio. Also prints the
largest difference between the two at the defaults and, in float64 on a
small batch, at epsilon = 1e-4 (the limit).

    python -m benchmarks.quantile_levels [--batch 20] [--n 1000] [--levels 1 3 10 30] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved_weights(levels, t: float):
    """The 2L + 1 target weights of the one-transport form: fillers between blocks of width t (levels sorted, >= t apart)."""
    import torch

    q = torch.sort(levels).values
    gaps = torch.cat([q[:1] - t / 2, q[1:] - q[:-1] - t, 1 - q[-1:] - t / 2])  # the L + 1 fillers
    blocks = torch.full_like(q, t)
    return torch.cat([torch.stack([gaps[:-1], blocks], dim=-1).reshape(-1), gaps[-1:]])


def one_transport(rankops, x, levels, t, **options):
    """Every level from one n x (2L + 1) transport (OTT-JAX's construction), its blocks centred where soft_quantile
    centres its own: the CDF level (q (n - 1) + 1/2) / n of NumPy's linear position (OTT-JAX centres them on q)."""
    n = x.shape[-1]
    b = interleaved_weights((levels.to(x.dtype) * (n - 1) + 0.5) / n, t)
    return rankops.soft_sort(x, target_weights=b, **options)[..., 1::2]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 3, 10, 30])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: checks that it runs (benchmarks.docs --quick)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.n, args.levels, args.repeats = 2, 64, [1, 3], 1

    import torch

    import rankops

    torch.manual_seed(0)
    x = torch.randn(args.batch, args.n)
    rows = []
    for count in args.levels:
        levels = torch.linspace(0.05, 0.95, count) if count > 1 else torch.tensor([0.5])
        spacing = 0.9 / (count - 1) if count > 1 else 1.0
        t = min(0.05, spacing / 2)  # the blocks must not overlap in the one-transport form

        def per_level(v, levels=levels, t=t):
            return rankops.soft_quantile(v, levels, filler=t)

        def single(v, levels=levels, t=t):
            return one_transport(rankops, v, levels, t)

        cases = {}
        for name, fn in (("per level", per_level), ("one transport", single)):
            def fwd(fn=fn):
                with torch.no_grad():
                    return fn(x)

            def fwd_bwd(fn=fn):
                v = x.clone().requires_grad_(True)
                out = fn(v)
                (out * torch.linspace(0.5, 1.5, out.shape[-1])).sum().backward()

            cases[name] = (fwd, fwd_bwd)
        for fwd, fwd_bwd in cases.values():  # warm-up
            fwd(), fwd_bwd()
        times = {name: ([], []) for name in cases}
        for _ in range(args.repeats):  # interleaved, so drifts of the machine hit every case alike
            for name, (fwd, fwd_bwd) in cases.items():
                times[name][0].append(_timed(fwd))
                times[name][1].append(_timed(fwd_bwd))
        diff = float((per_level(x) - single(x)).abs().max())
        x64 = x[:2, :200].double()
        limit = {"epsilon": 1e-4, "tol": 1e-6, "max_iter": 20_000}
        diff_limit = float((rankops.soft_quantile(x64, levels.double(), filler=t, **limit)
                            - one_transport(rankops, x64, levels.double(), t, **limit)).abs().max())
        ref_f, ref_b = (statistics.median(v) for v in times["per level"])
        for name in cases:
            f, b = (statistics.median(v) for v in times[name])
            note = "(reference)" if name == "per level" else f"{diff:.1e} / {diff_limit:.1e}"
            rows.append(f"| {count} | {t:g} | {name} | {f * 1e3:.1f} | {f / ref_f:.2f}x | {b * 1e3:.1f} | {b / ref_b:.2f}x | {note} |")
    print(f"soft_quantile on torch CPU, float32, B = {args.batch}, n = {args.n}, defaults; median of {args.repeats} repeats")
    print()
    print("| L | filler t | form | fwd (ms) | ratio | fwd+bwd (ms) | ratio | max abs diff: defaults / epsilon 1e-4 (float64) |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
