"""rankops.losses against independent formulas: SciPy's rankdata / spearmanr, NumPy indexing, central differences."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.stats import rankdata, spearmanr

import rankops
import rankops.losses as losses
from tests.hosts import HOSTS
from tests.hosts import host as _host

METHODS = [("permutahedron", {"strength": 0.5}), ("lapsum", {"alpha": 0.5}), ("softsort", {"tau": 0.5})]


def _pearson_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([np.corrcoef(u, v)[0, 1] for u, v in zip(a, b)])


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("method,opts", METHODS, ids=[m for m, _ in METHODS])
def test_spearman_loss_is_one_minus_pearson_of_soft_and_hard_ranks(host, method, opts):
    to, run = _host(host)
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

    h, fd = 1e-6, np.zeros_like(pred)
    for idx in np.ndindex(pred.shape):
        up, down = pred.copy(), pred.copy()
        up[idx] += h
        down[idx] -= h
        fd[idx] = (f(up) - f(down)) / (2 * h)
    assert_allclose(p.grad.numpy(), fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("host", HOSTS)
def test_topk_loss_equals_the_margin_of_the_labels_soft_rank(host):
    to, run = _host(host)
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
