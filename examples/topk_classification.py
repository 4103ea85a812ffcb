"""The top-k loss of Cuturi, Teboul & Vert 2019 (papers 001, 002) against cross-entropy, offline on scikit-learn's digits.

001 (Sec. 5, "top-k loss") and 002 replace the softmax / cross-entropy loss of
a classifier by a differentiable top-k loss built on soft ranks,
``J_k(L - R_eps(f(x))[label])``: zero once the true label ranks among the k
largest scores. With k = 1 and a CNN on CIFAR-10 / CIFAR-100 they report
test accuracy "comparable" to cross-entropy. CIFAR needs a download, so this
script runs the comparison on scikit-learn's ``load_digits`` (1797 images of
8 x 8 pixels, 10 classes), with ``rankops.losses.topk_loss(scores, labels,
k, method=...)`` = ``relu(n - k + 1 - soft_rank(scores)[label])``:

- protocol: a random stratified 60/40 train/test split per seed; pixels
  standardized with the training statistics; an MLP 64 -> 128 -> 128 -> 10
  (ReLU), float32, Adam (lr 1e-3), minibatches of 64, the same
  initialization and the same minibatch order for every loss of a seed;
- two settings: **clean** labels, and **noisy** labels, where a fraction
  (``--noise``, default 0.4) of the TRAINING labels is replaced by a
  uniformly drawn other class (symmetric noise; test labels stay clean).
  The top-k loss is bounded (at most n - k), cross-entropy is not: bounded
  losses are known to resist label noise better, and k > 1 asks less of
  each (possibly wrong) label;
- losses: cross-entropy; the top-1 loss with each soft_rank method
  (sinkhorn, softsort, neuralsort, permutahedron, lapsum; temperatures in
  ``METHODS``, chosen by ``--sweep`` on a validation split); the top-3 loss
  (lapsum); the top-k cross-entropy of Petersen et al. 2022
  (``rankops.losses.topk_cross_entropy``, ``TOPK_CE``: half top-1, half top-3,
  through an odd-even sorting network);
- metrics: test top-1 and top-3 accuracy after the last step, mean ± std
  over the seeds, and the training wall time per run (evaluation excluded).

How this differs from the papers: digits and a small MLP instead of CIFAR
and a CNN, a thousand Adam steps instead of hours of training, and the
loss in rank units (``n - k + 1 - rank``) rather than CDF units (001 divides
by L): with Adam the loss's scale barely matters.

Usage: python examples/topk_classification.py [--seeds 5] [--steps 1000] [--noise 0.4] [--plot docs/img/topk-classification.png] [--quick] [--sweep]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

N_CLASSES = 10

# Temperatures: the best clean-label validation top-1 per method in ``--sweep``
# (a validation split of the training set, seeds 0-1, 1000 steps; never the
# test set; ties go to the sharper operator). Every
# relaxation but Sinkhorn sees the raw logits, whose scale the network
# controls: the loss is zero only once the label's SOFT rank reaches
# n - k + 1, so the temperature acts as a margin in logit units that the
# network meets by growing its logits. SoftSort and NeuralSort need a small
# tau: their matrices are only row-stochastic, and at larger tau (NeuralSort
# from 0.1, SoftSort from 0.3) their soft ranks stop being monotone in the
# scores (two close scores just below the maximum can out-rank it), which
# the loss exploits: top-1 accuracy collapses while top-3 stays high.
# Sinkhorn squashes each row (sigmoid of the standardized logits) into [0, 1]
# before transporting it onto the targets 0, 1/9, ..., 1, so it is scale-free
# and epsilon is in squared squashed units: 001 uses 0.01 and 100 iterations,
# so do we (tolerance 1e-2 on the marginals: more iterations only cost time).
METHODS = {
    "sinkhorn": {"epsilon": 1e-2, "max_iter": 100, "tol": 1e-2},
    "softsort": {"tau": 0.03},
    "neuralsort": {"tau": 0.03},
    "permutahedron": {"strength": 0.1},
    "lapsum": {"alpha": 0.3},
}
TOPK_METHOD = "lapsum"  # for the top-3 row: cheap, and the best top-1 method on the validation split
# The top-k cross-entropy of Petersen et al. 2022 (rankops.losses.topk_cross_entropy): P_K half top-1, half top-3,
# an odd-even sorting network with Cauchy comparators (the package's defaults, as its CIFAR runs), top-1 term
# from the softmax ("sm")
TOPK_CE = {"p_k": [0.5, 0.0, 0.5], "network": "odd_even", "distribution": "cauchy", "steepness": 10.0}
SWEEP = {"sinkhorn": ("epsilon", (0.01, 0.03, 0.1)), "softsort": ("tau", (0.01, 0.03, 0.1, 0.3, 1.0)),
         "neuralsort": ("tau", (0.01, 0.03, 0.1, 0.3, 1.0)), "permutahedron": ("strength", (0.1, 0.3, 1.0, 3.0)),
         "lapsum": ("alpha", (0.1, 0.3, 1.0, 3.0))}


def _topk(k: int, method: str, **options):
    import rankops.losses

    return lambda s, y: rankops.losses.topk_loss(s, y, k, method=method, **options).mean()


def _topk_cross_entropy(p_k: list, **options):
    import rankops.losses

    return lambda s, y: rankops.losses.topk_cross_entropy(s, y, p_k, **options).mean()


def loss_functions() -> dict:
    """name -> loss(scores, labels), a scalar to minimise."""
    import torch.nn.functional as F

    out = {"cross-entropy": F.cross_entropy}
    for method, options in METHODS.items():
        out[f"top-1 loss, {method}"] = _topk(1, method, **options)
    out[f"top-3 loss, {TOPK_METHOD}"] = _topk(3, TOPK_METHOD, **METHODS[TOPK_METHOD])
    out["top-k cross-entropy, odd_even"] = _topk_cross_entropy(**TOPK_CE)
    return out


def digits_split(seed: int, noise: float, validation: bool = False) -> tuple[np.ndarray, ...]:
    """Standardized train / test pixels and labels; ``noise`` of the training labels moved to another class.

    ``validation``: the "test" part is 30% of the training split instead (clean labels), for ``--sweep``.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.4, stratify=y, random_state=seed)
    if validation:
        x_tr, x_te, y_tr, y_te = train_test_split(x_tr, y_tr, test_size=0.3, stratify=y_tr, random_state=seed)
    mu, sd = x_tr.mean(axis=0), x_tr.std(axis=0) + 1.0  # + 1: a few border pixels are (almost) always 0
    x_tr, x_te = (x_tr - mu) / sd, (x_te - mu) / sd
    if noise > 0:
        rng = np.random.default_rng(seed + 1000)
        flip = rng.random(len(y_tr)) < noise
        # an offset in 1..n-1: the new label is never the true one
        y_tr = np.where(flip, (y_tr + rng.integers(1, N_CLASSES, len(y_tr))) % N_CLASSES, y_tr)
    return x_tr.astype(np.float32), y_tr, x_te.astype(np.float32), y_te


def _mlp(seed: int):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                               torch.nn.ReLU(), torch.nn.Linear(128, N_CLASSES))


def _topk_accuracy(net, x, y) -> tuple[float, float]:
    import torch

    with torch.no_grad():
        top3 = net(x).topk(3, dim=-1).indices
    hit = top3 == y[:, None]
    return float(hit[:, 0].float().mean()), float(hit.any(-1).float().mean())


def train(loss, data, seed: int, steps: int, batch: int, lr: float, eval_every: int) -> dict:
    """Adam on ``loss``; test accuracy along the way, training time without the evaluations."""
    import torch

    import rankops

    x_tr, y_tr, x_te, y_te = (torch.from_numpy(a) for a in data)
    net = _mlp(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    curve, elapsed, order = [], 0.0, torch.empty(0, dtype=torch.long)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", rankops.ConvergenceWarning)
        for step in range(1, steps + 1):
            start = time.perf_counter()
            if len(order) < batch:  # epochs: every training image once before any twice
                order = torch.randperm(len(y_tr), generator=gen)
            idx, order = order[:batch], order[batch:]
            opt.zero_grad()
            value = loss(net(x_tr[idx]), y_tr[idx])
            value.backward()
            opt.step()
            elapsed += time.perf_counter() - start
            if step % eval_every == 0 or step == steps:
                curve.append((step, _topk_accuracy(net, x_te, y_te)[0]))
    top1, top3 = _topk_accuracy(net, x_te, y_te)
    unconverged = sum(issubclass(w.category, rankops.ConvergenceWarning) for w in caught)
    return {"top-1": top1, "top-3": top3, "time": elapsed, "curve": curve, "unconverged": unconverged}


def run_setting(noise: float, seeds: int, steps: int, batch: int, lr: float) -> dict[str, list[dict]]:
    losses = loss_functions()
    runs: dict[str, list[dict]] = {name: [] for name in losses}
    eval_every = max(1, steps // 30)
    for seed in range(seeds):
        data = digits_split(seed, noise)
        for name, loss in losses.items():
            runs[name].append(train(loss, data, seed, steps, batch, lr, eval_every))
    return runs


def _table(runs: dict[str, list[dict]]) -> list[str]:
    rows = ["| loss | top-1 | top-3 | time s |", "|---|---|---|---|"]
    for name, rs in runs.items():
        cells = []
        for key in ("top-1", "top-3", "time"):
            v = np.array([r[key] for r in rs])
            cells.append(f"{v.mean():.3f} ± {v.std():.3f}" if key != "time" else f"{v.mean():.1f}")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def _plot(path: str, settings: dict[str, dict[str, list[dict]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 4.5), sharey=True, squeeze=False)
    for ax, (title, runs) in zip(axes[0], settings.items()):
        for name, rs in runs.items():
            steps = [s for s, _ in rs[0]["curve"]]
            acc = np.array([[a for _, a in r["curve"]] for r in rs]).mean(axis=0)
            style = "k-" if name == "cross-entropy" else ("--" if "top-3" in name else "-")
            ax.plot(steps, acc, style, label=name, lw=1.5 if name == "cross-entropy" else 1.0)
        ax.set(title=title, xlabel="Adam step", ylim=(0.5, 1.0))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"test top-1 accuracy (mean over {len(rs)} seeds)")
    axes[0][-1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def sweep(seeds: int, steps: int, batch: int, lr: float, noise: float) -> list[str]:
    """Validation top-1 / top-3 accuracy (mean over seeds) of the top-1 loss per method and temperature."""
    rows = [f"| method | option | clean: top-1 | clean: top-3 | noisy ({noise:.0%}): top-1 | noisy: top-3 |",
            "|---|---|---|---|---|---|"]
    data = {(nz, seed): digits_split(seed, nz, validation=True) for nz in (0.0, noise) for seed in range(seeds)}
    for method, (key, values) in SWEEP.items():
        for value in values:
            options = {**METHODS[method], key: value}
            cells = []
            for nz in (0.0, noise):
                runs = [train(_topk(1, method, **options), data[nz, seed], seed, steps, batch, lr, steps) for seed in range(seeds)]
                cells += [f"{np.mean([r[k] for r in runs]):.3f}" for k in ("top-1", "top-3")]
            rows.append(f"| {method} | {key}={value} | " + " | ".join(cells) + " |")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=1000, help="Adam steps per model")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--noise", type=float, default=0.4, help="fraction of training labels flipped in the noisy setting")
    ap.add_argument("--plot", help="save test accuracy against training step here (PNG)")
    ap.add_argument("--quick", action="store_true", help="1 seed, 150 steps: checks that everything runs (< 1 minute)")
    ap.add_argument("--sweep", action="store_true",
                    help="instead: the temperature sweep on a validation split that chose METHODS (about 10 minutes "
                         "with --seeds 2 --steps 1000)")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.steps = 1, 150
    import torch

    torch.set_num_threads(1)  # 64 x 10 scores: threads cost more than they save
    start = time.perf_counter()
    if args.sweep:
        print(f"Top-1 loss, validation split of the training set (30%), {args.steps} Adam steps, {args.seeds} seed(s)\n")
        print("\n".join(sweep(args.seeds, args.steps, args.batch, args.lr, args.noise)))
        print(f"\n({time.perf_counter() - start:.0f} s)")
        return 0
    settings = {"clean labels": run_setting(0.0, args.seeds, args.steps, args.batch, args.lr),
                f"noisy labels ({args.noise:.0%} of training labels flipped)":
                    run_setting(args.noise, args.seeds, args.steps, args.batch, args.lr)}
    options = "; ".join(f"{m}: " + ", ".join(f"{k}={v}" for k, v in o.items()) for m, o in METHODS.items())
    print(f"Digits, MLP 64-128-128-10, {args.steps} Adam steps (lr {args.lr}, batch {args.batch}), "
          f"mean ± std over {args.seeds} seed(s); time: training seconds per run\n({options})")
    for title, runs in settings.items():
        print(f"\n{title}\n")
        print("\n".join(_table(runs)))
        unconverged = {name: sum(r["unconverged"] for r in rs) for name, rs in runs.items()}
        if any(unconverged.values()):
            print(f"ConvergenceWarnings: {unconverged}")
    print(f"\n({time.perf_counter() - start:.0f} s)")
    if args.plot:
        _plot(args.plot, settings)
        print(f"saved {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
