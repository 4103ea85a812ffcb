"""Every bad input in the contract raises the documented error, naming the argument."""

from __future__ import annotations

import numpy as np
import pytest

import rankops

X = np.array([[3.0, 1.0, 2.0], [0.0, -1.0, 4.0]])


def _ops():
    """(name, call(x, **kw)) for every public operator of this milestone."""
    return [
        ("soft_sort-softsort", lambda x, **kw: rankops.soft_sort(x, method="softsort", **kw)),
        ("soft_rank-softsort", lambda x, **kw: rankops.soft_rank(x, method="softsort", **kw)),
        ("soft_sort-neuralsort", lambda x, **kw: rankops.soft_sort(x, method="neuralsort", **kw)),
        ("soft_rank-neuralsort", lambda x, **kw: rankops.soft_rank(x, method="neuralsort", **kw)),
        ("softsort", rankops.softsort),
        ("neuralsort", rankops.neuralsort),
    ]


OPS = dict(_ops())
WITH_AXIS = [k for k in OPS if k.startswith("soft_")]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan"), float("inf")])
def test_tau_must_be_positive_finite(op, tau):
    with pytest.raises(ValueError, match="tau"):
        OPS[op](X, tau=tau)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("tau", ["1", None, True, [1.0]])
def test_tau_must_be_a_number(op, tau):
    with pytest.raises(TypeError, match="tau"):
        OPS[op](X, tau=tau)


@pytest.mark.parametrize("op", OPS)
def test_tau_array_must_be_scalar(op):
    with pytest.raises(ValueError, match="tau"):
        OPS[op](X, tau=np.array([0.5, 0.5]))


@pytest.mark.parametrize("power", [0, -2.0, float("nan")])
def test_power_must_be_positive(power):
    with pytest.raises(ValueError, match="power"):
        rankops.softsort(X, power=power)
    with pytest.raises(ValueError, match="power"):
        rankops.soft_rank(X, method="softsort", power=power)


@pytest.mark.parametrize("op", WITH_AXIS)
@pytest.mark.parametrize("axis", [2, -3, 10])
def test_axis_out_of_range(op, axis):
    with pytest.raises(ValueError, match="axis"):
        OPS[op](X, axis=axis)


@pytest.mark.parametrize("op", WITH_AXIS)
@pytest.mark.parametrize("axis", [1.0, None, "0", True])
def test_axis_must_be_int(op, axis):
    with pytest.raises(TypeError, match="axis"):
        OPS[op](X, axis=axis)


@pytest.mark.parametrize("op", OPS)
def test_empty_axis(op):
    with pytest.raises(ValueError, match="empty axis"):
        OPS[op](np.ones((3, 0)))


@pytest.mark.parametrize("op", OPS)
def test_zero_dimensional(op):
    with pytest.raises(ValueError, match="0-d"):
        OPS[op](np.asarray(1.0))


@pytest.mark.parametrize("op", OPS)
def test_complex_rejected(op):
    with pytest.raises(TypeError, match="complex"):
        OPS[op](X.astype(np.complex128))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("bad", [[3.0, 1.0, 2.0], 3.0, "abc", None])
def test_non_arrays_rejected(op, bad):
    with pytest.raises(TypeError, match="must be an array"):
        OPS[op](bad)


@pytest.mark.parametrize("op", OPS)
def test_mixed_namespaces(op):
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="different namespaces"):
        OPS[op](X, tau=torch.asarray(0.5))


@pytest.mark.parametrize("op", OPS)
def test_mixed_devices(op):
    xp = pytest.importorskip("array_api_strict")
    x = xp.asarray(X)
    tau = xp.asarray(0.5, device=xp.Device("device1"))
    with pytest.raises(ValueError, match="device"):
        OPS[op](x, tau=tau)


@pytest.mark.parametrize("op", OPS)
def test_array_tau_rejected_for_dask(op):
    da = pytest.importorskip("dask.array")
    with pytest.raises(TypeError, match="tau must be Python numbers for Dask"):
        OPS[op](da.from_array(X), tau=da.from_array(np.asarray(0.5)))


@pytest.mark.parametrize("op", OPS)
def test_descending_and_hard_must_be_bool(op):
    with pytest.raises(TypeError, match="descending"):
        OPS[op](X, descending="yes")
    with pytest.raises(TypeError, match="hard"):
        OPS[op](X, hard=1)


@pytest.mark.parametrize("fn", ["soft_sort", "soft_rank"])
def test_unknown_method(fn):
    with pytest.raises(ValueError, match="method must be one of"):
        getattr(rankops, fn)(X, method="bitonic")


@pytest.mark.parametrize("fn", ["soft_sort", "soft_rank"])
def test_sinkhorn_not_yet_implemented(fn):
    with pytest.raises(NotImplementedError, match="sinkhorn"):
        getattr(rankops, fn)(X)


@pytest.mark.parametrize("fn", ["soft_sort", "soft_rank"])
def test_unknown_option(fn):
    with pytest.raises(TypeError, match="'epsilon'"):
        getattr(rankops, fn)(X, method="softsort", epsilon=0.1)
    with pytest.raises(TypeError, match="'power'"):
        getattr(rankops, fn)(X, method="neuralsort", power=2)


@pytest.mark.parametrize("fn", [rankops.softsort, rankops.neuralsort])
def test_stochastic_arguments(fn):
    with pytest.raises(ValueError, match="stochastic=True"):
        fn(X, key=0)
    with pytest.raises(ValueError, match="stochastic=True"):
        fn(X, n_samples=3)
    with pytest.raises(ValueError, match="n_samples"):
        fn(X, stochastic=True, n_samples=0)
    with pytest.raises(TypeError, match="n_samples"):
        fn(X, stochastic=True, n_samples=2.0)
    with pytest.raises(TypeError, match="stochastic"):
        fn(X, stochastic=1)
    with pytest.raises(TypeError, match="key"):
        fn(X, stochastic=True, key="seed")


def test_jax_needs_a_key():
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(ValueError, match="key is required"):
        rankops.softsort(jnp.asarray(X), stochastic=True)


def test_torch_key_type():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="torch.Generator"):
        rankops.softsort(torch.asarray(X), stochastic=True, key=np.random.default_rng(0))


def test_checks_do_not_read_values_under_jit():
    """Validation happens at trace time on shapes and Python values only."""
    jax = pytest.importorskip("jax")
    f = jax.jit(lambda x, t: rankops.soft_rank(x, method="softsort", tau=t))
    out = f(jax.numpy.asarray(X), jax.numpy.asarray(0.5))
    assert out.shape == X.shape
