"""Ragged rows (issue 33, item 1): ``mask=`` gives each row's valid entries the operator on those entries alone.

``isotonic_regression``: the reference is SciPy's fit of the valid entries
alone, row by row. The sorts, ranks and top-k masks of the methods that take
a mask: the reference is the operator on each compacted row (no mask, no
padding), computed row by row in float64 NumPy; the operators themselves are
checked against independent references in their own tests. Gradients are
those of the operator on the compacted row, with exactly 0 at masked
entries; a row without a valid entry is NaN.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from scipy.optimize import isotonic_regression as scipy_isotonic

import rankops

RNG = np.random.default_rng(7)
Y = RNG.normal(size=(6, 9))
W = RNG.uniform(0.5, 2.0, size=(6, 9))
# random masks, all but one masked, none masked, all masked
MASK = RNG.uniform(size=(6, 9)) < 0.6
MASK[1] = False
MASK[1, 4] = True
MASK[2] = True
MASK[3] = False
PADDED = np.where(MASK, Y, np.nan)  # whatever padding holds must not reach a valid entry
PADDED[0, ~MASK[0]] = np.inf


def _reference(y, mask, weights=None, increasing=True):
    out = np.zeros_like(y)
    for i in range(y.shape[0]):
        if not mask[i].any():
            out[i] = np.nan
            continue
        w = None if weights is None else np.broadcast_to(weights, y.shape)[i][mask[i]]
        out[i, mask[i]] = scipy_isotonic(y[i, mask[i]], weights=w, increasing=increasing).x
    return out


@pytest.mark.eager_backends
@pytest.mark.parametrize("increasing", [True, False])
@pytest.mark.parametrize("weighted", [None, "rows", "shared"])
def test_isotonic_mask_is_the_fit_of_the_valid_entries_alone(backend, increasing, weighted):
    weights = {None: None, "rows": W, "shared": W[0]}[weighted]
    kw = {} if weights is None else {"weights": backend.asarray(weights)}
    got = backend.to_numpy(rankops.isotonic_regression(backend.asarray(PADDED), mask=backend.asarray(MASK), increasing=increasing, **kw))
    assert_allclose(got, _reference(Y, MASK, weights, increasing), rtol=1e-6, atol=1e-6, equal_nan=True)
    assert_array_equal(got[~MASK & MASK.any(axis=1, keepdims=True)], 0.0)


def test_isotonic_mask_along_another_axis_and_broadcast():
    got = rankops.isotonic_regression(PADDED.T, mask=MASK.T, axis=0)
    assert_allclose(got, _reference(Y, MASK).T, equal_nan=True)
    shared = MASK[0]  # one mask for every row, broadcast
    assert_allclose(rankops.isotonic_regression(PADDED[:1].repeat(3, 0), mask=shared), _reference(Y[:1].repeat(3, 0), np.broadcast_to(shared, (3, 9))))


def _compacted_gradients(ct):
    """The gradients of the fit of each row's valid entries alone, scattered back (0 elsewhere)."""
    gy, gw = np.zeros_like(Y), np.zeros_like(W)
    for i in range(Y.shape[0]):
        m = MASK[i]
        if not m.any():
            continue
        _, f = rankops.vjp(rankops.isotonic_regression, Y[i, m], weights=W[i, m])
        gy[i, m], gw[i, m] = f(ct[i, m])
    return gy, gw


def test_isotonic_mask_gradients_are_those_of_the_valid_entries_alone():
    ct = RNG.normal(size=Y.shape)
    expected = _compacted_gradients(ct)
    _, f = rankops.vjp(rankops.isotonic_regression, PADDED, weights=W, mask=MASK)
    grads = f(ct)
    assert len(grads) == 2  # the mask gets none: it selects, it is not differentiated
    for g, e in zip(grads, expected):
        assert_allclose(np.nan_to_num(g), e, rtol=1e-12, atol=1e-12)
        assert np.all(g[~MASK] == 0.0)
    torch = pytest.importorskip("torch")
    y, w = torch.tensor(PADDED, requires_grad=True), torch.tensor(W, requires_grad=True)
    out = rankops.isotonic_regression(y, weights=w, mask=torch.tensor(MASK))
    (torch.nan_to_num(out) * torch.tensor(ct)).sum().backward()
    for g, e in zip((y.grad, w.grad), expected):
        assert_allclose(g.numpy(), e, rtol=1e-12, atol=1e-12)


def test_isotonic_mask_under_jit_and_vmap():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    y, m = jnp.asarray(PADDED, dtype=jnp.float32), jnp.asarray(MASK)
    f = lambda v, mk: rankops.isotonic_regression(v, mask=mk)  # noqa: E731
    eager = np.asarray(f(y, m))
    assert_allclose(np.asarray(jax.jit(f)(y, m)), eager, rtol=1e-6, equal_nan=True)
    assert_allclose(np.asarray(jax.vmap(f)(y, m)), eager, rtol=1e-6, equal_nan=True)
    assert_allclose(eager, _reference(Y, MASK), rtol=1e-5, atol=1e-6, equal_nan=True)
    g = jax.grad(lambda v: jnp.nansum(jax.jit(f)(v, m) * jnp.arange(9.0)))(y)
    assert np.all(np.asarray(g)[~MASK] == 0.0)


def test_mask_errors():
    with pytest.raises(TypeError, match=r"mask must be a bool array \(True for the valid entries\), got dtype float64"):
        rankops.isotonic_regression(Y, mask=MASK.astype(float))
    with pytest.raises(ValueError, match=r"mask of shape \(4,\) does not broadcast to y's shape \(6, 9\)"):
        rankops.isotonic_regression(Y, mask=np.ones(4, bool))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="arrays from different namespaces cannot be mixed"):
        rankops.isotonic_regression(Y, mask=torch.tensor(MASK))
    with pytest.raises(TypeError, match="mask"):  # the solver takes its marginals a and b instead
        rankops.sinkhorn(np.ones((2, 3, 3)), mask=np.ones((2, 3), bool))
    with pytest.raises(TypeError, match="mask must be a bool array"):
        rankops.soft_rank(Y, mask=MASK.astype(np.int32), method="lapsum")


# -- sorts, ranks and top-k masks ------------------------------------------------------------------

SINKHORN = {"epsilon": 0.05, "tol": 1e-10, "max_iter": 5000}  # the masked problem and the compacted one, solved alike
TARGETS = np.sort(RNG.normal(size=5))

# (operator, its options; "args": positional arguments after x). A soft_sort's valid outputs are its first n_v
# positions (with the default targets), a soft_quantile's are one per row, the others' lie where x's valid entries do.
METHOD_CASES = {
    "rank-sinkhorn": (rankops.soft_rank, {**SINKHORN}),
    "rank-sinkhorn-desc-minmax-unrolled": (rankops.soft_rank, {**SINKHORN, "descending": True, "squash": "minmax", "implicit": False}),
    "sort-sinkhorn": (rankops.soft_sort, {**SINKHORN}),
    "sort-sinkhorn-topk": (rankops.soft_sort, {**SINKHORN, "topk": 2, "descending": True}),
    "cdf-sinkhorn-arctan-m5": (rankops.soft_cdf, {**SINKHORN, "squash": "arctan", "num_targets": 5}),
    "quantile-sinkhorn": (rankops.soft_quantile, {**SINKHORN, "args": (0.3,)}),
    "quantile-sinkhorn-levels-eq4": (rankops.soft_quantile, {**SINKHORN, "args": (np.array([0.0, 0.6, 1.0]),), "centered": False}),
    "quantile-normalize-sinkhorn": (rankops.soft_quantile_normalize, {**SINKHORN, "args": (TARGETS,)}),
    "topk-sinkhorn": (rankops.soft_topk_mask, {**SINKHORN, "args": (2,)}),
    "quantize-sinkhorn": (rankops.soft_quantize, {**SINKHORN, "args": (2,)}),
    "rank-diffsort-bitonic": (rankops.soft_rank, {"method": "diffsort", "network": "bitonic", "steepness": 3.0}),
    "sort-diffsort-desc": (rankops.soft_sort, {"method": "diffsort", "steepness": 2.0, "descending": True}),
    "rank-lapsum": (rankops.soft_rank, {"method": "lapsum", "alpha": 0.7}),
    "sort-lapsum-desc": (rankops.soft_sort, {"method": "lapsum", "alpha": 0.3, "descending": True}),
    "topk-lapsum": (rankops.soft_topk_mask, {"args": (1.5,), "method": "lapsum", "alpha": 0.4}),
    "rank-permutahedron-l2": (rankops.soft_rank, {"method": "permutahedron", "strength": 0.3}),
    "rank-permutahedron-kl-desc": (rankops.soft_rank, {"method": "permutahedron", "regularization": "kl", "strength": 0.5, "descending": True}),
    "sort-permutahedron-l2-desc": (rankops.soft_sort, {"method": "permutahedron", "strength": 2.0, "descending": True}),
    "sort-permutahedron-kl": (rankops.soft_sort, {"method": "permutahedron", "regularization": "kl", "strength": 5.0}),
    "rank-softsort": (rankops.soft_rank, {"method": "softsort", "tau": 0.5}),
    "sort-softsort-streamed": (rankops.soft_sort, {"method": "softsort", "tau": 0.5, "block": 2, "power": 2.0}),
    "rank-neuralsort-streamed-desc": (rankops.soft_rank, {"method": "neuralsort", "tau": 0.8, "block": 3, "descending": True}),
    "sort-neuralsort": (rankops.soft_sort, {"method": "neuralsort", "tau": 0.8}),
    "rank-softsort-hard": (rankops.soft_rank, {"method": "softsort", "tau": 0.5, "hard": True}),
}


def _layout(fn, options):
    """Where a row's valid outputs lie: "first" n_v positions (a sort), "all" (m outputs, a reduction), or "entries"."""
    if fn is rankops.soft_quantile or (fn is rankops.soft_sort and "topk" in options):
        return "all"
    return "first" if fn is rankops.soft_sort else "entries"


def _call(fn, x, options, **extra):
    options = dict(options)
    return fn(x, *options.pop("args", ()), **options, **extra)


def _too_short(fn, options, n_valid):
    """A top-k whose k (lapsum: k >= n_v; sinkhorn: k > n_v) the row cannot give: a NaN row."""
    if fn is not rankops.soft_topk_mask and "topk" not in options:
        return False
    k = options.get("topk", options.get("args", (None,))[0])
    if not isinstance(k, (int, float)) or isinstance(k, bool):
        return False
    return k >= n_valid if options.get("method") == "lapsum" else k > n_valid


def _compacted(fn, options, x, mask):
    """The operator on each row's valid entries alone (float64 NumPy), laid out as the masked call lays it out."""
    out = None
    for i in range(x.shape[0]):
        valid = x[i][mask[i]]
        value = None if valid.size == 0 or _too_short(fn, options, valid.size) else np.asarray(_call(fn, valid, options))
        if out is None:  # the layout of the whole batch, from a row's
            probe = np.asarray(_call(fn, x[0], options))
            out = np.zeros((x.shape[0],) + probe.shape)
        layout = _layout(fn, options)
        if value is None:
            out[i] = np.nan
        elif layout == "first":
            out[i, : valid.size] = value
        elif layout == "all":
            out[i] = value
        else:
            out[i, mask[i]] = value
    return out


def _as(backend, options):
    return {**options, "args": tuple(backend.asarray(a) if isinstance(a, np.ndarray) else a for a in options.get("args", ()))}


@pytest.mark.eager_backends  # JAX's in the default run: test_masked_operators_under_jit_vmap_and_grad, conformance/test_masks.py
@pytest.mark.parametrize("case", METHOD_CASES)
def test_masked_operator_is_the_operator_on_the_valid_entries_alone(backend, case):
    fn, options = METHOD_CASES[case]
    got = backend.to_numpy(_call(fn, backend.asarray(PADDED), _as(backend, options), mask=backend.asarray(MASK)))
    expected = _compacted(fn, options, Y, MASK)
    assert_allclose(got, expected, rtol=1e-6, atol=1e-6, equal_nan=True)
    assert np.isnan(got[3]).all()  # no valid entry: NaN


@pytest.mark.parametrize("case", METHOD_CASES)
def test_masked_gradients_are_those_of_the_valid_entries_alone(case):
    torch = pytest.importorskip("torch")
    fn, options = METHOD_CASES[case]
    layout = _layout(fn, options)
    value = _call(fn, PADDED, options, mask=MASK)
    ct = RNG.normal(size=value.shape)
    tol = 1e-7 if fn in (rankops.soft_cdf, rankops.soft_quantile, rankops.soft_quantile_normalize) or "epsilon" in options else 1e-12
    expected = np.zeros_like(Y)
    as_torch = {**options, "args": tuple(torch.tensor(a) if isinstance(a, np.ndarray) else a for a in options.get("args", ()))}
    for i in range(Y.shape[0]):
        m = MASK[i]
        if not m.any() or _too_short(fn, options, m.sum()):
            expected[i] = np.nan  # a NaN row (its gradient is NaN too): left out below
            continue
        x = torch.tensor(Y[i, m], requires_grad=True)
        c = ct[i, : m.sum()] if layout == "first" else ct[i] if layout == "all" else ct[i, m]
        (_call(fn, x, as_torch) * torch.tensor(c)).sum().backward()
        expected[i, m] = x.grad.numpy()
    x = torch.tensor(PADDED, requires_grad=True)
    out = _call(fn, x, as_torch, mask=torch.tensor(MASK))
    (torch.nan_to_num(out) * torch.tensor(ct)).sum().backward()
    finite = np.isfinite(expected).all(axis=1) & MASK.any(axis=1)
    assert_allclose(x.grad.numpy()[finite], expected[finite], rtol=tol, atol=tol)
    assert np.all(x.grad.numpy()[~MASK] == 0.0)
    # the rule rankops.vjp applies on backends without autodiff
    opts = dict(options)
    _, pull = rankops.vjp(fn, PADDED, *opts.pop("args", ()), mask=MASK, **opts)
    g = pull(np.where(np.isnan(value), 0.0, ct))[0]
    assert_allclose(g[finite], expected[finite], rtol=tol, atol=tol)
    assert np.all(g[~MASK] == 0.0)


@pytest.mark.parametrize("case", ["rank-sinkhorn", "rank-lapsum", "sort-permutahedron-kl", "rank-neuralsort-streamed-desc", "sort-diffsort-desc"])
def test_masked_operators_under_jit_vmap_and_grad(case):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    fn, options = METHOD_CASES[case]
    y, m = jnp.asarray(PADDED), jnp.asarray(MASK)
    f = lambda v, mk: _call(fn, v, options, mask=mk)  # noqa: E731
    tol = 1e-8 if "epsilon" in options else 1e-12  # Sinkhorn: compiled and eager stop within tol of each other
    eager = np.asarray(f(y, m))
    assert_allclose(np.asarray(jax.jit(f)(y, m)), eager, rtol=tol, equal_nan=True)
    assert_allclose(np.asarray(jax.vmap(f)(y, m)), eager, rtol=tol, equal_nan=True)
    assert_allclose(eager, _compacted(fn, options, Y, MASK), rtol=tol, atol=tol, equal_nan=True)
    g = jax.jit(jax.grad(lambda v: jnp.nansum(f(v, m) * jnp.arange(9.0))))(y)
    assert np.all(np.asarray(g)[~MASK] == 0.0) and np.isfinite(np.asarray(g)).all()


def test_masked_temperature_arrays_and_the_shorter_row_of_topk():
    """A learnable temperature with a mask: the value and its gradient of the compacted rows."""
    torch = pytest.importorskip("torch")
    for fn, options in (METHOD_CASES["sort-permutahedron-kl"], METHOD_CASES["rank-lapsum"], METHOD_CASES["sort-softsort-streamed"]):
        name = {"permutahedron": "strength", "lapsum": "alpha", "softsort": "tau"}[options["method"]]
        t = torch.tensor(options[name], dtype=torch.float64, requires_grad=True)
        out = _call(fn, torch.tensor(PADDED), {**options, name: t}, mask=torch.tensor(MASK))
        (dt,) = torch.autograd.grad(torch.nansum(out * torch.arange(9.0)), t)
        t_ref = torch.tensor(options[name], dtype=torch.float64, requires_grad=True)
        total = 0.0
        for i in np.flatnonzero(MASK.any(axis=1)):
            c = torch.arange(9.0)[: MASK[i].sum()] if _layout(fn, options) == "first" else torch.arange(9.0)[MASK[i]]
            total = total + (_call(fn, torch.tensor(Y[i, MASK[i]]), {**options, name: t_ref}) * c).sum()
        (dt_ref,) = torch.autograd.grad(total, t_ref)
        assert_allclose(out.detach().numpy(), _compacted(fn, options, Y, MASK), rtol=1e-12, atol=1e-12, equal_nan=True)
        assert_allclose(dt.item(), dt_ref.item(), rtol=1e-10)
    # k at or above a row's n_v valid entries: that row is NaN, quietly; the others are untouched
    with np.errstate(all="raise"):
        got = rankops.soft_topk_mask(PADDED, 1.5, method="lapsum", mask=MASK)
    assert np.isnan(got[1]).all() and np.isfinite(got[[0, 2, 4, 5]]).all()


# -- losses ---------------------------------------------------------------------------------------

TARGET = RNG.normal(size=Y.shape)
LABELS = np.array([0, 4, 1, 2, 3, 5])  # a valid class on rows 0, 2, 4, 5 (checked below)
RELEVANCE = RNG.integers(0, 4, size=Y.shape).astype(float)
# loss(scores, second argument, mask): the second argument from _second(name, to, row)
LOSS_CASES = {
    "spearman_loss": lambda p, o, m: rankops.losses.spearman_loss(p, o, mask=m, strength=0.3),
    "soft_spearman-lapsum": lambda p, o, m: rankops.losses.soft_spearman(p, o, mask=m, method="lapsum"),
    "topk_loss-sinkhorn": lambda p, o, m: rankops.losses.topk_loss(p, o, 2, mask=m, method="sinkhorn", **SINKHORN),
    "ndcg_loss-neuralsort": lambda p, o, m: rankops.losses.ndcg_loss(p, o, 2, mask=m, method="neuralsort"),
    "quantile_loss-permutahedron": lambda p, o, m: rankops.losses.quantile_loss(p, o, 0.4, mask=m, method="permutahedron"),
    "quantile_loss-sinkhorn": lambda p, o, m: rankops.losses.quantile_loss(p, o, 0.7, mask=m, **SINKHORN),
    "pinball_loss": lambda p, o, m: rankops.losses.pinball_loss(p, o, 0.3, mask=m),
    "kendall_loss": lambda p, o, m: rankops.losses.kendall_loss(p, o, mask=m, tau=0.5),
    "topk_ce-diffsort": lambda p, o, m: rankops.losses.topk_cross_entropy(p, o, [0.5, 0.5], mask=m, steepness=3.0),
    "topk_ce-softsort-sort": lambda p, o, m: rankops.losses.topk_cross_entropy(p, o, [0.2, 0.8], mask=m, method="softsort", tau=0.5,
                                                                               top1_mode="sort"),
    "topk_ce-sinkhorn-smce": lambda p, o, m: rankops.losses.topk_cross_entropy(p, o, [0.5, 0.5], mask=m, method="sinkhorn",
                                                                               top1_mode="smce", **SINKHORN),
    "topk_ce-neuralsort-m3": lambda p, o, m: rankops.losses.topk_cross_entropy(p, o, [1.0], mask=m, method="neuralsort", m=3),
    "permutation_loss-neuralsort": lambda p, o, m: rankops.losses.permutation_loss(p, o, mask=m, tau=0.7),
    "permutation_loss-diffsort": lambda p, o, m: rankops.losses.permutation_loss(p, o, mask=m, method="diffsort", steepness=3.0),
    "permutation_loss-sinkhorn": lambda p, o, m: rankops.losses.permutation_loss(p, o, mask=m, method="sinkhorn", **SINKHORN),
    "soft_kendall_tau": lambda p, o, m: rankops.soft_kendall_tau(p, o, mask=m, tau=0.3),
}


def _second(case, to, i=None):
    """The loss's second argument: whole (the masked call), or row i's valid entries (the compacted one)."""
    if case.startswith("topk"):  # each row's label: its index in the padded row, or among the valid classes
        return to(LABELS if i is None else np.asarray(int(np.cumsum(MASK[i])[LABELS[i]] - 1)))
    a = RELEVANCE if case.startswith("ndcg") else TARGET
    return to(a if i is None else a[i][MASK[i]])


@pytest.mark.parametrize("case", LOSS_CASES)
def test_masked_losses_are_the_losses_of_the_valid_entries_alone(case):
    loss = LOSS_CASES[case]
    assert all(MASK[i, LABELS[i]] for i in (0, 2, 4, 5))
    with np.errstate(all="raise"):  # no NumPy warning, NaN rows included
        got = loss(PADDED, _second(case, np.asarray), MASK)
    # one entry: no correlation, no top 2 (NaN); the top-3 pre-selection needs 3
    usable = [i for i in range(Y.shape[0]) if MASK[i].sum() >= (3 if case.endswith("m3") else 2)]
    expected = [float(loss(Y[i][MASK[i]], _second(case, np.asarray, i), None)) for i in usable]
    tol = 1e-8 if "sinkhorn" in case else 1e-12
    assert_allclose(got[usable], expected, rtol=tol, atol=tol)
    assert np.isnan(got[3])  # no valid entry
    torch = pytest.importorskip("torch")
    x = torch.tensor(PADDED, requires_grad=True)
    torch.nansum(loss(x, _second(case, torch.tensor), torch.tensor(MASK))).backward()
    assert np.all(x.grad.numpy()[~MASK] == 0.0) and np.isfinite(x.grad.numpy()[usable]).all()


@pytest.mark.parametrize("fn, options", [(rankops.softsort, {"tau": 0.5, "power": 2.0}), (rankops.neuralsort, {"tau": 0.7, "hard": True}),
                                         (rankops.diffsort, {"steepness": 3.0, "network": "bitonic", "descending": True})],
                         ids=["softsort", "neuralsort-hard", "diffsort"])
def test_masked_matrices_are_the_matrices_of_the_valid_entries_alone(fn, options):
    """The first n_v rows and the valid entries' columns hold the matrix of those entries alone; the rest is 0."""
    got = fn(PADDED, mask=MASK, **options)
    for i in range(Y.shape[0]):
        k = MASK[i].sum()
        if k == 0:
            assert np.isnan(got[i]).all()
            continue
        assert_allclose(got[i][:k][:, MASK[i]], fn(Y[i, MASK[i]], **options), rtol=1e-12, atol=1e-12)
        assert np.all(got[i][k:] == 0.0) and np.all(got[i][:, ~MASK[i]] == 0.0)
    ct = RNG.normal(size=got.shape)
    _, pull = rankops.vjp(fn, PADDED, mask=MASK, **options)
    (g,) = pull(np.where(np.isnan(got), 0.0, ct))
    for i in np.flatnonzero(MASK.any(axis=1)):
        k = MASK[i].sum()
        _, pull_i = rankops.vjp(fn, Y[i, MASK[i]], **options)
        assert_allclose(g[i][MASK[i]], pull_i(ct[i][:k][:, MASK[i]])[0], rtol=1e-12, atol=1e-12)
    assert np.all(g[~MASK] == 0.0)


@pytest.mark.parametrize("options", [{}, {"descending": True}, {"num_targets": 3}, {"topk": 2}], ids=["sort", "desc", "m3", "topk2"])
def test_masked_sort_with_and_topk_sort_are_those_of_the_valid_vectors_alone(options):
    """sort_with: each row's valid vectors sorted by their criteria alone; a row of exactly k valid entries is their full sort."""
    rng = np.random.default_rng(3)
    c, vectors = rng.normal(size=(5, 7)), rng.normal(size=(5, 7, 2))
    mask = rng.uniform(size=(5, 7)) < 0.6
    mask[0], mask[1], mask[2] = True, False, False
    mask[1, 2] = True
    mask[2, 1:3] = True  # exactly two valid: topk=2 is their full sort
    kw = {**options, **SINKHORN}
    got = rankops.sort_with(np.where(mask[..., None], vectors, np.nan), np.where(mask, c, np.nan), mask=mask, **kw)
    for i in range(5):
        k = mask[i].sum()
        if kw.get("topk", 0) > k:
            assert np.isnan(got[i]).all()
            continue
        alone = rankops.sort_with(vectors[i][mask[i]], c[i][mask[i]], **kw)
        assert_allclose(got[i][: alone.shape[0]], alone, rtol=1e-8, atol=1e-8)
        assert np.all(got[i][alone.shape[0]:] == 0.0)
        if "topk" in options:  # soft_sort's top-k, alike
            sorted_alone = rankops.soft_sort(c[i][mask[i]], **kw)
            assert_allclose(rankops.soft_sort(np.where(mask, c, np.nan), mask=mask, **kw)[i], sorted_alone, rtol=1e-8, atol=1e-8)
    torch = pytest.importorskip("torch")
    x, crit = torch.tensor(np.where(mask[..., None], vectors, 0.0), requires_grad=True), torch.tensor(c, requires_grad=True)
    torch.nansum(rankops.sort_with(x, crit, mask=torch.tensor(mask), **kw)).backward()
    assert np.all(x.grad.numpy()[~mask] == 0.0) and np.all(crit.grad.numpy()[~mask] == 0.0)
