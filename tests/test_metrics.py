"""rankops.metrics against scikit-learn, allRank's own metric tests, and the average over every order of the tied scores."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops.metrics as metrics
from tests.backends import CPU_BACKENDS
from tests.backends import on_backend

sklearn_metrics = pytest.importorskip("sklearn.metrics")


def _lists(seed, batch=6, n=6):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 4, size=(batch, n)).astype(np.float64)  # few values: many ties
    t = rng.integers(0, 3, size=(batch, n)).astype(np.float64)
    t[1] = 0.0
    mask = np.ones((batch, n), bool)
    mask[2, 4:] = False
    mask[3, [0, 2]] = False
    s[3, 0], t[3, 2] = np.nan, np.nan  # padding may hold anything
    return s, t, mask


def _over_tie_orders(score, value):
    """The mean of ``value(order)`` over every order of ``score`` (largest first) that differs only within ties."""
    values = [value(np.array(p)) for p in itertools.permutations(range(len(score)))
              if all(score[p[i]] >= score[p[i + 1]] for i in range(len(p) - 1))]
    return np.mean(values)


def _dcg_of(order, t, k, powered=True):
    g = (2 ** t - 1 if powered else t)[order]
    d = 1 / np.log2(np.arange(len(order)) + 2.0)
    return np.sum((g * d)[:k])


def ref_dcg(s, t, k=None, powered=True):
    return _over_tie_orders(s, lambda o: _dcg_of(o, t, len(s) if k is None else k, powered))


def ref_precision(s, t, k):
    return _over_tie_orders(s, lambda o: np.sum(t[o][:k] > 0) / k)


def ref_recall(s, t, k):
    return 0.0 if not (t > 0).any() else _over_tie_orders(s, lambda o: np.sum(t[o][:k] > 0) / np.sum(t > 0))


def ref_mrr(s, t, k=None):
    """1 / the last position of the tied group holding the best-scored relevant item."""
    rel = t > 0
    if not rel.any():
        return 0.0
    rank = np.sum(s >= np.max(s[rel]))
    return 1 / rank if k is None or rank <= k else 0.0


def _per_list(ref, s, t, mask, *args):
    return np.array([ref(s[b][mask[b]], t[b][mask[b]], *args) for b in range(len(s))])


@pytest.mark.parametrize("k", [None, 1, 3])
def test_ndcg_with_linear_gains_equals_scikit_learn_ties_included(k):
    s, t = (np.nan_to_num(a) for a in _lists(0)[:2])
    expected = [sklearn_metrics.ndcg_score(t[b:b + 1], s[b:b + 1], k=k) for b in range(len(s))]
    assert_allclose(metrics.ndcg(s, t, k, gain="linear"), expected, rtol=1e-12, atol=1e-15)


def test_average_precision_equals_scikit_learn_ties_included():
    s, t = (np.nan_to_num(a) for a in _lists(1)[:2])
    expected = [sklearn_metrics.average_precision_score(t[b] > 0, s[b]) if (t[b] > 0).any() else 0.0 for b in range(len(s))]
    with np.errstate(all="ignore"):
        assert_allclose(metrics.average_precision(s, t), expected, rtol=1e-12)


@pytest.mark.parametrize("k", [None, 2, 4])
def test_linear_metrics_are_the_mean_over_the_orders_of_tied_scores(k):
    s, t, mask = _lists(2)
    assert_allclose(metrics.dcg(s, t, k, mask=mask), _per_list(ref_dcg, s, t, mask, k), rtol=1e-12)
    kk = 3 if k is None else k
    assert_allclose(metrics.precision_at_k(s, t, kk, mask=mask), _per_list(ref_precision, s, t, mask, kk), rtol=1e-12)
    assert_allclose(metrics.recall_at_k(s, t, kk, mask=mask), _per_list(ref_recall, s, t, mask, kk), rtol=1e-12)
    assert_allclose(metrics.mrr(s, t, k, mask=mask), _per_list(ref_mrr, s, t, mask, k), rtol=1e-12)
    ideal = _per_list(lambda a, b: _dcg_of(np.argsort(-b, kind="stable"), b, len(b) if k is None else k), s, t, mask)
    dcg = _per_list(ref_dcg, s, t, mask, k)
    assert_allclose(metrics.ndcg(s, t, k, mask=mask), np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1), 0.0), rtol=1e-12)


def test_allranks_own_metric_tests():
    def one(fun, y_pred, y_true, *args, **kw):
        s, t = np.array([y_pred]), np.array([y_true])
        return float(fun(s, t, *args, mask=t != -1, **kw)[0])

    assert one(metrics.ndcg, [0.5, 0.2], [1.0, 0.0]) == 1.0
    assert one(metrics.ndcg, [0.5, 0.2], [0.0, 1.0]) == pytest.approx(1 / math.log2(3), rel=1e-15)
    assert one(metrics.ndcg, [0.5, 0.2], [0.0, 0.0]) == 0.0
    assert one(metrics.ndcg, [0.5, 0.2], [0.0, 0.0], filler_value=1.0) == 1.0  # allRank's own filler
    assert one(metrics.ndcg, [0.5, 0.2, 0.1], [1.0, 0.0, 1.0], 1) == 1.0
    assert one(metrics.ndcg, [0.5, 0.2, 0.1], [1.0, 0.0, 1.0], 2) == pytest.approx(1 / (1 + 1 / math.log2(3)), rel=1e-15)
    assert one(metrics.ndcg, [0.5, 0.2, 1.0], [1.0, 0.0, -1]) == 1.0
    assert one(metrics.ndcg, [0.5, 0.2, 1.0], [0.0, 1.0, -1]) == pytest.approx(1 / math.log2(3), rel=1e-15)
    assert one(metrics.mrr, [0.5, 0.2], [1.0, 0.0], 10) == 1.0
    assert one(metrics.mrr, [0.5, 0.2], [1.0, 0.0]) == 1.0
    assert one(metrics.mrr, [0.5, 0.2], [0.0, 1.0], 10) == 0.5
    assert one(metrics.mrr, [0.5, 0.2], [0.0, 1.0], 1) == 0.0
    assert one(metrics.mrr, [0.5, 0.2], [0.0, 0.0]) == 0.0


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS[1:] + ["dask"])
def test_every_metric_on_every_host_equals_numpy(backend_name):
    s, t, mask = _lists(3)
    if backend_name == "dask":
        da = pytest.importorskip("dask.array")
        to, run = (lambda a: da.from_array(a, chunks=(2, 4))), (lambda f, *a: f(*a).compute())
    else:
        to, run = on_backend(backend_name)
    for name, args in (("dcg", (3,)), ("ndcg", ()), ("mrr", (2,)), ("average_precision", ()), ("precision_at_k", (2,)),
                       ("recall_at_k", (4,))):
        fun = getattr(metrics, name)
        got = np.asarray(run(lambda a, b, m: fun(a, b, *args, mask=m), to(s), to(t), to(mask)))
        assert_allclose(got, fun(s, t, *args, mask=mask), rtol=1e-12, err_msg=name)


def test_nan_scores_or_labels_and_empty_lists_give_nan_rows():
    s, t = np.array([[0.3, np.nan, 0.1], [0.3, 0.2, 0.1], [0.3, 0.2, 0.1], [0.3, 0.2, 0.1]]), np.ones((4, 3))
    t[2, 1] = np.nan
    mask = np.array([[True] * 3, [True] * 3, [True] * 3, [False] * 3])
    for name in ("dcg", "ndcg", "mrr", "average_precision"):
        got = getattr(metrics, name)(s, t, mask=mask)
        assert np.isnan(got[[0, 2, 3]]).all() and np.isfinite(got[1]), name
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        metrics.precision_at_k(s, t, 0)
    with pytest.raises(ValueError, match="gain must be"):
        metrics.ndcg(s, t, gain="cubic")
