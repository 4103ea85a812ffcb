"""SoftSort and NeuralSort matrices against the papers' formulas, on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import rankops
from tests import reference as ref

OPS = {
    "softsort": (rankops.softsort, ref.softsort),
    "neuralsort": (rankops.neuralsort, ref.neuralsort),
}


def _scores(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape) * 2.0


@pytest.mark.eager_backends
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("descending", [True, False])
@pytest.mark.parametrize("tau", [0.1, 1.0, 7.5])
def test_matches_paper_formula(backend, device, name, descending, tau):
    op, formula = OPS[name]
    s = _scores((2, 3, 7))
    got = backend.to_numpy(op(backend.asarray(s, device=device), tau=tau, descending=descending))
    assert got.shape == (2, 3, 7, 7)
    assert_allclose(got, formula(s, tau, descending=descending), rtol=1e-10, atol=1e-12)


@pytest.mark.eager_backends
@pytest.mark.parametrize("power", [0.5, 2.0, 3.0])
def test_softsort_power(backend, power):
    s = _scores((4, 6), seed=1)
    got = backend.to_numpy(rankops.softsort(backend.asarray(s), tau=0.7, power=power))
    assert_allclose(got, ref.softsort(s, 0.7, power=power), rtol=1e-10, atol=1e-12)


@pytest.mark.eager_backends
@pytest.mark.parametrize("name", OPS)
def test_float32_close_to_float64(backend, name):
    op, formula = OPS[name]
    s = _scores((3, 9), seed=2).astype(np.float32)
    got = op(backend.asarray(s), tau=0.5)
    assert backend.to_numpy(got).dtype == np.float32
    assert_allclose(backend.to_numpy(got), formula(s, 0.5), atol=2e-5)


@pytest.mark.eager_backends
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("descending", [True, False])
def test_unimodal_row_stochastic(backend, name, descending):
    """Theorem 1 of the SoftSort paper: rows are distributions, row argmax = argsort."""
    op, _ = OPS[name]
    s = _scores((5, 12), seed=3)
    p = backend.to_numpy(op(backend.asarray(s), tau=0.8, descending=descending))
    assert np.all(p >= 0)
    assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-12)
    order = np.argsort(-s if descending else s, axis=-1)
    assert_array_equal(p.argmax(axis=-1), order)


@pytest.mark.eager_backends
@pytest.mark.parametrize("name", OPS)
def test_permutation_equivariance(backend, name):
    """Prop. 1 of the SoftSort paper: permuting the items permutes P's columns."""
    op, _ = OPS[name]
    s = _scores((10,), seed=4)
    perm = np.random.default_rng(5).permutation(10)
    p = backend.to_numpy(op(backend.asarray(s), tau=0.9))
    p_perm = backend.to_numpy(op(backend.asarray(s[perm]), tau=0.9))
    assert_allclose(p_perm, p[:, perm], rtol=1e-12, atol=1e-15)


@pytest.mark.eager_backends
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("descending", [True, False])
def test_hard_limit(backend, name, descending):
    op, _ = OPS[name]
    s = np.array([[0.3, -1.2, 2.5, 0.7, 1.9], [4.0, 4.5, -2.0, 0.0, 1.0]])
    p = backend.to_numpy(op(backend.asarray(s), tau=1e-3, descending=descending))
    assert_allclose(p, ref.permutation_matrix(s, descending), atol=1e-12)


@pytest.mark.eager_backends
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("descending", [True, False])
def test_hard_forward_is_exact_permutation(backend, name, descending):
    op, _ = OPS[name]
    s = _scores((3, 8), seed=6)
    p = backend.to_numpy(op(backend.asarray(s), tau=5.0, hard=True, descending=descending))
    assert_array_equal(p, ref.permutation_matrix(s, descending))


class TestStochastic:
    def test_same_seed_same_sample_and_sample_axis(self, backend):
        s = backend.asarray(_scores((2, 5)))
        a = backend.to_numpy(rankops.softsort(s, stochastic=True, key=7, n_samples=3))
        b = backend.to_numpy(rankops.softsort(s, stochastic=True, key=7, n_samples=3))
        c = backend.to_numpy(rankops.softsort(s, stochastic=True, key=8, n_samples=3))
        assert a.shape == (3, 2, 5, 5)
        assert_array_equal(a, b)
        assert not np.allclose(a, c)
        assert not np.allclose(a[0], a[1])  # samples differ from one another

    @pytest.mark.parametrize("name", OPS)
    def test_perturbed_scores_follow_plackett_luce(self, backend, name):
        """Gumbel-max: P(item j first) = softmax(s)_j, the Plackett-Luce first choice."""
        op, _ = OPS[name]
        s = np.array([1.0, 0.0, -0.5, 2.0])
        if backend.name == "array_api_strict":  # NumPy's generator (slow here at 20000 draws): NumPy's very draws
            got = backend.to_numpy(op(backend.asarray(s), hard=True, stochastic=True, key=11, n_samples=200))
            assert_array_equal(got, op(s, hard=True, stochastic=True, key=11, n_samples=200))
            return
        draws = 20000
        p = backend.to_numpy(op(backend.asarray(s), hard=True, stochastic=True, key=11, n_samples=draws))
        first = p[:, 0, :].mean(axis=0)
        expected = np.exp(s) / np.exp(s).sum()
        # 4 standard errors of a frequency estimated from 20000 draws
        assert_allclose(first, expected, atol=4 * np.sqrt(0.25 / draws))

    def test_backend_generators(self, backend):
        s_np = _scores((4,))
        s = backend.asarray(s_np)
        if backend.name == "torch":
            import torch

            key = torch.Generator().manual_seed(3)
        elif backend.name == "jax":
            import jax

            key = jax.random.key(3)
        else:
            key = np.random.default_rng(3)
        p = backend.to_numpy(rankops.neuralsort(s, stochastic=True, key=key))
        assert p.shape == (4, 4)
        assert_allclose(p.sum(-1), 1.0, rtol=1e-12)


def test_torch_global_generator():
    """key=None on torch draws from torch's global generator, so manual_seed applies."""
    torch = pytest.importorskip("torch")
    s = torch.asarray(_scores((5,)))
    torch.manual_seed(0)
    a = rankops.softsort(s, stochastic=True)
    torch.manual_seed(0)
    b = rankops.softsort(s, stochastic=True)
    assert torch.equal(a, b)
