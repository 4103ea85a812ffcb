"""Learning to rank on MSLR-shaped data: every rankops ranking loss trains the same scorer, on torch and on JAX.

Data. MSLR-WEB10K (Qin & Liu 2013: 136 features per query-document pair,
graded relevance 0-4, lists of varying length) cannot be downloaded offline,
so this script generates data of its shape from a known relevance model:
queries of 1 to 200 documents (uniform), 136 standard normal features with a
per-query offset, a latent relevance ``x . w + 0.5 tanh(x . v)`` plus noise
(``w`` sparse: 24 informative features), cut into grades 0-4 at the
quantiles that give MSLR's label shares (about 52%, 32%, 13%, 2%, 1%).
Lists are padded to 200 and ``mask=`` marks the documents.

Model and training. A scorer ``136 -> 32 (tanh) -> 1``, the same
initialization for every loss and framework, Adam (lr 3e-3) on mini-batches
of 32 queries. Each loss is rankops' with its defaults (allRank's), the
batch's mean of the per-list values (``lambda_loss``: the sum, as allRank);
the ``ndcg_loss`` row uses the permutahedron's soft ranks; ``mse`` regresses
the labels (a pointwise baseline).

Metric. ``rankops.metrics.ndcg`` at 1, 5 and 10 (gains ``2^rel - 1``) on
held-out queries, averaged over those with a relevant document; the oracle
row scores documents by the true latent relevance (the noise is the gap to
1), the random row by the untrained scorer.

    python examples/learning_to_rank.py [--queries 600] [--steps 150] [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import rankops
import rankops.losses as L

FEATURES, LONGEST, HIDDEN = 136, 200, 32
SHARES = (0.52, 0.32, 0.13, 0.02, 0.01)  # MSLR-WEB10K's label shares, grades 0-4

LOSSES = {
    "listnet": lambda s, t, m: L.listnet_loss(s, t, mask=m).mean(),
    "listmle": lambda s, t, m: L.listmle_loss(s, t, mask=m).mean(),
    "ranknet": lambda s, t, m: L.ranknet_loss(s, t, mask=m).mean(),
    "lambda (ndcgLoss2PP)": lambda s, t, m: L.lambda_loss(s, t, weighing_scheme="ndcgLoss2PP", mask=m).sum(),
    "approx_ndcg": lambda s, t, m: L.approx_ndcg_loss(s, t, mask=m).mean(),
    "neural_ndcg": lambda s, t, m: L.neural_ndcg_loss(s, t, mask=m).mean(),
    "smooth_ap": lambda s, t, m: L.smooth_ap_loss(s, t, mask=m).mean(),
    "ndcg_loss (permutahedron)": lambda s, t, m: L.ndcg_loss(s, t, mask=m).mean(),
    "mse": lambda s, t, m: (((s - t) ** 2) * m).sum() / m.sum(),
}


def make_data(queries: int, longest: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x, grades, mask, latent)``: (Q, longest, 136) features, (Q, longest) grades 0-4, mask, true relevance."""
    rng = np.random.default_rng(seed)
    w = np.zeros(FEATURES)
    w[rng.choice(FEATURES, 24, replace=False)] = rng.normal(size=24)
    v = rng.normal(size=FEATURES) / np.sqrt(FEATURES)
    lengths = rng.integers(1, longest + 1, size=queries)
    mask = np.arange(longest) < lengths[:, None]
    x = rng.normal(size=(queries, longest, FEATURES)) + 0.5 * rng.normal(size=(queries, 1, FEATURES))
    latent = x @ w / np.sqrt(24) + 0.5 * np.tanh(x @ v)
    noisy = latent + 0.3 * rng.normal(size=latent.shape)
    cuts = np.quantile(noisy[mask], np.cumsum(SHARES)[:-1])
    grades = np.searchsorted(cuts, noisy).astype(np.float64)
    return x, np.where(mask, grades, 0.0), mask, latent


def init(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(FEATURES, HIDDEN)) / np.sqrt(FEATURES), np.zeros(HIDDEN), rng.normal(size=(HIDDEN, 1)) / np.sqrt(HIDDEN)]


def ndcg_at(scores: np.ndarray, grades: np.ndarray, mask: np.ndarray) -> list[float]:
    some = (np.where(mask, grades, 0) > 0).any(axis=-1)
    return [float(np.mean(rankops.metrics.ndcg(scores, grades, k, mask=mask)[some])) for k in (1, 5, 10)]


def train_torch(loss, data, params, steps: int, batch: int, seed: int) -> np.ndarray:
    import torch

    torch.set_num_threads(1)
    x, t, m = (torch.tensor(a) for a in data)
    ps = [torch.tensor(p, requires_grad=True) for p in params]
    opt = torch.optim.Adam(ps, lr=3e-3)
    rng = np.random.default_rng(seed)

    def score(xb):
        return (torch.tanh(xb @ ps[0] + ps[1]) @ ps[2])[..., 0]

    for _ in range(steps):
        idx = torch.tensor(rng.choice(len(x), batch, replace=False))
        opt.zero_grad()
        loss(score(x[idx]), t[idx], m[idx]).backward()
        opt.step()
    return [p.detach().numpy() for p in ps]


def train_jax(loss, data, params, steps: int, batch: int, seed: int) -> list[np.ndarray]:
    import jax
    import jax.numpy as jnp

    x, t, m = (jnp.asarray(a) for a in data)
    ps = [jnp.asarray(p) for p in params]
    rng = np.random.default_rng(seed)

    def objective(ps, xb, tb, mb):
        return loss((jnp.tanh(xb @ ps[0] + ps[1]) @ ps[2])[..., 0], tb, mb)

    @jax.jit
    def step(ps, mom, vel, i, xb, tb, mb):  # Adam, as torch.optim.Adam's defaults
        g = jax.grad(objective)(ps, xb, tb, mb)
        mom = [0.9 * a + 0.1 * b for a, b in zip(mom, g)]
        vel = [0.999 * a + 0.001 * b * b for a, b in zip(vel, g)]
        ps = [p - 3e-3 * (a / (1 - 0.9**i)) / (jnp.sqrt(b / (1 - 0.999**i)) + 1e-8) for p, a, b in zip(ps, mom, vel)]
        return ps, mom, vel

    mom, vel = [jnp.zeros_like(p) for p in ps], [jnp.zeros_like(p) for p in ps]
    for i in range(1, steps + 1):
        idx = rng.choice(len(x), batch, replace=False)
        ps, mom, vel = step(ps, mom, vel, i, x[idx], t[idx], m[idx])
    return [np.asarray(p) for p in ps]


def score_np(params: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    return (np.tanh(x @ params[0] + params[1]) @ params[2])[..., 0]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=600, help="training queries (a quarter as many held out)")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--quick", action="store_true", help="a small run that checks the script works (CI)")
    args = ap.parse_args(argv)
    longest = LONGEST
    if args.quick:
        args.queries, args.steps, args.batch, longest = 24, 3, 4, 20

    import jax

    jax.config.update("jax_enable_x64", True)
    x, t, m, latent = make_data(args.queries + args.queries // 4, longest, seed=0)
    train, test = slice(0, args.queries), slice(args.queries, None)
    params = init(1)
    data = (x[train], t[train], m[train])
    print(f"Synthetic MSLR-shaped data: {args.queries} training and {len(x) - args.queries} held-out queries of 1-{longest} "
          f"documents, {FEATURES} features, grades 0-4 ({np.mean(t[m] > 0):.0%} relevant); scorer {FEATURES}-{HIDDEN}-1, "
          f"Adam, {args.steps} steps of {args.batch} queries, float64")
    print()
    print("| loss | framework | NDCG@1 | NDCG@5 | NDCG@10 | train (s) |")
    print("|---|---|---|---|---|---|")
    oracle = ndcg_at(latent[test], t[test], m[test])
    print(f"| oracle (true relevance) | | {oracle[0]:.3f} | {oracle[1]:.3f} | {oracle[2]:.3f} | |")
    start = ndcg_at(score_np(params, x[test]), t[test], m[test])
    print(f"| untrained scorer | | {start[0]:.3f} | {start[1]:.3f} | {start[2]:.3f} | |")
    for name, loss in LOSSES.items():
        for framework, train_fn in (("torch", train_torch), ("jax", train_jax)):
            t0 = time.perf_counter()
            trained = train_fn(loss, data, params, args.steps, args.batch, seed=2)
            seconds = time.perf_counter() - t0
            got = ndcg_at(score_np(trained, x[test]), t[test], m[test])
            print(f"| {name} | {framework} | {got[0]:.3f} | {got[1]:.3f} | {got[2]:.3f} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
