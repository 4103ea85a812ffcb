"""Temperatures as values (issue 33, item 6): strength, alpha and steepness as 0-d arrays, learnable and traced.

An array temperature gives the value of the same Python number, and its
gradient equals the central difference of the value in that number (float64),
by the operators' own rule (``rankops.vjp`` on NumPy), torch.autograd,
``jax.grad`` and ``jax.jit(jax.grad)`` alike (``rankops._cores.tempered``).
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops

from .backends import CPU_BACKENDS, on_backend

X = np.random.default_rng(0).normal(size=(3, 7))
CT = np.random.default_rng(1).normal(size=(3, 7))

# id -> (operator, positional arguments, options, temperature name, value)
CASES = {
    "soft_rank[permutahedron]": (rankops.soft_rank, (), {"method": "permutahedron"}, "strength", 0.7),
    "soft_rank[permutahedron-kl]": (rankops.soft_rank, (), {"method": "permutahedron", "regularization": "kl"}, "strength", 0.7),
    "soft_sort[permutahedron]": (rankops.soft_sort, (), {"method": "permutahedron", "descending": True}, "strength", 5.0),
    "soft_sort[permutahedron-kl]": (rankops.soft_sort, (), {"method": "permutahedron", "regularization": "kl"}, "strength", 5.0),
    "soft_sort[permutahedron-kl-desc]": (rankops.soft_sort, (), {"method": "permutahedron", "regularization": "kl", "descending": True},
                                         "strength", 5.0),
    # the p-norm regularizer (Sander et al. 2023): the sort is homogeneous with real exponents (x eps^(q-1))
    "soft_rank[permutahedron-lp]": (rankops.soft_rank, (), {"method": "permutahedron", "regularization": "lp"}, "strength", 0.7),
    "soft_sort[permutahedron-lp]": (rankops.soft_sort, (), {"method": "permutahedron", "regularization": "lp"}, "strength", 3.0),
    "soft_sort[permutahedron-lp-3/2-desc]": (rankops.soft_sort, (), {"method": "permutahedron", "regularization": "lp", "p": 1.5,
                                                                     "descending": True}, "strength", 3.0),
    "soft_sort[permutahedron-lp-1.25]": (rankops.soft_sort, (), {"method": "permutahedron", "regularization": "lp", "p": 1.25},
                                         "strength", 3.0),
    "soft_topk_mask[permutahedron-lp]": (rankops.soft_topk_mask, (2.5,), {"method": "permutahedron", "regularization": "lp"},
                                         "strength", 0.7),
    "soft_rank[lapsum]": (rankops.soft_rank, (), {"method": "lapsum"}, "alpha", 0.6),
    "soft_sort[lapsum]": (rankops.soft_sort, (), {"method": "lapsum"}, "alpha", 0.6),
    "soft_topk_mask[lapsum]": (rankops.soft_topk_mask, (2.5,), {"method": "lapsum"}, "alpha", 0.6),
    "soft_rank[diffsort]": (rankops.soft_rank, (), {"method": "diffsort"}, "steepness", 3.0),
    "soft_sort[diffsort]": (rankops.soft_sort, (), {"method": "diffsort", "network": "bitonic"}, "steepness", 3.0),
    "diffsort": (rankops.diffsort, (), {"distribution": "logistic"}, "steepness", 3.0),
}


def _cotangent(value):
    return CT if value.shape == CT.shape else np.random.default_rng(2).normal(size=value.shape)


def _call(case, x, t):
    fn, args, options, name, _ = CASES[case]
    return fn(x, *args, **options, **{name: t})


@pytest.mark.parametrize("case", list(CASES))
def test_array_temperature_value_and_gradient(case):
    fn, args, options, name, t = CASES[case]
    number = _call(case, X, t)
    assert_allclose(_call(case, X, np.asarray(t)), number, rtol=1e-14, atol=1e-14)
    ct = _cotangent(number)
    h = 1e-6
    expected = (np.sum(_call(case, X, t + h) * ct) - np.sum(_call(case, X, t - h) * ct)) / (2 * h)
    assert abs(expected) > 1e-3  # the temperature moves the value here: a zero would test nothing
    grads = rankops.vjp(fn, X, *args, **options, **{name: np.asarray(t)})[1](ct)
    assert_allclose(grads[-1], expected, rtol=1e-6)
    assert_allclose(grads[0], rankops.vjp(fn, X, *args, **options, **{name: t})[1](ct)[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("case", ["soft_rank[permutahedron]", "soft_sort[permutahedron-kl]", "soft_sort[permutahedron-lp-3/2-desc]",
                                  "soft_sort[lapsum]", "soft_sort[diffsort]"])
def test_array_temperature_under_torch_and_jax(case):
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    t = CASES[case][-1]
    ct = _cotangent(_call(case, X, t))
    expected = rankops.vjp(CASES[case][0], X, *CASES[case][1], **CASES[case][2], **{CASES[case][3]: np.asarray(t)})[1](ct)[-1]
    tt = torch.tensor(t, dtype=torch.float64, requires_grad=True)
    (_call(case, torch.asarray(X), tt) * torch.asarray(ct)).sum().backward()
    assert_allclose(tt.grad.numpy(), expected, rtol=1e-10)

    def loss(v):
        return jnp.sum(_call(case, jnp.asarray(X, dtype=jnp.float32), v) * ct)

    t32 = jnp.asarray(t, dtype=jnp.float32)
    assert_allclose(np.asarray(jax.grad(loss)(t32)), expected, rtol=2e-3)
    assert_allclose(np.asarray(jax.jit(jax.grad(loss))(t32)), expected, rtol=2e-3)


def test_the_issues_call_compiles():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    f = jax.jit(lambda v, s: rankops.soft_rank(v, method="permutahedron", strength=s))
    assert_allclose(np.asarray(f(jnp.arange(3.0), 2.0)), [1.5, 2.0, 2.5], rtol=1e-6)


# every public temperature that takes an array, beside those above: SoftSort's tau and power, NeuralSort's tau,
# Sinkhorn's epsilon (and the solver's), a learnable softness
OUTSIDE_CASES = {
    **{case: CASES[case] for case in ("soft_rank[permutahedron]", "soft_sort[permutahedron-kl]", "soft_sort[permutahedron-lp]",
                                      "soft_topk_mask[lapsum]", "soft_rank[diffsort]", "diffsort")},
    "soft_rank[softsort]": (rankops.soft_rank, (), {"method": "softsort"}, "tau", 0.5),
    "softsort-power": (rankops.softsort, (), {}, "power", 1.0),
    "soft_sort[neuralsort]": (rankops.soft_sort, (), {"method": "neuralsort"}, "tau", 0.5),
    "soft_rank[sinkhorn]": (rankops.soft_rank, (), {"method": "sinkhorn"}, "epsilon", 0.1),
    "soft_rank[lapsum-softness]": (rankops.soft_rank, (), {"method": "lapsum"}, "softness", 1.0),
}


@pytest.mark.parametrize("value", [-1.0, 0.0, np.nan, np.inf])
@pytest.mark.parametrize("case", list(OUTSIDE_CASES))
def test_array_temperature_outside_the_positive_reals_gives_nan(case, value):
    """As a Python number such a temperature raises ValueError; as an array it is not read (under jit it has no
    value), and every output is NaN, never a plausible row (a negative strength would reverse the ranks, NaN gave
    hard ones)."""
    fn, args, options, name, t = OUTSIDE_CASES[case]
    with pytest.raises(ValueError, match=f"{name} must be a finite number > 0"):
        fn(X, *args, **options, **{name: value})
    out = fn(X, *args, **options, **{name: np.asarray(value)})
    assert np.isnan(out).all()
    grads = rankops.vjp(fn, X, *args, **options, **{name: np.asarray(value)})[1](_cotangent(out))
    assert all(np.all(g == 0) for g in grads), grads  # as autodiff through NaN outputs: 0, as for a non-finite row
    assert np.isfinite(fn(X, *args, **options, **{name: np.asarray(t)})).all()  # the guard keeps a valid value's


def test_array_temperature_outside_the_positive_reals_gives_nan_under_jit_and_autograd():
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    f = jax.jit(lambda v, s: rankops.soft_rank(v, method="permutahedron", regularization="lp", strength=s))
    assert np.isnan(np.asarray(f(jax.numpy.asarray(X), -0.7))).all()
    assert np.isfinite(np.asarray(f(jax.numpy.asarray(X), 0.7))).all()
    s = torch.tensor(-0.5, dtype=torch.float64, requires_grad=True)
    out = rankops.soft_sort(torch.asarray(X), method="softsort", tau=s)
    assert torch.isnan(out).all()
    out.sum().backward()  # the loss is NaN; the backward runs, and gives 0
    assert s.grad == 0


@pytest.mark.parametrize("eps", [0.1, -0.1, np.nan])
def test_the_solver_takes_an_array_epsilon_and_reports_one_outside_as_not_converged(eps):
    """rankops.sinkhorn with a 0-d array epsilon: the plan of the same number where it is valid; NaN potentials and
    plan, a NaN error and converged False where not (the solver's iteration count, a number, is kept)."""
    rng = np.random.default_rng(4)
    cost, a, b = rng.random((4, 3)), np.full(4, 0.25), np.full(3, 1 / 3)
    result = rankops.sinkhorn(cost, a, b, epsilon=np.asarray(eps))
    if eps > 0:
        number = rankops.sinkhorn(cost, a, b, epsilon=eps)
        assert_allclose(result.plan, number.plan, rtol=1e-14)
        assert result.converged and result.n_iter == number.n_iter
    else:
        assert all(np.isnan(v).all() for v in (result.plan, result.f, result.g, result.error))
        assert not result.converged
        _, info = rankops.soft_rank(X, epsilon=np.asarray(eps), return_info=True)
        assert np.isnan(info.error).all() and not info.converged.any()


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_array_temperatures_on_every_cpu_backend(backend_name):
    """The p-norm sort's array strength equals the number's (float32 on JAX), and a temperature outside the finite
    positive reals gives NaN there too, under jit on JAX."""
    to, run = on_backend(backend_name)
    opts = {"method": "permutahedron", "regularization": "lp", "p": 1.5}
    number = rankops.soft_sort(X, strength=3.0, **opts)
    got = np.asarray(run(lambda v, s: rankops.soft_sort(v, strength=s, **opts), to(X), to(np.asarray(3.0))))
    assert_allclose(got, number, rtol=2e-6, atol=2e-6)
    bad = np.asarray(run(lambda v, s: rankops.soft_rank(v, method="lapsum", alpha=s), to(X), to(np.asarray(-0.5))))
    assert np.isnan(bad).all()
