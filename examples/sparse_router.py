"""A sparse top-k router for a mixture of experts: the routing stays exactly sparse while it learns.

Sander et al. 2023 (ICML) use their sparse top-k mask as the router of a
sparse mixture of experts: each token's gates are a projection of its router
scores onto the top-k polytope, so most gates are exactly 0 (those experts
are not run for that token) and the gates are differentiable in the scores.
This script trains such a layer, in torch, on data it generates:

- **Data.** Tokens x in R^16 (standard normal). A teacher of 8 linear
  experts routes each token to its top 2 by a linear router (hard top-2 of
  the teacher's scores, gates 1/2 each) and outputs the mean of the two
  experts' outputs in R^4, plus noise (std 0.05).
- **Student.** 8 linear experts and a linear router from the same family,
  initialized at random; three routers over the same initialization and
  token order: ``soft_topk_mask(scores, 2, method="permutahedron",
  regularization="lp", p=4/3, strength=0.2) / 2`` (sparse, this library's),
  the same with ``regularization="l2"``, and a dense softmax router
  (every expert weighted).
- **Training.** Adam (lr 1e-2), 64 tokens per step, squared error.

It prints, at steps along the training, the test error and the share of
exactly zero gates (for k = 2 of 8 experts a hard router has 75%): the
permutahedron routers keep most gates at exactly 0 from the first step to
the last, and learn; softmax never has one.

    python examples/sparse_router.py [--steps 1000] [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

EXPERTS, K, DIM, OUT = 8, 2, 16, 4
STRENGTH = 0.2  # the router scores' scale at which gates blend (scores here are of order 1-5)


def teacher(rng: np.random.Generator, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and the teacher's outputs: the mean of its top-2 experts (by its router), plus noise."""
    router = rng.normal(size=(DIM, EXPERTS))
    experts = rng.normal(size=(EXPERTS, DIM, OUT)) / np.sqrt(DIM)
    x = rng.normal(size=(tokens, DIM))
    top = np.argsort(-(x @ router), axis=-1)[:, :K]
    outs = np.einsum("td,edo->teo", x, experts)
    y = np.take_along_axis(outs, top[:, :, None], axis=1).mean(axis=1)
    return x, y + 0.05 * rng.normal(size=y.shape)


def gates(kind: str, scores):
    import torch

    import rankops

    if kind == "softmax":
        return torch.softmax(scores, dim=-1)
    opts = {"regularization": "lp", "p": 4 / 3} if kind == "sparse (p = 4/3)" else {"regularization": "l2"}
    return rankops.soft_topk_mask(scores, K, method="permutahedron", strength=STRENGTH, **opts) / K


def train(kind: str, x: np.ndarray, y: np.ndarray, xt: np.ndarray, yt: np.ndarray, steps: int, report: list[int]) -> list:
    import torch

    torch.manual_seed(0)
    router = torch.nn.Linear(DIM, EXPERTS, bias=False, dtype=torch.float64)
    experts = torch.nn.Parameter(torch.randn(EXPERTS, DIM, OUT, dtype=torch.float64) / DIM ** 0.5)
    opt = torch.optim.Adam([*router.parameters(), experts], lr=1e-2)
    X, Y, XT, YT = (torch.tensor(a) for a in (x, y, xt, yt))
    order = np.random.default_rng(1)

    def forward(inputs):
        g = gates(kind, router(inputs))
        return torch.einsum("te,ted->td", g, torch.einsum("td,edo->teo", inputs, experts)), g

    rows = []
    for step in range(steps + 1):
        if step in report:
            with torch.no_grad():
                pred, g = forward(XT)
                rows.append((step, float(((pred - YT) ** 2).mean()), float((g == 0).double().mean())))
        if step == steps:
            break
        batch = order.integers(0, len(X), size=64)
        pred, _ = forward(X[batch])
        loss = ((pred - Y[batch]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="100 steps: checks that everything runs (seconds)")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps = 100
    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    x, y = teacher(rng, 4000)
    xt, yt = x[3000:], y[3000:]
    x, y = x[:3000], y[:3000]
    report = sorted({0, args.steps // 4, args.steps // 2, args.steps})
    print(f"Mixture of {EXPERTS} linear experts, top-{K} routing, {args.steps} Adam steps: test squared error / share of "
          "gates exactly 0\n")
    print("| router | " + " | ".join(f"step {s}" for s in report) + " |")
    print("|---|" + "---|" * len(report))
    for kind in ("sparse (p = 4/3)", "sparse (l2)", "softmax"):
        rows = train(kind, x, y, xt, yt, args.steps, report)
        print(f"| {kind} | " + " | ".join(f"{err:.3f} / {zeros:.0%}" for _, err, zeros in rows) + " |")
    print(f"\n(teacher noise: squared error 0.0025; {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
