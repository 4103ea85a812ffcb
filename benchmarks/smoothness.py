"""Central differences against the gradient at the defaults, with and without the implicit forward's Newton polish.

OTT-JAX's Jacobian check, over many seeds: b = 10 rows of n = 40 uniform
entries, ``soft_rank`` / ``soft_sort`` (``num_targets=20``, output 5 of
each row) and ``soft_quantile(q=0.3)``, a random mix of the rows' outputs,
a random unit direction ``d``; the central difference at h = 1e-3 against
``<d, grad>``, float64 NumPy (``rankops.vjp``) and float32 torch (implicit
and unrolled gradients). Prints the share of seeds where they differ by more than 10% and the largest relative
difference, then the time of a torch float32 forward+backward of
``soft_rank`` (implicit and unrolled) with the polish against without it
(``rankops._solvers.sinkhorn.POLISH_STEPS`` set to 0 in this process), median
of interleaved repeats: the reference of each row's ratio is the call
without it.

    python -m benchmarks.smoothness [--seeds 100] [--repeats 7]
"""

from __future__ import annotations

import argparse
import functools

from ._timing import interleaved_medians

H = 1e-3


def _agreement(rankops, np, torch, op: str, seed: int, dtype: str, implicit: bool = True) -> float:
    """``|difference - gradient| / |gradient|`` along a random direction at one seed."""
    rng = np.random.default_rng(seed)
    z = rng.uniform(size=(10, 40))
    mix = rng.normal(size=10) / 10
    d = rng.uniform(size=z.shape) - 0.5
    d /= np.linalg.norm(d)

    fn = getattr(rankops, op)
    args, options = ((0.3,), {}) if op == "soft_quantile" else ((), {"num_targets": 20})
    options["implicit"] = implicit

    def out(v):
        value = fn(v, *args, **options)
        return value if op == "soft_quantile" else value[:, 5]

    if dtype == "float64":
        def loss(v):
            return float(np.sum(out(v) * mix))

        value, vjp_fn = rankops.vjp(fn, z, *args, **options)
        ct = np.zeros_like(value)
        if ct.ndim == 1:
            ct = mix
        else:
            ct[:, 5] = mix
        exact = float(np.sum(d * vjp_fn(ct)[0]))
        fd = (loss(z + H * d) - loss(z - H * d)) / (2 * H)
    else:
        zt, mt, dt = (torch.tensor(a, dtype=torch.float32) for a in (z, mix, d))
        v = zt.clone().requires_grad_(True)
        (out(v) * mt).sum().backward()
        exact = float((dt * v.grad).sum())
        with torch.no_grad():
            fd = float(((out(zt + H * dt) - out(zt - H * dt)) * mt).sum()) / (2 * H)
    return abs(fd - exact) / abs(exact)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="few seeds, small sizes, one repeat: checks that it runs (benchmarks.docs --quick)")
    args = parser.parse_args(argv)
    sizes = [(64, 40), (32, 200), (8, 1000)]
    if args.quick:
        args.seeds, args.repeats, sizes = 3, 1, [(4, 40)]

    import numpy as np
    import torch

    import rankops
    from rankops._solvers import sinkhorn as solver

    polish = solver.POLISH_STEPS

    def with_steps(steps: int, fn):
        solver.POLISH_STEPS = steps
        try:
            return fn()
        finally:
            solver.POLISH_STEPS = polish

    print(f"Central difference (h = {H:g}) against the gradient, defaults, b = 10, n = 40, {args.seeds} seeds")
    print()
    print("| operator | dtype | gradient | Newton polish | seeds off by > 10% | largest relative difference |")
    print("|---|---|---|---|---|---|")
    # float64 through rankops.vjp on NumPy (the implicit rule); float32 on torch, implicit and unrolled
    modes = (("float64", True), ("float32", True), ("float32", False))
    for op in ("soft_rank", "soft_sort", "soft_quantile"):
        for dtype, implicit in modes:
            for steps in (0, polish):
                errs = with_steps(steps, lambda: [_agreement(rankops, np, torch, op, s, dtype, implicit) for s in range(args.seeds)])
                off = sum(e > 0.1 for e in errs)
                mode = "implicit" if implicit else "unrolled"
                print(f"| {op} | {dtype} | {mode} | {'on' if steps else 'off'} | {off} of {args.seeds} | {max(errs):.3g} |")
    print()
    print(f"soft_rank on torch CPU, float32, defaults, forward+backward; median of {args.repeats} interleaved repeats")
    print()
    print("| B x n | gradient | polish | fwd+bwd (ms) | ratio |")
    print("|---|---|---|---|---|")
    torch.manual_seed(0)
    for batch, n in sizes:
        x = torch.randn(batch, n)
        for implicit in (True, False):

            def call():
                v = x.clone().requires_grad_(True)
                rankops.soft_rank(v, implicit=implicit).sum().backward()

            medians = interleaved_medians({steps: functools.partial(with_steps, steps, call) for steps in (0, polish)}, args.repeats)
            ref = medians[0]
            mode = "implicit" if implicit else "unrolled"
            for steps, t in medians.items():
                print(f"| {batch}x{n} | {mode} | {'on' if steps else 'off (reference)'} | {t * 1e3:.1f} | {t / ref:.2f}x |")


if __name__ == "__main__":
    main()
