"""Ties: equal soft ranks, finite gradients, and the hard limit ``rankdata(method="average")``.

Tied entries are indistinguishable to every relaxation (same cost row for
Sinkhorn, same column of the permutation matrix for SoftSort and
NeuralSort), so they get equal soft ranks at every regularisation, and in
the limit they share the positions they occupy: the average rank. With
``hard=True`` the exact value breaks ties by position, like a stable
argsort: ``rankdata(method="ordinal")``.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.stats import rankdata

import rankops

X = np.array([[0.0, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0], [5.0, 5.0, 5.0, 5.0, 1.0, 1.0, 2.0], [4.0] * 7])
METHODS = {
    "sinkhorn": ({"epsilon": 0.1}, {"epsilon": 1e-3, "squash": "minmax", "tol": 1e-4, "max_iter": 20_000}, 1e-3),
    "softsort": ({"tau": 0.5}, {"tau": 1e-3}, 1e-9),
    "neuralsort": ({"tau": 0.5}, {"tau": 1e-3}, 1e-9),
}


@pytest.mark.eager_backends
@pytest.mark.parametrize("method", METHODS)
def test_tied_entries_get_equal_ranks_and_finite_gradients(backend, method):
    descending = backend.name == "numpy"  # both directions, without doubling every backend's run
    soft, _, _ = METHODS[method]
    x = backend.asarray(X)
    ranks, vjp_fn = rankops.vjp(rankops.soft_rank, x, method=method, descending=descending, **soft)
    got = backend.to_numpy(ranks)
    for row, r in zip(X, got):
        for value in np.unique(row):
            group = r[row == value]
            assert np.ptp(group) <= 1e-12 * np.abs(group).max(), (row, r)
    (dx,) = vjp_fn(backend.asarray(np.random.default_rng(0).normal(size=X.shape)))
    assert np.all(np.isfinite(backend.to_numpy(dx)))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("descending", [False, True])
def test_hard_limit_is_the_average_rank(method, descending):
    _, limit, atol = METHODS[method]
    got = rankops.soft_rank(X, method=method, descending=descending, **limit)
    assert_allclose(got, rankdata(-X if descending else X, method="average", axis=-1), rtol=0, atol=atol)


@pytest.mark.parametrize("method", ["softsort", "neuralsort"])
def test_hard_value_breaks_ties_by_position(method):
    got = rankops.soft_rank(X, method=method, tau=0.5, hard=True)
    assert_array_equal(got, rankdata(X, method="ordinal", axis=-1))
