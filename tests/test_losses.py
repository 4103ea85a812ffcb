"""rankops.losses against independent formulas: SciPy's rankdata / spearmanr, NumPy indexing, central differences."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.stats import rankdata, spearmanr

import rankops
import rankops.losses as losses
from tests import reference
from tests.backends import CPU_BACKENDS
from tests.backends import on_backend
from tests.test_diffsort import _simulate

METHODS = [("permutahedron", {"strength": 0.5}), ("lapsum", {"alpha": 0.5}), ("softsort", {"tau": 0.5})]


def _central_differences(f, x: np.ndarray) -> np.ndarray:
    """The gradient of scalar ``f`` at ``x``, entry by entry."""
    fd = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = 1
        fd[idx] = reference.central_difference(f, x, e)
    return fd


def _pearson_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([np.corrcoef(u, v)[0, 1] for u, v in zip(a, b)])


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
@pytest.mark.parametrize("method,opts", METHODS, ids=[m for m, _ in METHODS])
def test_spearman_loss_is_one_minus_pearson_of_soft_and_hard_ranks(backend_name, method, opts):
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(0)
    pred = rng.normal(size=(4, 12))
    target = rng.integers(0, 5, size=(4, 12)).astype(np.float64)  # ties: averaged ranks
    got = np.asarray(run(lambda p, t: losses.spearman_loss(p, t, method=method, **opts), to(pred), to(target)))
    soft = np.asarray(rankops.soft_rank(pred, method=method, **opts))
    assert_allclose(got, 1 - _pearson_rows(soft, rankdata(target, axis=-1)), rtol=1e-9, atol=1e-9)


def test_spearman_loss_hard_limit_and_axis():
    rng = np.random.default_rng(1)
    pred, target = rng.normal(size=(9, 3)), rng.integers(0, 4, size=(9, 3)).astype(float)
    got = losses.spearman_loss(pred, target, axis=0, strength=1e-6)
    expected = [1 - spearmanr(pred[:, j], target[:, j]).statistic for j in range(3)]
    assert_allclose(got, expected, rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="same shape"):
        losses.spearman_loss(pred, target[:, :2])


def test_spearman_loss_gradient_equals_central_differences():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    pred, target = rng.normal(size=(2, 7)), rng.normal(size=(2, 7))
    w = np.array([0.6, -1.1])
    p = torch.tensor(pred, requires_grad=True)
    (losses.spearman_loss(p, torch.tensor(target), method="lapsum", alpha=0.7) * torch.tensor(w)).sum().backward()

    def f(a):
        return float(w @ np.asarray(losses.spearman_loss(a, target, method="lapsum", alpha=0.7)))

    fd = _central_differences(f, pred)
    assert_allclose(p.grad.numpy(), fd, rtol=1e-6, atol=1e-9)


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_topk_loss_equals_the_margin_of_the_labels_soft_rank(backend_name):
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(3)
    scores, labels = rng.normal(size=(5, 8)), rng.integers(0, 8, size=5)
    for k in (1, 3, 8):
        got = np.asarray(run(lambda s, lab: losses.topk_loss(s, lab, k, method="lapsum", alpha=0.3), to(scores), to(labels)))
        soft = np.asarray(rankops.soft_rank(scores, method="lapsum", alpha=0.3))
        assert_allclose(got, np.maximum(8 - k + 1 - soft[np.arange(5), labels], 0.0), rtol=1e-12, atol=1e-12)


def test_topk_loss_hard_limit_axis_gradient_and_errors():
    torch = pytest.importorskip("torch")
    scores = np.array([[0.1, 2.0, 1.0, -1.0], [3.0, 0.0, 1.0, 2.0], [0.0, 1.0, 2.0, 3.0]])
    labels = np.array([2, 1, 0])
    hard = rankdata(scores, axis=-1)[np.arange(3), labels]  # 3, 1, 1
    assert_allclose(losses.topk_loss(scores, labels, 2, strength=1e-6), np.maximum(4 - 2 + 1 - hard, 0), atol=1e-9)
    assert_allclose(losses.topk_loss(scores.T, labels, 2, axis=0, strength=1e-6), np.maximum(3 - hard, 0), atol=1e-9)
    s = torch.tensor(scores, requires_grad=True)
    losses.topk_loss(s, torch.tensor(labels), 2, method="lapsum", alpha=0.5).sum().backward()
    soft = rankops.vjp(rankops.soft_rank, scores, method="lapsum", alpha=0.5)[1]
    # d loss / d scores = -(d rank[label] / d scores) where the margin is positive: rankops.vjp with a one-hot cotangent
    margin = 3 - np.asarray(rankops.soft_rank(scores, method="lapsum", alpha=0.5))[np.arange(3), labels]
    ct = np.zeros_like(scores)
    ct[np.arange(3), labels] = -(margin > 0).astype(float)
    assert_allclose(s.grad.numpy(), soft(ct)[0], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="k must be"):
        losses.topk_loss(scores, labels, 5)
    with pytest.raises(TypeError, match="integer"):
        losses.topk_loss(scores, labels.astype(float), 2)
    with pytest.raises(ValueError, match="shape without axis"):
        losses.topk_loss(scores, labels[:2], 2)


# -- the pair: soft Spearman correlation and the Kendall loss -------------------------------------


def _tau_a(x: np.ndarray, y: np.ndarray) -> float:
    n = len(x)
    s = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i in range(n) for j in range(i + 1, n))
    return s / (n * (n - 1) / 2)


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_soft_spearman_is_pearson_of_both_soft_ranks(backend_name):
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(3, 9)), rng.normal(size=(3, 9))
    got = np.asarray(run(lambda a, b: losses.soft_spearman(a, b, method="softsort", tau=0.3), to(x), to(y)))
    rx, ry = (np.asarray(rankops.soft_rank(v, method="softsort", tau=0.3)) for v in (x, y))
    assert_allclose(got, _pearson_rows(rx, ry), rtol=1e-6 if backend_name == "jax" else 1e-10, atol=1e-7)
    hard = losses.soft_spearman(x.T, y.T, axis=0, strength=1e-6)
    assert_allclose(hard, [spearmanr(u, v).statistic for u, v in zip(x, y)], atol=1e-9)


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_kendall_loss_smooths_the_predictions_signs_only(backend_name):
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(5)
    pred = rng.normal(size=(3, 8))
    target = rng.integers(0, 4, size=(3, 8)).astype(np.float64)  # tied targets count 0
    tau = 0.4
    got = np.asarray(run(lambda p, t: losses.kendall_loss(p, t, tau=tau), to(pred), to(target)))
    n = 8
    iu = np.triu_indices(n, 1)
    dp = (pred[:, :, None] - pred[:, None, :])[:, iu[0], iu[1]]
    dt = (target[:, :, None] - target[:, None, :])[:, iu[0], iu[1]]
    expected = 1 - (np.tanh(dp / tau) * np.sign(dt)).sum(axis=-1) / (n * (n - 1) / 2)
    assert_allclose(got, expected, rtol=1e-6 if backend_name == "jax" else 1e-12, atol=1e-7 if backend_name == "jax" else 1e-12)
    hard = losses.kendall_loss(pred.T, target.T, axis=0, tau=1e-6)
    assert_allclose(hard, [1 - _tau_a(u, v) for u, v in zip(pred, target)], atol=1e-12)


# -- NDCG@k --------------------------------------------------------------------------------------


def _ndcg_reference(r: np.ndarray, gains: np.ndarray, k: int) -> np.ndarray:
    """The docstring's formula, float64, on given descending soft ranks ``r``."""
    dcg = (gains * np.clip(k + 1 - r, 0, 1) / np.log2(1 + r)).sum(axis=-1)
    top = -np.sort(-gains, axis=-1)
    pos = np.arange(1, gains.shape[-1] + 1)
    idcg = (top * (pos <= k) / np.log2(1 + pos)).sum(axis=-1)
    return 1 - np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1), 0)


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_ndcg_loss_equals_the_formula_on_soft_ranks(backend_name):
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(6)
    scores, rel = rng.normal(size=(4, 10)), rng.integers(0, 4, size=(4, 10)).astype(np.float64)
    rel[3] = 0  # no relevant entry: NDCG 0, loss 1
    for k in (1, 4, 10):
        got = np.asarray(run(lambda s, r: losses.ndcg_loss(s, r, k, method="lapsum", alpha=0.5), to(scores), to(rel)))
        r = np.asarray(rankops.soft_rank(scores, descending=True, method="lapsum", alpha=0.5))
        assert_allclose(got, _ndcg_reference(r, 2.0**rel - 1, k), rtol=1e-6 if backend_name == "jax" else 1e-12, atol=1e-7)
        assert got[3] == 1.0


def test_ndcg_loss_hard_limit_equals_scikit_learn_with_padding_masks():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(7)
    scores, rel = rng.normal(size=(5, 12)), rng.integers(0, 5, size=(5, 12)).astype(np.float64)
    lengths = np.array([12, 7, 3, 9, 1])
    mask = np.arange(12)[None, :] < lengths[:, None]
    padded = np.where(mask, scores, 1e3)  # padding that would rank first if it were scored
    for k in (1, 3, 12):
        got = losses.ndcg_loss(padded, rel, k, mask=mask, gain="linear", strength=1e-7)
        ref = [1 - metrics.ndcg_score(rel[i : i + 1, :m], scores[i : i + 1, :m], k=k) if m > 1 else
               1 - float(rel[i, 0] > 0) for i, m in enumerate(lengths)]
        assert_allclose(got, ref, atol=1e-9)
    with pytest.raises(TypeError, match="mask must be a bool array"):
        losses.ndcg_loss(scores, rel, mask=mask.astype(float))
    with pytest.raises(ValueError, match="gain must be"):
        losses.ndcg_loss(scores, rel, gain="log")
    with pytest.raises(ValueError, match="k must be"):
        losses.ndcg_loss(scores, rel, 13)


def test_ndcg_loss_gradient_equals_central_differences_and_skips_padding():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    scores, rel = rng.normal(size=(2, 6)), rng.integers(0, 3, size=(2, 6)).astype(np.float64)
    mask = np.ones((2, 6), dtype=bool)
    mask[1, 4:] = False
    w = np.array([0.7, -1.3])
    s = torch.tensor(scores, requires_grad=True)
    (losses.ndcg_loss(s, torch.tensor(rel), 3, mask=torch.tensor(mask), method="softsort", tau=0.5) * torch.tensor(w)).sum().backward()

    def f(a):
        return float(w @ np.asarray(losses.ndcg_loss(a, rel, 3, mask=mask, method="softsort", tau=0.5)))

    fd = _central_differences(f, scores)
    assert_allclose(s.grad.numpy(), fd, rtol=1e-6, atol=1e-9)
    assert np.all(s.grad.numpy()[1, 4:] == 0)


# -- learning to sort: the permutation cross-entropy ------------------------------------------------


def _cross_entropy(p: np.ndarray, target: np.ndarray) -> np.ndarray:
    true = reference.permutation_matrix(target)
    return -(true * np.log(p + np.finfo(np.float64).tiny)).sum(axis=(-2, -1)) / p.shape[-1]


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_permutation_loss_is_the_cross_entropy_with_the_true_permutation(backend_name):
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(9)
    scores, target = rng.normal(size=(3, 7)), rng.normal(size=(3, 7))
    tol = {"rtol": 1e-5, "atol": 1e-6} if backend_name == "jax" else {"rtol": 1e-10, "atol": 1e-12}
    for method, ref in (("neuralsort", reference.neuralsort), ("softsort", reference.softsort)):
        got = np.asarray(run(lambda s, t: losses.permutation_loss(s, t, method=method, tau=0.3), to(scores), to(target)))
        assert_allclose(got, _cross_entropy(ref(scores, 0.3), target), **tol)
    # a sorting network's matrix of -scores: its rows the places of the largest first (tests/test_diffsort.py's simulation)
    network = np.stack([_simulate(-row, "bitonic", "cauchy", 3.0)[1] for row in scores])
    got = np.asarray(run(lambda s, t: losses.permutation_loss(s, t, method="diffsort", network="bitonic", steepness=3.0), to(scores), to(target)))
    assert_allclose(got, _cross_entropy(network, target), **tol)


def test_permutation_loss_sinkhorn_is_the_scaled_plan_and_tends_to_zero_on_the_right_order():
    rng = np.random.default_rng(10)
    scores, target = rng.normal(size=(2, 6)), rng.normal(size=(2, 6))
    got = losses.permutation_loss(scores, target, method="sinkhorn", epsilon=0.05, tol=1e-10, max_iter=100_000)
    n = 6
    plans = [reference.ot_plan_1d(-s, reference.grid(n), np.full(n, 1 / n), 0.05) for s in scores]
    assert_allclose(got, _cross_entropy(n * np.stack(plans).swapaxes(-1, -2), target), rtol=1e-7)
    sharp = losses.permutation_loss(target, target, method="sinkhorn", epsilon=1e-4, tol=1e-9, max_iter=100_000)
    assert np.all(sharp < 1e-4)
    with pytest.raises(ValueError, match="relaxed permutation matrix"):
        losses.permutation_loss(scores, target, method="permutahedron")
    with pytest.raises(ValueError, match="squash must be"):
        losses.permutation_loss(scores, target, method="sinkhorn", squash="tanh")


def test_permutation_loss_gradient_equals_central_differences():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    scores, target = rng.normal(size=(2, 5)), rng.normal(size=(2, 5))
    for method, opts in (("neuralsort", {"tau": 0.5}), ("sinkhorn", {"epsilon": 0.1, "tol": 1e-12, "max_iter": 10_000})):
        s = torch.tensor(scores, requires_grad=True)
        losses.permutation_loss(s, torch.tensor(target), method=method, **opts).sum().backward()

        def f(a):
            return float(np.sum(losses.permutation_loss(a, target, method=method, **opts)))

        fd = _central_differences(f, scores)
        assert_allclose(s.grad.numpy(), fd, rtol=1e-5, atol=1e-8, err_msg=method)


# -- quantile regression: the soft quantile of the residuals, and the pinball baseline ------------


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
@pytest.mark.parametrize("q", [0.0, 0.3, 0.5, 1.0])
def test_quantile_loss_hard_limit_is_numpys_quantile_of_abs_residuals(backend_name, q):
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(12)
    pred, target = rng.normal(size=(3, 11)), rng.normal(size=(3, 11))
    expected = np.quantile(np.abs(target - pred), q, axis=-1)
    for method, opts in (("permutahedron", {"strength": 1e-7}), ("softsort", {"tau": 1e-7})):
        got = np.asarray(run(lambda p, t: losses.quantile_loss(p, t, q, method=method, **opts), to(pred), to(target)))
        assert_allclose(got, expected, atol=1e-6 if backend_name == "jax" else 1e-9, err_msg=method)
    # the paper's S-quantile (Sinkhorn, centred filler): close to the hard quantile at small epsilon
    sk = losses.quantile_loss(pred, target, q)
    assert_allclose(sk, np.asarray(rankops.soft_quantile(np.abs(target - pred), q)))
    if 0 < q < 1:
        assert_allclose(sk, expected, atol=0.05)


def test_quantile_loss_axis_gradient_and_errors():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    pred, target = rng.normal(size=(9, 2)), rng.normal(size=(9, 2))
    got = losses.quantile_loss(pred, target, 0.4, axis=0, method="permutahedron", strength=1e-7)
    assert_allclose(got, np.quantile(np.abs(target - pred), 0.4, axis=0), atol=1e-9)
    p = torch.tensor(pred, requires_grad=True)
    losses.quantile_loss(p, torch.tensor(target), 0.4, axis=0, method="lapsum", alpha=0.3).sum().backward()

    def f(a):
        return float(np.sum(losses.quantile_loss(a, target, 0.4, axis=0, method="lapsum", alpha=0.3)))

    fd = _central_differences(f, pred)
    assert_allclose(p.grad.numpy(), fd, rtol=1e-6, atol=1e-9)
    for bad in (1.5, -0.1, True, "0.5"):
        with pytest.raises(ValueError, match="q must be a number in"):
            losses.quantile_loss(pred, target, bad)


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_pinball_loss_equals_scikit_learn(backend_name):
    metrics = pytest.importorskip("sklearn.metrics")
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(14)
    pred, target = rng.normal(size=(3, 20)), rng.normal(size=(3, 20))
    for q in (0.1, 0.5, 0.9):
        got = np.asarray(run(lambda p, t: losses.pinball_loss(p, t, q), to(pred), to(target)))
        ref = [metrics.mean_pinball_loss(t, p, alpha=q) for p, t in zip(pred, target)]
        assert_allclose(got, ref, rtol=1e-6 if backend_name == "jax" else 1e-12)


# -- Dask: every loss, lazily, equal to NumPy -------------------------------------------------------

CASES = {
    "spearman_loss": lambda s, t, r, lab, m: losses.spearman_loss(s, t),
    "soft_spearman": lambda s, t, r, lab, m: losses.soft_spearman(s, t, method="lapsum"),
    "kendall_loss": lambda s, t, r, lab, m: losses.kendall_loss(s, t),
    "topk_loss": lambda s, t, r, lab, m: losses.topk_loss(s, lab, 2),
    "ndcg_loss": lambda s, t, r, lab, m: losses.ndcg_loss(s, r, 3, mask=m),
    "permutation_loss": lambda s, t, r, lab, m: losses.permutation_loss(s, t, method="sinkhorn", epsilon=0.05),
    "quantile_loss": lambda s, t, r, lab, m: losses.quantile_loss(s, t, 0.5),
    "pinball_loss": lambda s, t, r, lab, m: losses.pinball_loss(s, t, 0.3),
    "topk_cross_entropy": lambda s, t, r, lab, m: losses.topk_cross_entropy(s, lab, [0.6, 0.4], network="bitonic"),
    # learning to rank: the pairwise losses, the sorts of ListMLE and the Sinkhorn scaling loop of NeuralNDCG
    "listnet_loss": lambda s, t, r, lab, m: losses.listnet_loss(s, r, mask=m),
    "listmle_loss": lambda s, t, r, lab, m: losses.listmle_loss(s, r, mask=m),
    "lambda_loss": lambda s, t, r, lab, m: losses.lambda_loss(s, r, weighing_scheme="ndcgLoss2PP", k=4, mask=m),
    "approx_ndcg_loss": lambda s, t, r, lab, m: losses.approx_ndcg_loss(s, r, mask=m),
    "neural_ndcg_loss": lambda s, t, r, lab, m: losses.neural_ndcg_loss(s, r, k=3, mask=m),
    "smooth_ap_loss": lambda s, t, r, lab, m: losses.smooth_ap_loss(s, r, temperature=0.3, mask=m),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_loss_runs_lazily_on_dask(name):
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(15)
    s, t = rng.normal(size=(6, 7)), rng.normal(size=(6, 7))
    rel, labels = rng.integers(0, 3, size=(6, 7)).astype(float), rng.integers(0, 7, size=6)
    mask = np.arange(7)[None, :] < rng.integers(1, 8, size=6)[:, None]
    args = (s, t, rel, labels, mask)
    lazy = CASES[name](*(da.from_array(a, chunks=(2,) + a.shape[1:-1] + ((4,) if a.ndim > 1 else ())) for a in args))
    assert isinstance(lazy, da.Array)
    assert_allclose(lazy.compute(), CASES[name](*args), rtol=1e-12, atol=1e-12)


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", ["torch", "jax"])
def test_permutation_loss_sinkhorn_float32_implicit_gradient_at_small_epsilon(backend_name):
    """Regression: log(plan + tiny) put 1/P cotangents on underflowed plan entries, and float32's implicit backward blew up."""
    to, _ = on_backend(backend_name)
    s = np.array([[0.1885, -0.6332, -0.3776, -1.0911, -1.2777]])
    v = np.array([[-0.5, -1.2, 0.3, -2.0, 1.0]])

    def grad(x, implicit):
        if backend_name == "torch":
            import torch

            leaf = torch.tensor(x, requires_grad=True)
            losses.permutation_loss(leaf, torch.tensor(v, dtype=leaf.dtype), method="sinkhorn", epsilon=1e-3,
                                    implicit=implicit).sum().backward()
            return leaf.grad.numpy()
        import jax

        vv = to(v.astype(x.dtype))
        return np.asarray(jax.jit(jax.grad(lambda a: losses.permutation_loss(a, vv, method="sinkhorn", epsilon=1e-3,
                                                                             implicit=implicit).sum()))(to(x)))

    exact = grad(s, False)
    assert_allclose(grad(s, True), exact, rtol=1e-3)
    for implicit in (True, False):
        assert_allclose(grad(s.astype(np.float32), implicit), exact, rtol=0.02, atol=0.2)


# -- the top-k cross-entropy (Petersen et al. 2022) -----------------------------------------------


def _topk_ce_reference(s: np.ndarray, labels: np.ndarray, p_k: list, mode: str, tau: float) -> np.ndarray:
    """The paper's loss from a SoftSort matrix written here: T_k(y) = sum of the k largest places' probabilities of y."""
    out = []
    for row, y in zip(s, labels):
        srt = np.sort(row)[::-1]
        logits = -np.abs(srt[:, None] - row[None, :]) / tau
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)  # row j: the item at the j-th largest place
        t = np.cumsum(p[:, y])  # t[k - 1] = T_k(y)
        clamp = lambda q: -np.log(q * (1 - 2e-7) + 1e-7)  # noqa: E731
        soft = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        rest = sum(pk * t[k] for k, pk in enumerate(p_k) if k >= 1)
        if mode == "sort":
            out.append(clamp(p_k[0] * t[0] + rest))
        elif mode == "sm":
            out.append(clamp(p_k[0] * soft[y] + rest))
        else:
            out.append(p_k[0] * -np.log(soft[y]) + sum(p_k[1:]) * clamp(rest))
    return np.array(out)


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
@pytest.mark.parametrize("mode", ["sm", "smce", "sort"])
def test_topk_cross_entropy_equals_the_papers_formula(backend_name, mode):
    to, run = on_backend(backend_name)
    rng = np.random.default_rng(40)
    scores, labels = rng.normal(size=(5, 7)) * 2, rng.integers(0, 7, size=5)
    p_k = [0.5, 0.0, 0.3, 0.2]
    got = run(lambda s, lab: losses.topk_cross_entropy(s, lab, p_k, method="softsort", top1_mode=mode, tau=0.4), to(scores), to(labels))
    assert_allclose(np.asarray(got), _topk_ce_reference(scores, labels, p_k, mode, 0.4), rtol=1e-12, atol=1e-12)


def test_topk_cross_entropy_network_hard_limit_and_gradient():
    """Steep networks: the top-k indicator of the label; the gradient equals central differences."""
    rng = np.random.default_rng(41)
    scores = np.array([rng.permutation(8) * 1.0 for _ in range(4)])
    labels = np.argsort(scores, axis=-1)[:, [7, 6, 5, 0]][np.arange(4), np.arange(4)]  # places 1, 2, 3 and 8
    for network in ("odd_even", "bitonic"):
        got = losses.topk_cross_entropy(scores, labels, [0.0, 0.5, 0.5], top1_mode="sort", network=network,
                                        distribution="logistic", steepness=1e3)
        q = np.array([1.0, 1.0, 0.5, 0.0])  # P(K >= place): k ~ {2, 3} uniformly
        assert_allclose(got, -np.log(q * (1 - 2e-7) + 1e-7), rtol=1e-12)
    torch = pytest.importorskip("torch")
    x = rng.normal(size=(3, 6))
    lab = np.array([0, 3, 5])
    leaf = torch.tensor(x, requires_grad=True)
    w = np.array([0.3, -1.0, 0.7])
    (losses.topk_cross_entropy(leaf, torch.tensor(lab), [0.4, 0.6], steepness=3.0) * torch.tensor(w)).sum().backward()
    fd = _central_differences(lambda a: float(w @ losses.topk_cross_entropy(a, lab, [0.4, 0.6], steepness=3.0)), x)
    assert_allclose(leaf.grad.numpy(), fd, rtol=1e-6, atol=1e-8)


def test_topk_cross_entropy_equals_difftopk():
    """difftopk.TopKCrossEntropyLoss (float32, the batch mean) for every relaxation both have, with and without top-m."""
    torch = pytest.importorskip("torch")
    difftopk = pytest.importorskip("difftopk")
    rng = np.random.default_rng(42)
    p_k = [0.5, 0.0, 0.3, 0.2]
    for n, m in ((8, None), (10, 8), (9, None)):
        scores = torch.tensor(rng.normal(size=(6, n)) * 2, dtype=torch.float32)
        labels = torch.tensor(rng.integers(0, n, size=6))
        for method, ours in (("odd_even", {"method": "diffsort", "network": "odd_even", "steepness": 3.0}),
                             ("bitonic__non_sparse", {"method": "diffsort", "network": "bitonic", "steepness": 3.0}),
                             ("softsort", {"method": "softsort", "tau": 1 / 3}), ("neuralsort", {"method": "neuralsort", "tau": 1 / 3})):
            if method.startswith("bitonic") and (m or n) & ((m or n) - 1):
                continue  # the package's bitonic network does not sort every n (tests/test_diffsort.py)
            for mode in ("sm", "smce", "sort"):
                theirs = difftopk.TopKCrossEntropyLoss(method, 3.0, p_k, n, m=m, distribution="cauchy", top1_mode=mode)
                a, b = scores.clone().requires_grad_(), scores.clone().requires_grad_()
                want = theirs(a, labels)
                want.backward()
                got = losses.topk_cross_entropy(b, labels, p_k, m=m, top1_mode=mode, **ours).mean()
                got.backward()
                assert_allclose(got.item(), want.item(), rtol=2e-6, err_msg=(method, mode, n, m))
                assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-4, atol=2e-6, err_msg=(method, mode, n, m))


def test_topk_cross_entropy_errors():
    s, lab = np.zeros((2, 4)), np.array([0, 1])
    for p_k, exc, match in (([0.5, 0.6], ValueError, "must sum to 1"), ([1.5, -0.5], ValueError, "finite numbers >= 0"),
                            ([0.2] * 5, ValueError, "more than the n = 4"), (0.5, TypeError, "non-empty sequence"),
                            ([], TypeError, "non-empty sequence")):
        with pytest.raises(exc, match=match):
            losses.topk_cross_entropy(s, lab, p_k)
    with pytest.raises(ValueError, match=r"m must be an int in \[len\(p_k\), n\] = \[2, 4\], got 5"):
        losses.topk_cross_entropy(s, lab, [0.5, 0.5], m=5)
    with pytest.raises(ValueError, match="method must be one of"):
        losses.topk_cross_entropy(s, lab, [1.0], method="permutahedron")
    with pytest.raises(ValueError, match="top1_mode must be one of"):
        losses.topk_cross_entropy(s, lab, [1.0], top1_mode="ce")
    with pytest.raises(TypeError, match="labels must be an integer array"):
        losses.topk_cross_entropy(s, lab * 1.0, [1.0])
    with pytest.raises(TypeError, match="unexpected option"):
        losses.topk_cross_entropy(s, lab, [1.0], tau=0.1)


def test_quantile_loss_reports_a_nan_target_row_as_not_solved():
    """With return_info=True (Sinkhorn) a row whose target holds a NaN has a NaN loss and is reported not converged,
    its error NaN; the other rows keep their values and reports."""
    rng = np.random.default_rng(9)
    pred, target = rng.normal(size=(3, 6)), rng.normal(size=(3, 6))
    clean, clean_info = rankops.losses.quantile_loss(pred, target, 0.5, return_info=True)
    target[0, 1] = np.nan
    value, info = rankops.losses.quantile_loss(pred, target, 0.5, return_info=True)
    assert np.isnan(value[0]) and np.isnan(info.error[0]) and not info.converged[0]
    np.testing.assert_allclose(value[1:], clean[1:], rtol=1e-12)
    np.testing.assert_array_equal(info.converged[1:], clean_info.converged[1:])
