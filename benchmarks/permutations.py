"""rankops SoftSort / NeuralSort on torch next to the papers' own PyTorch code.

The references are the code printed in the SoftSort paper's appendix F
(Figs. 5 and 6), with NeuralSort's O(n^3) product re-associated as its
appendix A.4.5 prescribes. Both sides take the same float32 (B, n) scores
and return the (B, n, n) descending relaxed permutation matrix; the
backward pass pushes a fixed random cotangent through it.

Usage: python -m benchmarks.permutations [--sizes 100 1000 4000] [--batch 20] [--repeats 5]
"""

from __future__ import annotations

import argparse
import platform

import torch

import rankops

from ._timing import interleaved_medians


def paper_neural_sort(s: torch.Tensor, tau: float) -> torch.Tensor:
    """Fig. 5 of the SoftSort appendix, with the A.4.5 O(n^2) association."""
    n = s.size()[1]
    one = torch.ones((n, 1), dtype=torch.float32)
    a_s = torch.abs(s - s.permute(0, 2, 1))
    b = torch.matmul(torch.matmul(a_s, one), torch.transpose(one, 0, 1))
    scaling = (n + 1 - 2 * (torch.arange(n) + 1)).type(torch.float32)
    c = torch.matmul(s, scaling.unsqueeze(0))
    p_max = (c - b).permute(0, 2, 1)
    return torch.nn.Softmax(-1)(p_max / tau)


def paper_soft_sort(s: torch.Tensor, tau: float) -> torch.Tensor:
    """Fig. 6 of the SoftSort appendix (d = |.|)."""
    s_sorted = s.sort(descending=True, dim=1)[0]
    pairwise_distances = (s.transpose(1, 2) - s_sorted).abs().neg() / tau
    return pairwise_distances.softmax(-1)


CASES = {
    "SoftSort": (paper_soft_sort, rankops.softsort),
    "NeuralSort": (paper_neural_sort, rankops.neuralsort),
}


def bench(batch: int, n: int, repeats: int, tau: float = 1.0) -> list[tuple]:
    gen = torch.Generator().manual_seed(n)
    scores = torch.randn(batch, n, generator=gen)
    cot = torch.randn(batch, n, n, generator=gen)
    rows = []
    for name, (paper, ours) in CASES.items():
        # correctness first: the two must agree before their times mean anything
        err = (paper(scores[..., None], tau) - ours(scores, tau=tau)).abs().max().item()

        def fwd_ref():
            with torch.no_grad():
                return paper(scores[..., None], tau)

        def fwd_ours():
            with torch.no_grad():
                return ours(scores, tau=tau)

        def fb_ref():
            s = scores[..., None].clone().requires_grad_(True)
            paper(s, tau).backward(cot)

        def fb_ours():
            s = scores.clone().requires_grad_(True)
            ours(s, tau=tau).backward(cot)

        t = interleaved_medians({"fr": fwd_ref, "fo": fwd_ours, "br": fb_ref, "bo": fb_ours}, repeats)
        rows.append((name, n, t["fr"], t["fo"], t["br"], t["bo"], err))
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 4000])
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat: checks that it runs (benchmarks.docs --quick)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.batch, args.repeats = [16, 64], 2, 1
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}; "
          f"B={args.batch}, float32, tau=1, median of {args.repeats} interleaved runs")
    head = "| operator | n | paper fwd (ms) | rankops fwd (ms) | ratio | paper fwd+bwd (ms) | rankops fwd+bwd (ms) | ratio | max abs diff |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for n in args.sizes:
        for name, n_, fr, fo, br, bo, err in bench(args.batch, n, args.repeats):
            print(f"| {name} | {n_} | {fr*1e3:.2f} | {fo*1e3:.2f} | {fo/fr:.2f}x | {br*1e3:.2f} | {bo*1e3:.2f} | {bo/br:.2f}x | {err:.1e} |",
                  flush=True)


if __name__ == "__main__":
    main()
