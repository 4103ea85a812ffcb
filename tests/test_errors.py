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


def test_vjp_errors():
    with pytest.raises(TypeError, match="fun must be a rankops operator"):
        rankops.vjp(np.sort, X)
    with pytest.raises(TypeError, match="positional"):
        rankops.vjp(rankops.soft_rank, X, 1, 2)
    with pytest.raises(TypeError, match="x must be an array"):
        rankops.vjp(rankops.soft_rank, [1.0, 2.0])
    with pytest.raises(TypeError, match="'tau'"):  # the operator's own checks apply
        rankops.vjp(rankops.soft_rank, X, tau=0.1)
    _, vjp_fn = rankops.vjp(rankops.soft_rank, X)
    with pytest.raises(ValueError, match="cotangent .* shape"):
        vjp_fn(np.ones((1, 2)))
    with pytest.raises(TypeError, match="cotangent must be an array"):
        vjp_fn(None)
    _, vjp_fn = rankops.vjp(rankops.sinkhorn, np.ones((3, 2)), epsilon=0.1)
    with pytest.raises(TypeError, match="cotangent of sinkhorn"):
        vjp_fn({"plan": np.ones((3, 2))})


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


# -- Sinkhorn operators --------------------------------------------------------------

SINKHORN = {
    "soft_rank": lambda x, **kw: rankops.soft_rank(x, **kw),
    "soft_sort": lambda x, **kw: rankops.soft_sort(x, **kw),
    "soft_cdf": lambda x, **kw: rankops.soft_cdf(x, **kw),
    "soft_quantile": lambda x, **kw: rankops.soft_quantile(x, 0.5, **kw),
    "soft_quantile_normalize": lambda x, **kw: rankops.soft_quantile_normalize(x, np.linspace(0.0, 1.0, 3), **kw),
    "soft_topk_mask": lambda x, **kw: rankops.soft_topk_mask(x, 2, **kw),
    "sinkhorn": lambda c, **kw: rankops.sinkhorn(c, **{"epsilon": 0.1, **kw}),
}


@pytest.mark.parametrize("op", SINKHORN)
@pytest.mark.parametrize("epsilon", [0.0, -0.1, float("nan"), float("inf")])
def test_epsilon_must_be_positive(op, epsilon):
    with pytest.raises(ValueError, match="epsilon"):
        SINKHORN[op](X, epsilon=epsilon)


@pytest.mark.parametrize("op", SINKHORN)
def test_solver_options(op):
    with pytest.raises(ValueError, match="max_iter"):
        SINKHORN[op](X, max_iter=0)
    with pytest.raises(TypeError, match="max_iter"):
        SINKHORN[op](X, max_iter=10.0)
    with pytest.raises(ValueError, match="tol"):
        SINKHORN[op](X, tol=0.0)
    with pytest.raises(TypeError, match="implicit"):
        SINKHORN[op](X, implicit="yes")


@pytest.mark.parametrize("op", [k for k in SINKHORN if k != "sinkhorn"])
def test_operator_options(op):
    with pytest.raises(ValueError, match="squash"):
        SINKHORN[op](X, squash="tanh")
    with pytest.raises(ValueError, match="power"):
        SINKHORN[op](X, power=0)
    with pytest.raises(TypeError, match="'tau'"):
        SINKHORN[op](X, tau=0.1)
    with pytest.raises(ValueError, match="axis"):
        SINKHORN[op](X, axis=5)
    with pytest.raises(ValueError, match="empty axis"):
        SINKHORN[op](np.ones((2, 0)))
    with pytest.raises(TypeError, match="complex"):
        SINKHORN[op](X.astype(complex))


@pytest.mark.parametrize("fn", [rankops.soft_rank, rankops.soft_sort, rankops.soft_cdf])
def test_target_options(fn):
    with pytest.raises(ValueError, match="num_targets"):
        fn(X, num_targets=0)
    with pytest.raises(ValueError, match="target_weights"):
        fn(X, target_weights=np.ones((2, 2)) / 4)
    with pytest.raises(ValueError, match="target_weights has length 3"):
        fn(X, num_targets=4, target_weights=np.ones(3) / 3)
    with pytest.raises(TypeError, match="different namespaces"):
        fn(X, target_weights=pytest.importorskip("torch").ones(3) / 3)


@pytest.mark.parametrize("q", [-0.1, 1.5, float("nan")])
def test_quantile_level_out_of_range(q):
    with pytest.raises(ValueError, match="q must lie in"):
        rankops.soft_quantile(X, q)


@pytest.mark.parametrize("q", ["0.5", [0.5], None, True])
def test_quantile_level_type(q):
    with pytest.raises(TypeError, match="q must be"):
        rankops.soft_quantile(X, q)


def test_quantile_levels_array_shape_and_namespace():
    with pytest.raises(ValueError, match="q must be a 1-D array"):
        rankops.soft_quantile(X, np.ones((2, 2)) / 2)
    with pytest.raises(TypeError, match="different namespaces"):
        rankops.soft_quantile(X, pytest.importorskip("torch").asarray([0.5]))
    for bad in (0.0, 1.0, 2.0):
        with pytest.raises(ValueError, match="filler"):
            rankops.soft_quantile(X, 0.5, filler=bad)
    with pytest.raises(TypeError, match="'num_targets'"):
        rankops.soft_quantile(X, 0.5, num_targets=3)


@pytest.mark.parametrize("k", [0, 4, -1])
def test_topk_k_out_of_range(k):
    with pytest.raises(ValueError, match="k must"):
        rankops.soft_topk_mask(X, k)


@pytest.mark.parametrize("k", [1.0, "2", None])
def test_topk_k_type(k):
    with pytest.raises(TypeError, match="k must"):
        rankops.soft_topk_mask(X, k)


def test_quantile_normalize_targets():
    with pytest.raises(ValueError, match="targets must be a 1-D array"):
        rankops.soft_quantile_normalize(X, np.ones((2, 3)))
    with pytest.raises(TypeError, match="targets must be a 1-D array"):
        rankops.soft_quantile_normalize(X, [0.0, 1.0])
    with pytest.raises(TypeError, match="different namespaces"):
        rankops.soft_quantile_normalize(X, pytest.importorskip("torch").ones(3))
    with pytest.raises(ValueError, match="targets must not be empty"):
        rankops.soft_quantile_normalize(X, np.ones(0))
    with pytest.raises(ValueError, match="target_weights has length 2"):
        rankops.soft_quantile_normalize(X, np.ones(3), target_weights=np.ones(2) / 2)
    with pytest.raises(TypeError, match="'num_targets'"):
        rankops.soft_quantile_normalize(X, np.ones(3), num_targets=3)


def test_sinkhorn_shapes_and_namespaces():
    cost = np.ones((2, 3, 4))
    with pytest.raises(ValueError, match="cost must have shape"):
        rankops.sinkhorn(np.ones(3), epsilon=0.1)
    with pytest.raises(ValueError, match="a must have shape"):
        rankops.sinkhorn(cost, np.ones(4) / 4, epsilon=0.1)
    with pytest.raises(ValueError, match="b must have shape"):
        rankops.sinkhorn(cost, None, np.ones(3) / 3, epsilon=0.1)
    with pytest.raises(TypeError, match="epsilon"):
        rankops.sinkhorn(cost)
    with pytest.raises(TypeError, match="different namespaces"):
        rankops.sinkhorn(cost, pytest.importorskip("torch").ones(3) / 3, epsilon=0.1)
    with pytest.raises(ValueError, match="empty axis"):
        rankops.sinkhorn(np.ones((3, 0)), epsilon=0.1)
