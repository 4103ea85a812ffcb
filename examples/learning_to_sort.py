"""Learning to sort 4-digit numbers from images (the "large-MNIST" task), offline on scikit-learn's digits.

Reproduces the learning-to-sort experiment of NeuralSort (Grover et al. 2019,
Sec. 6.1), SoftSort (Prillo & Eisenschlos 2020, Sec. 5) and the Sinkhorn sort
(Cuturi, Teboul & Vert 2019, paper 002, Sec. 5): a network sees n images of
4-digit numbers, one at a time, and must output scores whose order is the
order of the numbers, trained only through a differentiable sorting loss.

Protocol:

- data: ``sklearn.datasets.load_digits`` (1797 images of 8x8, 16 grey
  levels), split once and for all (fixed seed) into 1200 training and 597
  test images. A number is 4 random images of one split side by side (an
  8x32 image); its value is the 4-digit integer they spell (leading zeros
  allowed, as in the papers). A sequence is n numbers with distinct values;
  training sequences are drawn afresh every step from the training images,
  the test sequences (1000 per n, the same for every method) from the test
  images only.
- network: a small CNN shared across the n items: an 8x8 convolution with
  stride 8 (64 channels: one filter bank per digit cell), a 1x1 convolution
  (32), a dense layer (64) and a linear read-out, ReLU; 14 k parameters,
  initialized from NumPy (the same weights on torch and JAX). Adam, batches
  of 32 sequences, lr 1e-2 then 1e-3 for the last quarter of the steps;
  float32; the same training sequences for every method and framework.
- losses: ``rankops.losses.permutation_loss`` (cross-entropy between the
  relaxed permutation matrix of the scores and the true one) for
  ``neuralsort``, ``softsort`` and ``sinkhorn``;
  ``rankops.losses.spearman_loss`` (``1 - corr(soft ranks, true ranks)``) for
  ``permutahedron`` and ``lapsum``, which have no permutation matrix.
- frameworks: torch (``torch.optim.Adam``) and JAX (``jax.jit`` of the loss,
  gradient and a hand-written Adam step): the same rankops call serves both.
- metrics on the test sequences, as in the papers: exact-permutation
  accuracy (the hard argsort of the scores is the true order of all n items)
  and per-element accuracy (fraction of positions holding the right item).
  Chance is 1/n! and 1/n.

Relaxation parameters (tau, epsilon, strength, alpha) come from a small
validation sweep at n = 5 (``--sweep``; see OPTIONS below).

Differences from the papers: they use real 28x28 MNIST (tens of thousands of
training images), a larger CNN and much longer training on a GPU; here the
digits are 8x8 with 16 grey levels (1200 training images), the network has
14 k parameters and the budget is 3000 steps per (method, framework, n), so
that the 50 runs of the full experiment take minutes on a 2-core CPU. The
papers tuned each method; here one parameter value per method serves every
n. Expect lower accuracies, mostly at large n, where one misread leading
digit among 4n breaks the exact permutation.

Usage: python examples/learning_to_sort.py [--steps 3000] [--ns 3,5,7,9,15] [--methods neuralsort,...] [--frameworks torch,jax]
       [--seed 0] [--plot docs/img/learning-to-sort.png] [--sweep] [--quick]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

METHODS = ("neuralsort", "softsort", "sinkhorn", "permutahedron", "lapsum", "odd_even", "bitonic")
# the sorting networks are rankops' method "diffsort" with a network option
NETWORKS = ("odd_even", "bitonic")
FRAMEWORKS = ("torch", "jax")
# Relaxation parameters, from `--sweep --steps 1000 --frameworks jax` (n = 5, 300 validation images carved out of
# the training split; the table is on the docs page): one value per method, for every n. NeuralSort, SoftSort,
# permutahedron and LapSum see the raw scores, whose scale the network learns, so the parameter mostly sets how
# smooth the relaxation is at the start (the scores of a row spread by ~0.03 at initialization): 0.1, 1 and 10 are
# within about the run-to-run noise (0.02-0.03) of each other, except LapSum at 10 (too smooth) and the
# permutahedron at 0.1, which hardly learns (its soft ranks turn hard, with zero gradient, once the scores spread by
# more than ~strength per rank); 1 is the safe middle. The Sinkhorn loss standardizes and squashes the scores
# first, so epsilon stays a fixed blur of the n grid points that the network cannot sharpen: 1e-2 to 0.3 are
# within 0.05 of each other at n = 5 (1e-2 and 0.1 also at n = 9), and 0.1 needs a tenth of the iterations of 1e-2
# (the torch Sinkhorn loop is the slowest part of the run). 3e-3 learned a little better at n = 9 but cost 10x more.
OPTIONS = {
    "neuralsort": {"tau": 1.0},
    "softsort": {"tau": 1.0},
    # implicit: gradients from the fixed point (soft_rank's default), not through the unrolled iterations
    "sinkhorn": {"epsilon": 0.1, "implicit": True},
    "permutahedron": {"strength": 1.0},
    "lapsum": {"alpha": 1.0},
    # monotonic Cauchy comparators (Petersen et al. 2022) at the diffsort package's default steepness: 1, 10 and 100
    # are within the run-to-run noise of each other at n = 5 (0.64-0.72 exact), the network learns the scale
    "odd_even": {"network": "odd_even", "distribution": "cauchy", "steepness": 10.0},
    "bitonic": {"network": "bitonic", "distribution": "cauchy", "steepness": 10.0},
}
SWEEP = {
    "odd_even": ("steepness", (1.0, 10.0, 100.0)),
    "bitonic": ("steepness", (1.0, 10.0, 100.0)),
    "neuralsort": ("tau", (0.1, 1.0, 10.0)),
    "softsort": ("tau", (0.1, 1.0, 10.0)),
    "sinkhorn": ("epsilon", (1e-2, 3e-2, 1e-1, 3e-1)),
    "permutahedron": ("strength", (0.1, 1.0, 10.0)),
    "lapsum": ("alpha", (0.1, 1.0, 10.0)),
}
# Cuturi et al. 2019 (paper 002), exact-permutation accuracy on large-MNIST
PAPER = {
    "sinkhorn": {3: 0.928, 5: 0.811, 7: 0.656, 9: 0.497, 15: 0.126},
    "neuralsort": {3: 0.919, 5: 0.777, 7: 0.610, 9: 0.434, 15: 0.097},
}
# a small CNN: the first two layers (conv 8x8 stride 8, then 1x1) are one MLP shared by the 4 digit cells
CONV = (64, 32)
DENSE = 64


def digit_split(n_train: int = 1200, n_val: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Images (scaled to [0, 1]) and labels of the train / val / test sides; the split never changes with --seed."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(12345).permutation(len(x))
    images = (x / 16.0).reshape(-1, 8, 8).astype(np.float32)
    sides = {"train": order[:n_train - n_val], "val": order[n_train - n_val:n_train], "test": order[n_train:]}
    return {k: (images[v], y[v]) for k, v in sides.items()}


def sequences(images: np.ndarray, labels: np.ndarray, batch: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``batch`` sequences of n 4-digit numbers: 8x32 images (batch, n, 8, 32) and values (batch, n), distinct within a row."""
    idx = rng.integers(len(images), size=(batch, n, 4))
    # a tie has no single true permutation: redraw those rows (rare: 10^4 values)
    while True:
        values = (labels[idx] * np.array([1000, 100, 10, 1])).sum(-1)
        dup = np.array([len(np.unique(v)) < n for v in values])
        if not dup.any():
            break
        idx[dup] = rng.integers(len(images), size=(int(dup.sum()), n, 4))
    # 4 digits side by side: (batch, n, 4, 8, 8) -> (batch, n, 8, 32)
    pixels = images[idx].transpose(0, 1, 3, 2, 4).reshape(batch, n, 8, 32)
    return pixels, values.astype(np.float32)


def cells(pixels: np.ndarray) -> np.ndarray:
    """The input of a stride-8 8x8 convolution, (..., 8, 32) -> (..., 4, 64): cut once in NumPy, so that the
    convolution is a matrix product that reads the same on torch and JAX."""
    lead = pixels.shape[:-2]
    return np.ascontiguousarray(np.swapaxes(pixels.reshape(*lead, 8, 4, 8), -3, -2).reshape(*lead, 4, 64))


def init_net(seed: int) -> list[np.ndarray]:
    """He-uniform weights, zero biases, float32: one list for both frameworks."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in ((64, CONV[0]), CONV, (4 * CONV[1], DENSE), (DENSE, 1)):
        bound = math.sqrt(6.0 / fan_in)
        params += [rng.uniform(-bound, bound, size=(fan_in, fan_out)).astype(np.float32), np.zeros(fan_out, np.float32)]
    # a small last layer: every relaxation starts smooth (a row of scores spreads by ~0.03), whatever its parameter
    params[-2] *= 0.1
    return params


def net(params, x, relu):
    """Scores (...,) of cells (..., 4, 64): 8x8 stride-8 convolution, 1x1 convolution, dense layer, linear read-out."""
    h = relu(x @ params[0] + params[1])
    h = relu(h @ params[2] + params[3])
    h = relu(h.reshape(*h.shape[:-2], 4 * CONV[1]) @ params[4] + params[5])
    return (h @ params[6] + params[7])[..., 0]


def learning_rate(t: int, steps: int, lr: float) -> float:
    """lr, then lr / 10 for the last quarter of the steps: at lr 1e-2 the last iterate is noisy without the drop."""
    return lr if t <= 0.75 * steps else 0.1 * lr


def loss_fn(method: str, options: dict):
    import rankops.losses

    if method in ("neuralsort", "softsort", "sinkhorn") + NETWORKS:
        name = "diffsort" if method in NETWORKS else method
        return lambda scores, values: rankops.losses.permutation_loss(scores, values, method=name, **options).mean()
    return lambda scores, values: rankops.losses.spearman_loss(scores, values, method=method, **options).mean()


def train_torch(method, options, n, data, steps, batch, lr, seed):
    import torch

    # every tensor here is small: the intra-op thread pool's hand-offs cost more than they save (the rankops losses
    # ran 10-30x slower per call with 2 threads than with 1 on a busy 2-core machine)
    torch.set_num_threads(1)
    params = [torch.tensor(p, requires_grad=True) for p in init_net(seed)]
    opt = torch.optim.Adam(params, lr=lr)
    loss = loss_fn(method, options)
    rng = np.random.default_rng(seed + 1)
    for t in range(1, steps + 1):
        x, v = sequences(*data, batch, n, rng)
        opt.param_groups[0]["lr"] = learning_rate(t, steps, lr)
        opt.zero_grad()
        loss(net(params, torch.from_numpy(cells(x)), torch.relu), torch.from_numpy(v)).backward()
        opt.step()

    @torch.no_grad()
    def predict(x):
        return net(params, torch.from_numpy(cells(x)), torch.relu).numpy()

    return predict


def train_jax(method, options, n, data, steps, batch, lr, seed):
    import jax
    import jax.numpy as jnp

    params = [jnp.asarray(p) for p in init_net(seed)]
    loss = loss_fn(method, options)
    b1, b2, eps = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults

    @jax.jit
    def step(params, m, s, t, lr, x, v):
        grads = jax.grad(lambda p: loss(net(p, x, jax.nn.relu), v))(params)
        m = [b1 * mi + (1 - b1) * g for mi, g in zip(m, grads)]
        s = [b2 * si + (1 - b2) * g * g for si, g in zip(s, grads)]
        # bias-corrected as in torch.optim.Adam (Kingma & Ba 2015, Algorithm 1)
        params = [p - lr * (mi / (1 - b1 ** t)) / (jnp.sqrt(si / (1 - b2 ** t)) + eps) for p, mi, si in zip(params, m, s)]
        return params, m, s

    m = [jnp.zeros_like(p) for p in params]
    s = [jnp.zeros_like(p) for p in params]
    rng = np.random.default_rng(seed + 1)
    for t in range(1, steps + 1):
        x, v = sequences(*data, batch, n, rng)
        params, m, s = step(params, m, s, jnp.float32(t), jnp.float32(learning_rate(t, steps, lr)), cells(x), v)
    predict = jax.jit(lambda p, x: net(p, x, jax.nn.relu))
    return lambda x: np.asarray(predict(params, cells(x)))


def accuracies(scores: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """Exact-permutation and per-element accuracy of the hard argsort of the scores."""
    placed = np.argsort(-scores, axis=-1, kind="stable") == np.argsort(-values, axis=-1, kind="stable")
    return float(placed.all(-1).mean()), float(placed.mean())


def run(method, framework, n, splits, args, options=None, evaluate_on="test"):
    train = {"torch": train_torch, "jax": train_jax}[framework]
    options = OPTIONS[method] if options is None else options
    predict = train(method, options, n, splits["train"], args.steps, args.batch, args.lr, args.seed)
    x, v = sequences(*splits[evaluate_on], args.test, n, np.random.default_rng(10_000 + n))
    return accuracies(predict(x), v)


def _table(title: str, ns, rows: dict, pick: int) -> list[str]:
    lines = [f"| {title} | framework | " + " | ".join(f"n={n}" for n in ns) + " |", "|---|---|" + "---|" * len(ns)]
    for (method, framework), accs in rows.items():
        lines.append(f"| {method} | {framework} | " + " | ".join(f"{accs[n][pick]:.3f}" for n in ns) + " |")
    return lines


def _paper_table(ns, rows: dict) -> list[str]:
    lines = ["| method | source | " + " | ".join(f"n={n}" for n in ns) + " |", "|---|---|" + "---|" * len(ns)]
    for method, paper in PAPER.items():
        lines.append(f"| {method} | Cuturi et al. 2019 (MNIST, CNN) | " + " | ".join(f"{paper[n]:.3f}" if n in paper else "-" for n in ns) + " |")
        for (m, framework), accs in rows.items():
            if m == method:
                lines.append(f"| {method} | this script, {framework} | " + " | ".join(f"{accs[n][0]:.3f}" for n in ns) + " |")
    return lines


def sweep(splits, args) -> None:
    """Validation accuracy at n = 5 over each method's relaxation parameter (the first framework; images held out of training)."""
    framework = args.frameworks.split(",")[0]
    print(f"Validation sweep: n = 5, {args.steps} steps, {framework}, {len(splits['val'][0])} validation images")
    print("| method | option | value | exact | per-element |\n|---|---|---|---|---|")
    for method in args.methods:
        name, grid = SWEEP[method]
        for value in grid:
            exact, element = run(method, framework, 5, splits, args, options={**OPTIONS[method], name: value}, evaluate_on="val")
            print(f"| {method} | {name} | {value:g} | {exact:.3f} | {element:.3f} |", flush=True)


def plot(path: str, ns, rows: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = dict(zip(METHODS, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for (method, framework), accs in rows.items():
        style = "-" if framework == "torch" else "--"
        for ax, pick in zip(axes, (0, 1)):
            ax.plot(ns, [accs[n][pick] for n in ns], style, marker="o", color=colors[method], label=f"{method} ({framework})")
    for method, paper in PAPER.items():
        shown = [n for n in ns if n in paper]
        axes[0].plot(shown, [paper[n] for n in shown], ":", marker="x", color=colors[method], label=f"{method}, Cuturi et al. 2019 (MNIST)")
    axes[0].plot(ns, [1 / math.factorial(n) for n in ns], color="lightgrey", label="chance")
    axes[1].plot(ns, [1 / n for n in ns], color="lightgrey", label="chance")
    axes[0].set(xlabel="n", ylabel="exact-permutation accuracy", title="All n items in order", ylim=(0, 1), xticks=ns)
    axes[1].set(xlabel="n", ylabel="per-element accuracy", title="Items in the right place", ylim=(0, 1), xticks=ns)
    axes[1].legend(*axes[0].get_legend_handles_labels(), fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle("Learning to sort 4-digit numbers (scikit-learn digits; solid: torch, dashed: JAX, dotted: paper)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"saved {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3000, help="Adam steps per (method, framework, n)")
    ap.add_argument("--batch", type=int, default=32, help="sequences per step")
    # 1e-2 beat 1e-3, 3e-3 and 3e-2 (NeuralSort, n = 5) at this budget of steps
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--ns", default="3,5,7,9,15", help="sequence lengths, comma-separated")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--test", type=int, default=1000, help="test sequences per n")
    ap.add_argument("--seed", type=int, default=0, help="network init and training sequences")
    ap.add_argument("--plot", help="save accuracy vs n per method here (PNG)")
    ap.add_argument("--sweep", action="store_true", help="validation sweep of each method's relaxation parameter at n = 5, then exit")
    ap.add_argument("--quick", action="store_true", help="n in {3, 5}, 150 steps: checks that everything runs (< 1 minute)")
    args = ap.parse_args(argv)
    if args.quick:
        args.ns, args.steps, args.test = "3,5", 150, 300
    args.methods = args.methods.split(",")
    ns = [int(n) for n in args.ns.split(",")]
    if args.sweep:
        sweep(digit_split(n_val=300), args)
        return 0
    splits = digit_split()
    rows, wall = {}, {}
    start = time.perf_counter()
    for method in args.methods:
        for framework in args.frameworks.split(","):
            t0 = time.perf_counter()
            rows[method, framework] = {n: run(method, framework, n, splits, args) for n in ns}
            wall[method, framework] = time.perf_counter() - t0
            print(f"{method} / {framework}: {wall[method, framework]:.1f} s", flush=True)
    print(f"\nTest sequences from {len(splits['test'][0])} held-out digit images, {args.test} per n; "
          f"{args.steps} Adam steps of {args.batch} sequences, seed {args.seed}")
    print("\nExact-permutation accuracy (chance: " + ", ".join(f"1/{n}! = {1 / math.factorial(n):.2g}" for n in ns) + ")")
    print("\n".join(_table("method", ns, rows, 0)))
    print("\nPer-element accuracy (chance: 1/n)")
    print("\n".join(_table("method", ns, rows, 1)))
    print("\nExact-permutation accuracy against Cuturi et al. 2019 (28x28 MNIST, CNN, far longer training)")
    print("\n".join(_paper_table(ns, rows)))
    print("\nWall time (training and evaluation over every n)\n| method | framework | seconds |\n|---|---|---|")
    for key, seconds in wall.items():
        print(f"| {key[0]} | {key[1]} | {seconds:.1f} |")
    print(f"\n({time.perf_counter() - start:.0f} s)")
    if args.plot:
        plot(args.plot, ns, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
