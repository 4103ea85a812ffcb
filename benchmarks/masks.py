"""Ragged rows: a padded batch with ``mask=`` against the same batch without it, and against a loop over its rows.

B lists of lengths drawn uniformly in [n/4, n], padded to n: torch CPU,
float32, ``soft_rank`` forward+backward at each method's defaults. Three
ways to the per-list ranks: the padded batch without a mask (the cost
floor; its ranks are wrong, padding counts), the padded batch with
``mask`` (each list ranked alone), and a Python loop over the lists, each
ranked alone (what a mask replaces). Median of interleaved repeats; each
row's ratios are against the masked call measured in the same run.

    python -m benchmarks.masks [--batch 64] [--n 200] [--repeats 5]
"""

from __future__ import annotations

import argparse

from ._timing import interleaved_medians

METHODS = ("sinkhorn", "lapsum", "permutahedron", "softsort", "neuralsort", "diffsort")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat: checks that it runs (benchmarks.docs --quick)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.n, args.repeats = 4, 16, 1

    import numpy as np
    import torch

    import rankops

    rng = np.random.default_rng(0)
    lengths = rng.integers(max(1, args.n // 4), args.n + 1, size=args.batch)
    mask = torch.tensor(np.arange(args.n) < lengths[:, None])
    x = torch.tensor(rng.normal(size=(args.batch, args.n)), dtype=torch.float32)
    rows = [x[i, : int(k)] for i, k in enumerate(lengths)]

    print(f"soft_rank, torch CPU, float32, forward+backward: {args.batch} lists of {lengths.min()}-{lengths.max()} entries "
          f"padded to {args.n}; median of {args.repeats} interleaved repeats")
    print()
    print("| method | no mask (ms) | mask (ms) | loop over the lists (ms) | no mask / mask | loop / mask |")
    print("|---|---|---|---|---|---|")
    for method in METHODS:
        def padded(with_mask: bool) -> None:
            v = x.clone().requires_grad_(True)
            rankops.soft_rank(v, method=method, mask=mask if with_mask else None).sum().backward()

        def loop() -> None:
            for row in rows:
                v = row.clone().requires_grad_(True)
                rankops.soft_rank(v, method=method).sum().backward()

        medians = interleaved_medians({"no mask": lambda: padded(False), "mask": lambda: padded(True), "loop": loop}, args.repeats)
        ms = {k: 1e3 * v for k, v in medians.items()}
        print(f"| {method} | {ms['no mask']:.2f} | {ms['mask']:.2f} | {ms['loop']:.1f} | "
              f"{ms['no mask'] / ms['mask']:.2f}x | {ms['loop'] / ms['mask']:.1f}x |")


if __name__ == "__main__":
    main()
