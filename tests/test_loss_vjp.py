"""``rankops.vjp`` of the losses, and the recording namespace (``_adapters._tape``) that gives it on NumPy-like backends.

References: torch.autograd of the same loss on float64 tensors (an
independent reverse mode of the same forward), central differences where
every temperature is given (the softness scale carries no gradient, so
differences of a default call see a term the gradient leaves out on
purpose: docs/softness.md), and each tape rule against central differences
of its own function.
"""

from __future__ import annotations

import inspect
import math

import array_api_compat.numpy as xnp
import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops
from rankops import losses
from rankops._lib._adapters import PORTABLE
from rankops._lib._adapters import _tape
from conformance.losses import LOSS_SPECS

X = np.random.default_rng(5).normal(size=(3, 6))
T = np.random.default_rng(6).normal(size=(3, 6))
GRADED = np.array([[0, 1, 2, 0, 1, 2], [2, 2, 0, 0, 1, 0], [1, 0, 0, 0, 0, 3]])  # integer relevance labels
LABELS = np.array([1, 0, 5])
MASK = np.array([[True] * 6, [True] * 4 + [False] * 2, [False, True, True, False, True, True]])

# id -> (loss, positional arguments after the scores, options); each also runs with MASK where the loss takes one
CASES = {
    "spearman": (losses.spearman_loss, (T,), {}),
    "spearman-sinkhorn": (losses.spearman_loss, (T,), {"method": "sinkhorn"}),
    "spearman-neuralsort": (losses.spearman_loss, (T,), {"method": "neuralsort"}),
    "spearman-lapsum": (losses.spearman_loss, (T,), {"method": "lapsum"}),
    "spearman-diffsort": (losses.spearman_loss, (T,), {"method": "diffsort"}),
    "soft_spearman-kl": (losses.soft_spearman, (T,), {"regularization": "kl"}),
    "kendall": (losses.kendall_loss, (T,), {"tau": 0.3}),
    "topk": (losses.topk_loss, (LABELS, 2), {}),
    "topk-softsort": (losses.topk_loss, (LABELS, 2), {"method": "softsort"}),
    "ndcg": (losses.ndcg_loss, (GRADED,), {}),
    "ndcg-sinkhorn": (losses.ndcg_loss, (GRADED,), {"method": "sinkhorn"}),
    "quantile": (losses.quantile_loss, (T, 0.3), {}),
    "quantile-permutahedron": (losses.quantile_loss, (T, 0.7), {"method": "permutahedron"}),
    "pinball": (losses.pinball_loss, (T, 0.3), {}),
    "permutation": (losses.permutation_loss, (T,), {}),
    "permutation-sinkhorn": (losses.permutation_loss, (T,), {"method": "sinkhorn"}),
    "permutation-diffsort": (losses.permutation_loss, (T,), {"method": "diffsort"}),
    "permutation-softsort-tau": (losses.permutation_loss, (T,), {"method": "softsort", "tau": 0.7}),
    "topk_cross_entropy": (losses.topk_cross_entropy, (LABELS, [0.5, 0.5]), {}),
    "topk_cross_entropy-softsort": (losses.topk_cross_entropy, (LABELS, [0.3, 0.7]), {"method": "softsort"}),
    "listnet": (losses.listnet_loss, (GRADED,), {}),
    "binary_listnet": (losses.binary_listnet_loss, (GRADED,), {}),
    "listmle": (losses.listmle_loss, (GRADED,), {}),
    "ranknet": (losses.ranknet_loss, (GRADED,), {"weight_by_diff": True}),
    "lambda-ndcgLoss2PP": (losses.lambda_loss, (GRADED,), {"weighing_scheme": "ndcgLoss2PP", "k": 3}),
    "approx_ndcg": (losses.approx_ndcg_loss, (GRADED,), {}),
    "neural_ndcg": (losses.neural_ndcg_loss, (GRADED,), {"k": 3}),
    "neural_ndcg-sinkhorn": (losses.neural_ndcg_loss, (GRADED,), {"method": "sinkhorn"}),
    "smooth_ap": (losses.smooth_ap_loss, (GRADED,), {"temperature": 0.5}),
}
# every temperature given: central differences apply (spearman's default permutahedron takes no softness scale)
EXPLICIT = ["spearman", "kendall", "pinball", "listnet", "binary_listnet", "listmle", "ranknet", "lambda-ndcgLoss2PP",
            "approx_ndcg", "smooth_ap", "permutation-softsort-tau"]


def _with_mask(name: str, masked: bool) -> tuple:
    fun, args, opts = CASES[name]
    return fun, args, ({**opts, "mask": MASK} if masked else opts)


def _torch_gradients(fun, x, args, opts, ct):
    """Gradients of ``<ct, fun(...)>`` by torch.autograd, one per array argument as ``rankops.vjp`` gives them."""
    torch = pytest.importorskip("torch")
    leaves = []

    def convert(a, name):
        if not isinstance(a, np.ndarray):
            return a
        t = torch.asarray(a)
        if name != "mask" and (t.is_floating_point() or not leaves):
            t = (t if t.is_floating_point() else t.double()).requires_grad_(True)
            leaves.append(t)
        return t

    xt = convert(x, "x")
    out = fun(xt, *[convert(a, "arg") for a in args], **{k: convert(v, k) for k, v in opts.items()})
    grads = torch.autograd.grad(out, leaves, torch.asarray(ct), allow_unused=True)
    return [np.zeros(tuple(t.shape)) if g is None else g.numpy() for g, t in zip(grads, leaves)]


@pytest.mark.parametrize("masked", [False, True], ids=["whole", "mask"])
@pytest.mark.parametrize("name", list(CASES))
def test_loss_vjp_equals_torch_autograd(name, masked):
    fun, args, opts = _with_mask(name, masked)
    value, vjp_fn = rankops.vjp(fun, X, *args, **opts)
    assert_allclose(value, fun(X, *args, **opts), rtol=1e-14, atol=1e-14)
    ct = np.random.default_rng(1).normal(size=value.shape)
    grads = vjp_fn(ct)
    arrays = [X] + [a for a in args if isinstance(a, np.ndarray)]
    assert len(grads) == len(arrays)  # one per array argument but the mask
    for g, a in zip(grads, arrays):
        assert g.shape == a.shape and g.dtype == np.float64
    floating = [g for g, a in zip(grads, arrays) if a.dtype.kind == "f"]
    want = _torch_gradients(fun, X, args, opts, ct)
    for g, w in zip(floating, want):
        assert_allclose(g, w, rtol=1e-9, atol=1e-11)
    assert np.any(grads[0] != 0)
    for g, a in zip(grads, arrays):
        if a.dtype.kind != "f":  # integer labels: indices, no gradient
            assert not np.any(g)
    if masked:  # the padding gets no gradient
        assert not np.any(grads[0][~MASK])


@pytest.mark.parametrize("name", EXPLICIT)
def test_loss_vjp_against_central_differences(name):
    fun, args, opts = CASES[name]
    value, vjp_fn = rankops.vjp(fun, X, *args, **opts)
    ct = np.random.default_rng(2).normal(size=value.shape)
    (gx, *_) = vjp_fn(ct)
    h, fd = 1e-6, np.zeros_like(X)
    for i in np.ndindex(X.shape):
        e = np.zeros_like(X)
        e[i] = h
        fd[i] = np.sum(ct * (fun(X + e, *args, **opts) - fun(X - e, *args, **opts))) / (2 * h)
    assert_allclose(gx, fd, rtol=1e-6, atol=1e-7)


def test_the_targets_gradient_against_central_differences():
    """The second array is differentiated too (``soft_spearman``: both sides are soft ranks)."""
    value, vjp_fn = rankops.vjp(losses.soft_spearman, X, T, strength=0.5)
    ct = np.random.default_rng(3).normal(size=value.shape)
    _, gt = vjp_fn(ct)
    h, fd = 1e-6, np.zeros_like(T)
    for i in np.ndindex(T.shape):
        e = np.zeros_like(T)
        e[i] = h
        fd[i] = np.sum(ct * (losses.soft_spearman(X, T + e, strength=0.5) - losses.soft_spearman(X, T - e, strength=0.5))) / (2 * h)
    assert_allclose(gt, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend_name", ["array_api_strict", "dask"])
@pytest.mark.parametrize("name", ["spearman", "ndcg", "listmle", "neural_ndcg", "topk_cross_entropy", "quantile"])
def test_loss_vjp_on_other_backends_equals_numpy(name, backend_name):
    """array-api-strict and Dask record the same tape (Dask: the row functions' pullbacks mapped over row blocks)."""
    fun, args, opts = _with_mask(name, True)
    if backend_name == "dask":
        da = pytest.importorskip("dask.array")
        to = lambda a: da.from_array(a, chunks=(1,) + a.shape[1:]) if a.ndim == 2 else da.from_array(a)  # noqa: E731
        back = lambda a: np.asarray(a.compute())  # noqa: E731
    else:
        xs = pytest.importorskip(backend_name)
        to, back = xs.asarray, np.asarray
    conv = lambda a: to(a) if isinstance(a, np.ndarray) else a  # noqa: E731
    value, vjp_fn = rankops.vjp(fun, X, *args, **opts)
    ct = np.random.default_rng(4).normal(size=value.shape)
    want = vjp_fn(ct)
    bvalue, bvjp = rankops.vjp(fun, to(X), *[conv(a) for a in args], **{k: conv(v) for k, v in opts.items()})
    got = bvjp(to(ct))
    assert_allclose(back(bvalue), value, rtol=1e-13, atol=1e-14)
    for g, w in zip(got, want):
        assert type(g) is type(bvalue)
        assert_allclose(back(g), w, rtol=1e-12, atol=1e-14)


def test_loss_vjp_dtypes_batches_and_axis():
    # float32 stays float32; an integer first argument is promoted, as an operator's is
    v32, f32 = rankops.vjp(losses.listnet_loss, X.astype(np.float32), GRADED)
    g32 = f32(np.ones(v32.shape, dtype=np.float32))
    assert v32.dtype == g32[0].dtype == g32[1].dtype == np.float32
    vi, fi = rankops.vjp(losses.spearman_loss, GRADED, T)
    assert fi(np.ones(vi.shape))[0].dtype == np.float64
    # another axis and an empty batch
    v, f = rankops.vjp(losses.spearman_loss, X.T, T.T, axis=0)
    v_ref, f_ref = rankops.vjp(losses.spearman_loss, X, T)
    assert_allclose(f(np.ones(3))[0], f_ref(np.ones(3))[0].T, rtol=1e-13, atol=1e-15)
    v0, f0 = rankops.vjp(losses.listmle_loss, np.zeros((0, 4)), np.zeros((0, 4)))
    assert v0.shape == (0,) and [g.shape for g in f0(np.zeros(0))] == [(0, 4), (0, 4)]


def test_loss_vjp_refusals():
    with pytest.raises(TypeError, match="fun must be a rankops operator .* or a loss of rankops.losses"):
        rankops.vjp(np.sort, X)
    with pytest.raises(ValueError, match=r"cotangent for the output has shape \(2,\), expected \(3,\)"):
        rankops.vjp(losses.listnet_loss, X, GRADED)[1](np.ones(2))


# -- the recording namespace ------------------------------------------------------------------------

A = np.random.default_rng(7).normal(size=(2, 3, 4))
TIED = np.array([[1.0, 3.0, 3.0, -2.0], [0.5, 0.5, 0.5, 2.0]])
POSITIVE = np.exp(A)

# id -> (function of (xp, traced array), input); each is differentiated by the tape and by central differences
RULES = {
    "exp-log-log1p-expm1": (lambda xp, a: xp.log(xp.exp(a) + 2) * xp.log1p(xp.expm1(a) + 1.5), A),
    "sqrt-square-log2": (lambda xp, a: xp.sqrt(a) + xp.square(a) * xp.log2(a), POSITIVE),
    "tanh-atan-abs-neg": (lambda xp, a: xp.tanh(a) * xp.atan(-a) + abs(a), A),
    "pow-both-ways": (lambda xp, a: a**2.5 + 2.0**a + a**a, POSITIVE),
    "divide-rdivide": (lambda xp, a: (a / (a * a + 1)) + 1 / (2 + a * a), A),
    "maximum-minimum-ties": (lambda xp, a: xp.maximum(a, 0.5) * 3 + xp.minimum(a, xp.flip(a, axis=-1)), TIED),
    "where-clip": (lambda xp, a: xp.where(a > 0, a * a, -a) + xp.clip(a, -0.5, 0.5) * 7, A),
    "sum-mean-keepdims": (lambda xp, a: xp.sum(a * a, axis=(0, 2)) + xp.mean(a, axis=-1, keepdims=True) ** 3, A),
    "max-min-ties": (lambda xp, a: xp.max(a, axis=-1, keepdims=True) * 2 + xp.min(a, axis=0), TIED),
    "cumulative_sum": (lambda xp, a: xp.cumulative_sum(a * a, axis=1) + xp.cumulative_sum(a, axis=-1, include_initial=True)[..., :4], A),
    "reshape-dims": (lambda xp, a: xp.squeeze(xp.expand_dims(xp.reshape(a, (6, 4)), axis=1), axis=1) ** 2, A),
    "broadcasts": (lambda xp, a: xp.broadcast_to(a[:, None, :, :], (2, 2, 3, 4)) * xp.broadcast_arrays(a[0], a)[0], A),
    "axes": (lambda xp, a: xp.moveaxis(a, 0, -1) * xp.permute_dims(a, (1, 2, 0)) + xp.moveaxis(xp.matrix_transpose(a).mT ** 2, 0, -1), A),
    "concat-stack": (lambda xp, a: xp.concat([a, a * a], axis=1) + xp.stack([a[:, 0], a[:, 1]], axis=1)[:, :1, :], A),
    "getitem": (lambda xp, a: a[..., 1:3] * a[:, None, 0, ::2][..., :2, None][..., 0] + a[1, 2, 3], A),
    "take-repeated": (lambda xp, a: xp.take(a, xp.asarray([0, 3, 3, 1]), axis=-1) ** 2, A),
    "take_along_axis": (lambda xp, a: xp.take_along_axis(a, xp.asarray([[[2, 2], [0, 1], [3, 3]]] * 2), axis=-1) ** 2, A),
    "sort": (lambda xp, a: xp.sort(a, axis=1, descending=True) * xp.asarray([1.0, 2.0, 3.0, 4.0]), A),
    "astype-asarray": (lambda xp, a: xp.astype(xp.asarray(a, dtype=xp.float64), xp.float64, copy=True) * a, A),
    "matmul": (lambda xp, a: (a @ xp.matrix_transpose(a)) + (a @ a[0, 0])[..., None] + a[0, 0] @ xp.matrix_transpose(a[1]), A),
    "adapter-softmax-logsumexp": (lambda xp, a: xp.adapter.softmax(xp, a) * xp.adapter.logsumexp(xp, a, -1)[..., None], A),
    "adapter-sigmoids": (lambda xp, a: xp.adapter.sigmoid(xp, a) * xp.adapter.log_sigmoid(xp, -a), A),
    "adapter-sort_order-take": (lambda xp, a: xp.adapter.sort_order(xp, a, descending=True)[0] * xp.adapter.take(xp, a, xp.asarray(
        np.broadcast_to([0, 0, 3, 1], A.shape))), A),
}


def _taped(fn, a):
    """``(value, pull)`` of ``fn`` recorded on a NumPy tape."""
    value, _, pull = _tape.vjp(xnp, PORTABLE, lambda t: fn(t.__array_namespace__(), t), [a], lambda v: (v,))
    return value, lambda ct: pull((ct,))[0]


@pytest.mark.parametrize("name", list(RULES))
def test_tape_rules_against_central_differences(name):
    fn, a = RULES[name]
    value, pull = _taped(fn, a)
    if "adapter" not in name:  # the same function on NumPy itself
        assert_allclose(value, fn(xnp, a), rtol=1e-15)
    ct = np.random.default_rng(8).normal(size=value.shape)
    h, fd = 1e-6, np.zeros_like(a)
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = h
        fd[i] = np.sum(ct * (_taped(fn, a + e)[0] - _taped(fn, a - e)[0])) / (2 * h)
    assert_allclose(pull(ct), fd, rtol=1e-6, atol=1e-7)


def test_tape_refuses_what_it_cannot_differentiate():
    with pytest.raises(NotImplementedError, match="no derivative of xp.std"):
        _taped(lambda xp, t: xp.std(t, axis=-1), A)

    def write(xp, t):
        t[0] = 1.0

    with pytest.raises(TypeError, match="a traced array is immutable"):
        _taped(write, A)
    # functions whose value has no derivative read traced arrays as constants
    value, pull = _taped(lambda xp, t: t * xp.sign(t), A)
    assert_allclose(pull(np.ones_like(A)), np.sign(A))
    assert math.isclose(float(np.sum(value)), float(np.sum(np.abs(A))))


@pytest.mark.parametrize("fun", [losses.spearman_loss, losses.soft_spearman])
def test_a_constant_row_correlates_to_nan_quietly_with_a_zero_gradient(fun):
    """Pearson's correlation of a constant row is NaN as in SciPy, without a NumPy warning (pytest turns rankops'
    RuntimeWarnings into errors) and with gradient 0 on that row; the other rows are untouched."""
    x = np.concatenate([X[:2], np.full((1, 6), 0.7)])
    value, vjp_fn = rankops.vjp(fun, x, T)
    assert np.isnan(value[2]) and np.all(np.isfinite(value[:2]))
    assert_allclose(value[:2], fun(X[:2], T[:2]), rtol=1e-14)
    gx = vjp_fn(np.ones(3))[0]
    assert not np.any(gx[2]) and np.any(gx[:2])
    assert_allclose(gx[:2], rankops.vjp(fun, X[:2], T[:2])[1](np.ones(2))[0], rtol=1e-12, atol=1e-15)


HOSTILE = np.array([[1.0] * 6, [np.inf, 1, 2, 3, 4, 0], [-np.inf, 1, 2, 3, 4, 0], [np.nan, 1, 2, 3, 4, 0],
                    [1e300, -1e300, 3, 4, 5, 0], [1e-300, 2e-300, 0, 5e-301, 1e-310, 0], [1.0, 1, 2, 2, 0, 3]])


@pytest.mark.parametrize("spec", LOSS_SPECS, ids=lambda s: s.name)
def test_hostile_rows_raise_no_numpy_warning_and_leave_the_others_alone(spec):
    """Constant, infinite, NaN, huge and subnormal rows through every loss and its ``rankops.vjp`` on NumPy (eps = 0
    too, where a loss takes it): no RuntimeWarning (an error under this suite's filters), a NaN row has a NaN value,
    and the finite rows' values and gradients are those they have alone."""
    fun, args, opts = spec.call(HOSTILE, {"k": 2, "q": 0.3}, None)
    opts = {k: v for k, v in opts.items() if k not in ("k", "q")}
    variants = [opts, {**opts, "eps": 0.0}] if "eps" in inspect.signature(fun).parameters else [opts]
    for options in variants:
        value, vjp_fn = rankops.vjp(fun, HOSTILE, *args, **options)
        grad = vjp_fn(np.ones(value.shape))[0]
        assert np.isnan(value[3])
        for i in (0, 5, 6):  # finite rows: as alone
            alone = [a[i : i + 1] if isinstance(a, np.ndarray) else a for a in args]
            v_i, f_i = rankops.vjp(fun, HOSTILE[i : i + 1], *alone, **options)
            assert_allclose(value[i : i + 1], v_i, rtol=1e-12, atol=1e-300, equal_nan=True)
            assert_allclose(grad[i : i + 1], f_i(np.ones(1))[0], rtol=1e-9, atol=1e-300, equal_nan=True)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("spec", [s for s in LOSS_SPECS if s.name not in ("losses.topk_loss", "losses.topk_cross_entropy")],
                         ids=lambda s: s.name)  # those two take integer class labels, never NaN
def test_a_non_finite_target_makes_its_row_nan_quietly(spec, bad):
    """A NaN target (relevance, second argument) has no place in an order or a gain: its row's loss is NaN, with
    gradient 0 there, no NumPy warning, and the other rows as without it. An infinite target is still ordered: the
    rank losses keep a number, a gain or a residual scale it makes infinite gives NaN, and the pinball loss (exact
    arithmetic) is inf. At a masked entry it changes nothing."""
    fun, args, opts = spec.call(X, {"k": 2, "q": 0.3}, None)
    opts = {k: v for k, v in opts.items() if k not in ("k", "q")}
    target = np.array(args[0], dtype=float)
    spoiled = target.copy()
    spoiled[0, 2] = bad
    clean_value = fun(X, target, *args[1:], **opts)
    value, vjp_fn = rankops.vjp(fun, X, spoiled, *args[1:], **opts)
    assert_allclose(value[1:], clean_value[1:], rtol=1e-12)
    grad = vjp_fn(np.ones(value.shape))[0]
    if np.isnan(bad):
        assert np.isnan(value[0]), value
    if np.isnan(value[0]):
        assert np.all(grad[0] == 0), grad
    elif np.isinf(value[0]):  # the pinball loss, exact arithmetic: inf on an infinite residual
        assert spec.name == "losses.pinball_loss", value
    if "mask" in inspect.signature(fun).parameters:
        mask = np.ones(X.shape, dtype=bool)
        mask[0, 2] = False
        assert_allclose(fun(X, spoiled, *args[1:], mask=mask, **opts), fun(X, target, *args[1:], mask=mask, **opts), rtol=1e-12)
