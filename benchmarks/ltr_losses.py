"""Learning-to-rank losses: rankops against allRank's implementation of the same loss, forward+backward on torch CPU.

B ragged lists of lengths drawn uniformly in [n/2, n], padded to n (allRank
marks padding with the label -1; rankops takes ``mask = target != -1``),
graded labels 0..4, float32, one thread. Each row times one loss at
allRank's defaults: the batch's loss (allRank's mean; rankops' mean of its
per-list values), then its gradient; median of interleaved repeats, and
the ratio rankops / allRank measured in the same run. The values are
printed too: equal where allRank's batch reduction is the mean of per-list
values.

allRank (PyPI ``allRank``, which pins torch <= 1.8) is loaded from its
installed sources with its data and device helpers stubbed, so that only its
loss code runs: ``pip install --no-deps allRank``. Without it, only the
rankops column is printed.

    python -m benchmarks.ltr_losses [--batch 256] [--n 128] [--repeats 7]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import types
from typing import Any, Callable

from ._timing import interleaved_medians


def load_allrank() -> Any:
    """allRank's ``allrank.models.losses`` with its dataset and device modules stubbed (they import torchvision, gcsfs), or None."""
    if importlib.util.find_spec("allrank") is None:
        return None
    import torch

    data = types.ModuleType("allrank.data.dataset_loading")
    data.PADDED_Y_VALUE = -1  # type: ignore[attr-defined]
    utils = types.ModuleType("allrank.models.model_utils")
    utils.get_torch_device = lambda: torch.device("cpu")  # type: ignore[attr-defined]
    sys.modules.setdefault("allrank.data.dataset_loading", data)
    sys.modules.setdefault("allrank.models.model_utils", utils)
    return importlib.import_module("allrank.models.losses")


def cases(allrank: Any, rankops_losses: Any, mask: Any) -> dict[str, tuple[Callable[..., Any], Callable[..., Any] | None]]:
    """name -> (rankops loss of (pred, target), allRank loss of (pred, padded target))."""
    ar = allrank

    def ours(fun: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        return lambda p, t: fun(p, t, mask=mask, **options).mean()

    def theirs(name: str, **options: Any) -> Callable[..., Any] | None:
        return None if ar is None else (lambda p, t: getattr(ar, name)(p, t, **options))

    L = rankops_losses
    return {
        "listnet": (ours(L.listnet_loss), theirs("listNet")),
        "binary_listnet": (ours(L.binary_listnet_loss), theirs("binary_listNet")),
        "listmle": (ours(L.listmle_loss), theirs("listMLE")),
        "ranknet": (ours(L.ranknet_loss), theirs("rankNet")),
        "ranknet (weight_by_diff)": (ours(L.ranknet_loss, weight_by_diff=True), theirs("rankNet", weight_by_diff=True)),
        "lambda (ndcgLoss2PP)": (lambda p, t: L.lambda_loss(p, t, weighing_scheme="ndcgLoss2PP", mask=mask).sum(),
                                 theirs("lambdaLoss", weighing_scheme="ndcgLoss2PP_scheme")),
        "lambda (lambdaRank, k=10)": (lambda p, t: L.lambda_loss(p, t, weighing_scheme="lambdaRank", k=10, mask=mask).sum(),
                                      theirs("lambdaLoss", weighing_scheme="lambdaRank_scheme", k=10)),
        "approx_ndcg": (ours(L.approx_ndcg_loss), theirs("approxNDCGLoss")),
        "neural_ndcg": (ours(L.neural_ndcg_loss), theirs("neuralNDCG")),
        "neural_ndcg (transposed)": (ours(L.neural_ndcg_loss, transposed=True), theirs("neuralNDCG_transposed")),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat: checks that it runs (benchmarks.docs --quick)")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.n, args.repeats = 4, 8, 1

    import numpy as np
    import torch

    import rankops.losses

    torch.set_num_threads(1)
    allrank = load_allrank()
    rng = np.random.default_rng(0)
    lengths = rng.integers(max(1, args.n // 2), args.n + 1, size=args.batch)
    valid = np.arange(args.n) < lengths[:, None]
    labels = np.where(valid, rng.integers(0, 5, size=(args.batch, args.n)), -1).astype(np.float32)
    pred0 = torch.tensor(rng.normal(size=(args.batch, args.n)), dtype=torch.float32)
    target, mask = torch.tensor(labels), torch.tensor(valid)

    source = "allRank " + (getattr(sys.modules.get("allrank"), "__version__", "") or "(installed)") if allrank else "allRank not installed"
    print(f"torch CPU, float32, 1 thread, forward+backward: {args.batch} lists of {lengths.min()}-{lengths.max()} items "
          f"padded to {args.n}; median of {args.repeats} interleaved repeats; {source}")
    print()
    print("| loss | rankops (ms) | allRank (ms) | rankops / allRank | rankops value | allRank value |")
    print("|---|---|---|---|---|---|")
    for name, (ours, theirs) in cases(allrank, rankops.losses, mask).items():
        def run(fun: Callable[..., Any]) -> float:
            p = pred0.clone().requires_grad_(True)
            value = fun(p, target)
            value.backward()
            return float(value.detach())

        fns = {"rankops": lambda: run(ours)}
        if theirs is not None:
            fns["allRank"] = lambda: run(theirs)
        values = {k: f() for k, f in fns.items()}
        ms = {k: 1e3 * v for k, v in interleaved_medians(fns, args.repeats).items()}
        if theirs is None:
            print(f"| {name} | {ms['rankops']:.2f} | | | {values['rankops']:.6f} | |")
        else:
            print(f"| {name} | {ms['rankops']:.2f} | {ms['allRank']:.2f} | {ms['rankops'] / ms['allRank']:.2f}x | "
                  f"{values['rankops']:.6f} | {values['allRank']:.6f} |")


if __name__ == "__main__":
    main()
