"""Machine learning with permutations (paper 000), offline on scikit-learn's digits.

Quantile normalization exists for data whose samples went through different
monotone distortions (batch effects, exposure): here every 8x8 digit image
gets its own random contrast curve ``16 a (x / 16)^g`` (a in [0.5, 2], g in
[1/3, 3], log-uniform), which changes the pixel values but not their order.

1. **SUQUAN** (Le Morvan & Vert 2017; 000, 001 Sec. 4): a linear logistic
   model (10 classes) on
   - the raw (standardized) pixels,
   - quantile-normalized pixels with a fixed target (the mean sorted image
     of the training set: standard QN),
   - SUQUAN: the target quantile function learned jointly with the model,
     ``f = rankops.suquan_targets(h)`` (cumulative softmax, started at the
     fixed QN target), through ``rankops.soft_quantile_normalize(x, f)``,
   trained with Adam on torch (minibatches); test accuracy over several seeds, and a plot
   of the learned quantile function against the fixed one.
2. **Kendall kernel SVM** with few training samples (000: "kernel trick
   useful with few samples in large dimensions"): ``SVC(kernel="precomputed")``
   on ``rankops.kendall_kernel`` (invariant to each image's contrast curve),
   against linear and RBF SVMs on the raw pixels.

Usage: python examples/suquan_kendall.py [--seeds 5] [--steps 200] [--plot docs/img/suquan-targets.png] [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def distorted_digits(seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(seed)
    a = np.exp(rng.uniform(np.log(0.5), np.log(2.0), size=(len(x), 1)))
    g = np.exp(rng.uniform(np.log(1 / 3), np.log(3.0), size=(len(x), 1)))
    return 16.0 * a * (x / 16.0) ** g, y


def _split(n: int, n_train: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed + 1000).permutation(n)
    return order[:n_train], order[n_train:]


def _fit_logistic(features, labels, steps: int, seed: int, batch: int, extra=(), lr: float = 0.05):
    """Adam on cross-entropy (+ a little L2) over minibatches; ``features(idx)`` is recomputed each step (SUQUAN learns inside it)."""
    import torch

    n = len(labels)
    w = torch.zeros(features(torch.arange(1)).shape[-1], 10, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(10, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([w, b, *extra], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randperm(n, generator=gen)[:batch]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(features(idx) @ w + b, labels[idx]) + 1e-3 * (w * w).sum()
        loss.backward()
        opt.step()
    return w.detach(), b.detach()


def suquan_run(seed: int, steps: int, n_train: int, m: int, epsilon: float, batch: int) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    import torch

    import rankops

    x, y = distorted_digits(seed)
    tr, te = _split(len(x), n_train, seed)
    xt = torch.from_numpy(x)
    labels = torch.from_numpy(y)
    # the fixed QN target: m quantiles of the training set's mean sorted image
    mean_sorted = np.sort(x[tr], axis=-1).mean(axis=0)
    f0 = np.quantile(mean_sorted, (np.arange(m) + 0.5) / m)
    # f0 as a cumulative softmax: increments > 0, summing to high - low (the top target stays put)
    low = -1e-3
    steps0 = np.diff(np.concatenate([[low], f0])) + 1e-3
    high = low + float(steps0.sum())
    h = torch.tensor(np.log(steps0 / steps0.sum()), requires_grad=True)
    scale = float(x[tr].std())

    def qn(images, targets):
        return rankops.soft_quantile_normalize(images, targets, epsilon=epsilon) / scale

    mu, sd = x[tr].mean(axis=0), x[tr].std(axis=0) + 1e-6
    raw = torch.from_numpy((x - mu) / sd)
    fixed_features = qn(xt, torch.from_numpy(f0)).detach()

    def accuracy(feats, w, b):
        return float(((feats[te] @ w + b).argmax(-1) == labels[te]).double().mean())

    out = {}
    tr_t = torch.from_numpy(tr)
    w, b = _fit_logistic(lambda i: raw[tr_t[i]], labels[tr_t], steps, seed, batch)
    out["raw pixels"] = accuracy(raw, w, b)
    w, b = _fit_logistic(lambda i: fixed_features[tr_t[i]], labels[tr_t], steps, seed, batch)
    out["quantile normalized (fixed target)"] = accuracy(fixed_features, w, b)
    f = lambda: rankops.suquan_targets(h, low=low, high=high)  # noqa: E731
    w, b = _fit_logistic(lambda i: qn(xt[tr_t[i]], f()), labels[tr_t], steps, seed, batch, extra=(h,))
    with torch.no_grad():
        out["SUQUAN (learned target)"] = accuracy(qn(xt, f()), w, b)
        learned = f().numpy()
    return out, f0, learned


def kendall_svm_run(seed: int, per_class: int) -> dict[str, float]:
    from sklearn.svm import SVC

    import rankops

    x, y = distorted_digits(seed)
    rng = np.random.default_rng(seed + 2000)
    tr = np.concatenate([rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in range(10)])
    te = np.setdiff1d(np.arange(len(x)), tr)
    out = {}
    k_train = rankops.kendall_kernel(x[tr])
    k_test = rankops.kendall_kernel(x[te], x[tr])
    out["Kendall kernel SVM"] = SVC(kernel="precomputed", C=10.0).fit(k_train, y[tr]).score(k_test, y[te])
    mu, sd = x[tr].mean(axis=0), x[tr].std(axis=0) + 1e-6
    raw_tr, raw_te = (x[tr] - mu) / sd, (x[te] - mu) / sd
    out["linear SVM, raw pixels"] = SVC(kernel="linear", C=1.0).fit(raw_tr, y[tr]).score(raw_te, y[te])
    out["RBF SVM, raw pixels"] = SVC(kernel="rbf", C=10.0, gamma="scale").fit(raw_tr, y[tr]).score(raw_te, y[te])
    return out


def _table(title: str, runs: list[dict[str, float]]) -> list[str]:
    rows = [f"| {title} | test accuracy, mean ± std over {len(runs)} seeds |", "|---|---|"]
    for name in runs[0]:
        values = np.array([r[name] for r in runs])
        rows.append(f"| {name} | {values.mean():.3f} ± {values.std():.3f} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200, help="Adam steps per model")
    ap.add_argument("--train", type=int, default=500, help="training images for the logistic models")
    ap.add_argument("--targets", type=int, default=16, help="m, the number of target quantiles (001 uses 16)")
    ap.add_argument("--epsilon", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=100, help="minibatch of the logistic models")
    ap.add_argument("--per-class", type=int, default=5, help="training images per class for the SVMs")
    ap.add_argument("--plot", help="save the learned quantile functions here (PNG)")
    ap.add_argument("--quick", action="store_true", help="2 seeds, 40 steps: checks that everything runs (< 1 minute)")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.train = 2, 30, 200
    start = time.perf_counter()
    runs, curves = [], []
    for seed in range(args.seeds):
        acc, f0, learned = suquan_run(seed, args.steps, args.train, args.targets, args.epsilon, args.batch)
        runs.append(acc)
        curves.append((f0, learned))
    print(f"Logistic regression on distorted digits: {args.train} training images, m = {args.targets}, "
          f"epsilon = {args.epsilon}, {args.steps} Adam steps")
    print("\n".join(_table("model (10 classes)", runs)))
    print()
    svm = [kendall_svm_run(seed, args.per_class) for seed in range(args.seeds)]
    print(f"SVMs with {args.per_class} training images per class ({10 * args.per_class} in all)")
    print("\n".join(_table("kernel", svm)))
    print(f"\n({time.perf_counter() - start:.0f} s)")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        levels = (np.arange(args.targets) + 0.5) / args.targets
        ax.plot(levels, curves[0][0], "k--", marker="o", label="fixed QN target (mean sorted image)")
        for i, (_, learned) in enumerate(curves):
            ax.plot(levels, learned, marker=".", alpha=0.8, label=f"SUQUAN, seed {i}")
        ax.set(xlabel="quantile level", ylabel="target value", title="Quantile functions: fixed vs learned (digits)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
        print(f"saved {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
