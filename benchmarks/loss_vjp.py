"""Gradients of the losses without torch or JAX: ``rankops.vjp`` on NumPy against the forward alone and torch autograd.

B lists of n items, float64, one thread, each loss at its defaults with a
padding mask (lists of n/2 to n items). Three timings per loss: the loss on
NumPy (the forward), ``rankops.vjp`` on NumPy with its pullback applied (the
forward on the recording namespace's tape, then the backward), and torch's
forward+backward of the same loss on the same data. Median of interleaved
repeats; each ratio against the NumPy forward measured in the same run. The
last column is the largest difference between the NumPy and the torch
gradients, relative to the largest torch entry.

    python -m benchmarks.loss_vjp [--batch 64] [--n 100] [--repeats 7]
"""

from __future__ import annotations

import argparse
from typing import Any

from ._timing import interleaved_medians


def cases(losses: Any, graded: Any, real: Any, labels: Any) -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """name -> (loss, its arguments after the scores), as NumPy arrays."""
    return {
        "spearman_loss": (losses.spearman_loss, (real,)),
        "soft_spearman": (losses.soft_spearman, (real,)),
        "topk_loss": (losses.topk_loss, (labels, 5)),
        "ndcg_loss": (losses.ndcg_loss, (graded,)),
        "quantile_loss": (losses.quantile_loss, (real, 0.3)),
        "permutation_loss": (losses.permutation_loss, (real,)),
        "topk_cross_entropy": (losses.topk_cross_entropy, (labels, [0.5, 0.5])),
        "listnet_loss": (losses.listnet_loss, (graded,)),
        "listmle_loss": (losses.listmle_loss, (graded,)),
        "ranknet_loss": (losses.ranknet_loss, (graded,)),
        "lambda_loss": (losses.lambda_loss, (graded,)),
        "approx_ndcg_loss": (losses.approx_ndcg_loss, (graded,)),
        "neural_ndcg_loss": (losses.neural_ndcg_loss, (graded,)),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat: checks that it runs (benchmarks.docs --quick)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.n, args.repeats = 4, 12, 1

    import numpy as np
    import torch

    import rankops
    import rankops.losses

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    lengths = rng.integers(max(1, args.n // 2), args.n + 1, size=args.batch)
    mask = np.arange(args.n) < lengths[:, None]
    x = rng.normal(size=(args.batch, args.n))
    graded = rng.integers(0, 5, size=(args.batch, args.n))
    real = rng.normal(size=(args.batch, args.n))
    labels = np.minimum(rng.integers(0, args.n, size=args.batch), lengths - 1)
    ct = np.ones(args.batch)

    print(f"float64, 1 thread: {args.batch} lists of {lengths.min()}-{lengths.max()} items padded to {args.n}, each loss "
          f"at its defaults; median of {args.repeats} interleaved repeats")
    print()
    print("| loss | NumPy forward (ms) | NumPy rankops.vjp + pullback (ms) | torch forward+backward (ms) | vjp / forward | "
          "torch / forward | gradient difference |")
    print("|---|---|---|---|---|---|---|")
    as_torch = {id(a): torch.asarray(a) for a in (graded, real, labels, mask)}
    for name, (loss, rest) in cases(rankops.losses, graded, real, labels).items():
        rest_t = tuple(as_torch.get(id(a), a) for a in rest)
        grads: dict[str, Any] = {}

        def numpy_vjp() -> None:
            _, vjp_fn = rankops.vjp(loss, x, *rest, mask=mask)
            grads["numpy"] = vjp_fn(ct)[0]

        def torch_backward() -> None:
            leaf = torch.asarray(x).requires_grad_(True)
            loss(leaf, *rest_t, mask=as_torch[id(mask)]).sum().backward()
            grads["torch"] = leaf.grad.numpy()

        medians = interleaved_medians({"forward": lambda: loss(x, *rest, mask=mask), "vjp": numpy_vjp, "torch": torch_backward},
                                      args.repeats)
        ms = {k: 1e3 * v for k, v in medians.items()}
        scale = max(float(np.max(np.abs(grads["torch"]))), 1e-300)
        diff = float(np.max(np.abs(grads["numpy"] - grads["torch"]))) / scale
        print(f"| {name} | {ms['forward']:.2f} | {ms['vjp']:.2f} | {ms['torch']:.2f} | {ms['vjp'] / ms['forward']:.2f}x | "
              f"{ms['torch'] / ms['forward']:.2f}x | {diff:.1e} |")


if __name__ == "__main__":
    main()
