"""The adapters' row primitives (scans, segmented sums, searches, gathers, permutation inverses) against sequential NumPy.

Each backend's own kernel (torch scatter-add and ``cummax``, ``lax.associative_scan``,
...) and the portable array-API versions (NumPy, array-api-strict) must give
the same numbers as a plain loop in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from rankops._lib._adapters import get_adapter

from .backends import on_backend as _runner

CPU_BACKENDS = ["numpy", "array_api_strict", "torch", "jax"]


def on_backend(name):
    mod = pytest.importorskip(name if name != "jax" else "jax.numpy")
    from array_api_compat import array_namespace

    if name == "numpy":
        xp = array_namespace(np.zeros(1))
    else:
        xp = array_namespace(mod.asarray([0.0]))
    return xp, get_adapter(xp), lambda a: xp.asarray(a), lambda a: np.asarray(a)


def run_as_operators(name, f, *arrays):
    """``f(*arrays)`` under ``jax.jit`` on JAX, as it is elsewhere (:func:`tests.backends.on_backend`'s ``run``)."""
    return _runner(name)[1](f, *arrays)


def _linear_scan_reference(a: np.ndarray, b: np.ndarray, reverse: bool) -> np.ndarray:
    """The recurrence entry by entry; ``a[:, i]`` links entries i and i + 1."""
    out = np.empty_like(b)
    n = b.shape[1]
    for row in range(b.shape[0]):
        cols = range(n - 1, -1, -1) if reverse else range(n)
        prev = None
        for i in cols:
            link = 0.0 if prev is None else a[row, min(i, prev)]
            out[row, i] = link * (0.0 if prev is None else out[row, prev]) + b[row, i]
            prev = i
    return out


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 7, 33, 2048 + 37])  # the last ones run in chunks (and, on JAX, in blocks of 32)
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_scan_equals_the_recurrence(backend_name, n, reverse):
    xp, adapter, to, back = on_backend(backend_name)
    rng = np.random.default_rng(n)
    a = rng.uniform(0.0, 1.0, size=(3, n - 1))
    a[:, rng.integers(0, max(n - 1, 1), size=min(n - 1, 5))] = 0.0  # segment starts
    b = rng.normal(size=(3, n))
    # as the operators run it: under jax.jit on JAX (one program, not one per operation and shape)
    got = back(run_as_operators(backend_name, lambda a, b: adapter.linear_scan(xp, a, b, reverse=reverse), to(a), to(b)))
    assert_allclose(got, _linear_scan_reference(a, b, reverse), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
@pytest.mark.parametrize("n", [7, 33, 100])  # JAX: one associative scan, then blocks of 32 and their totals
def test_scans_of_a_batch_of_no_rows(backend_name, n):
    """``linear_scan`` and ``cumlogsumexp`` on batches of no rows, ``(0, n)`` and ``(2, 0, n)`` (the last batch of a
    loader): the shape back, no error. JAX's blocked scan reshaped its blocks with a -1, which a leading 0 leaves
    nothing to infer from ("integer modulo by zero"), and so failed the p = 3/2 and 5/4 soft sorts of an empty batch
    of rows of 70 under ``jax.jit`` through their threshold splits."""
    xp, adapter, to, back = on_backend(backend_name)
    for lead in ((0,), (2, 0)):
        a, b = np.zeros(lead + (n - 1,)), np.zeros(lead + (n,))
        for reverse in (False, True):
            got = run_as_operators(backend_name, lambda a, b: adapter.linear_scan(xp, a, b, reverse=reverse), to(a), to(b))
            assert back(got).shape == lead + (n,)
            got = run_as_operators(backend_name, lambda b: adapter.cumlogsumexp(xp, b, reverse=reverse), to(b))
            assert back(got).shape == lead + (n,)


@pytest.mark.parametrize("n", [100, 2048 + 37])
@pytest.mark.parametrize("reverse", [False, True])
def test_jax_linear_scan_gradient_is_the_transposed_scan(n, reverse):
    """JAX's blocked scan under ``jit(grad)``: linear in ``b``, its gradient is the scan the other way with the same links."""
    jax = pytest.importorskip("jax")
    xp, adapter, to, back = on_backend("jax")
    rng = np.random.default_rng(n)
    a, b, w = rng.uniform(0.0, 1.0, size=(2, n - 1)), rng.normal(size=(2, n)), rng.normal(size=(2, n))
    grad = jax.jit(jax.grad(lambda v: (adapter.linear_scan(xp, to(a), v, reverse=reverse) * to(w)).sum()))(to(b))
    assert_allclose(back(grad), _linear_scan_reference(a, w, not reverse), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 33, 2048 + 37])  # JAX: one block, then blocks of 32 and their totals
@pytest.mark.parametrize("reverse", [False, True])
def test_cumlogsumexp_equals_the_running_logaddexp(backend_name, n, reverse):
    xp, adapter, to, back = on_backend(backend_name)
    rng = np.random.default_rng(n)
    z = rng.normal(size=(3, n)) * 10.0 ** rng.integers(-2, 3, size=(3, n))
    z[1, ::3] = -np.inf  # entries out of the sums (a masked tail, the KL fit's padding)
    z[2, :] = -np.inf
    got = back(run_as_operators(backend_name, lambda v: adapter.cumlogsumexp(xp, v, reverse=reverse), to(z)))
    flip = (lambda a: a[:, ::-1]) if reverse else (lambda a: a)
    want = flip(np.logaddexp.accumulate(flip(z), axis=-1))
    assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    assert_allclose(got[finite], want[finite], rtol=1e-12, atol=1e-12 * np.abs(want[finite]).max(initial=0.0))


@pytest.mark.parametrize("reverse", [False, True])
def test_jax_cumlogsumexp_gradient_and_program(reverse):
    """JAX's blocked ``cumlogsumexp`` under ``jit(grad)``: the gradient of ``sum_k c_k out_k`` is ``sum_(k >= i) c_k
    exp(z_i - out_k)`` (``<=``, reversed); the program is the same at 10^3 and 10^5 entries (both padded to whole blocks) (no level per doubling of
    n, as an associative scan over the row would unroll)."""
    jax = pytest.importorskip("jax")
    xp, adapter, to, back = on_backend("jax")
    n = 10 * 32 + 17  # 11 blocks: four doubling steps over their totals
    rng = np.random.default_rng(1)
    z, c = rng.normal(size=(2, n)) * 3.0, rng.normal(size=(2, n))
    grad = back(jax.jit(jax.grad(lambda v: (adapter.cumlogsumexp(xp, v, reverse=reverse) * to(c)).sum()))(to(z)))
    flip = (lambda a: a[:, ::-1]) if reverse else (lambda a: a)
    out = flip(np.logaddexp.accumulate(flip(z), axis=-1))
    weight = np.exp(z[:, :, None] - out[:, None, :]) * c[:, None, :]  # [row, i, k]
    after = np.triu(np.ones((n, n))) if not reverse else np.tril(np.ones((n, n)))  # k >= i (k <= i, reversed)
    assert_allclose(grad, np.sum(weight * after, axis=-1), rtol=1e-10, atol=1e-12)

    def count(jaxpr):  # equations, those of loop bodies and branches included
        inner = [getattr(p, "jaxpr", p) for e in jaxpr.eqns for p in e.params.values() if hasattr(p, "eqns") or hasattr(p, "jaxpr")]
        return len(jaxpr.eqns) + sum(count(j) for j in inner)

    def size(m):
        return count(jax.make_jaxpr(lambda v: adapter.cumlogsumexp(xp, v, reverse=reverse))(jax.numpy.zeros((2, m))).jaxpr)

    assert size(1000) == size(100_003)


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
@pytest.mark.parametrize("n", [2, 3, 1000])
def test_readied_links_scan_as_the_links(backend_name, n):
    """``scan_links`` (torch: every doubling step's products, packed) scans as the plain links do, twice over."""
    xp, adapter, to, back = on_backend(backend_name)
    rng = np.random.default_rng(n)
    a = rng.uniform(0.0, 1.0, size=(2, 3, n - 1))
    bs = [np.random.default_rng(seed).normal(size=(2, 3, n)) for seed in (0, 1)]

    def twice(a, *bs):
        links = adapter.scan_links(xp, a)
        return tuple(adapter.linear_scan(xp, links, b) for b in bs)

    for b, got in zip(bs, run_as_operators(backend_name, twice, to(a), *map(to, bs))):
        want = np.stack([_linear_scan_reference(a[i], b[i], False) for i in range(2)])
        assert_allclose(back(got), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_segment_sums_and_firsts(backend_name):
    xp, adapter, to, back = on_backend(backend_name)
    rng = np.random.default_rng(3)
    g = rng.normal(size=(2, 3000)) * 10.0 ** rng.integers(-3, 4, size=(2, 3000))
    starts = rng.uniform(size=g.shape) < 0.05
    starts[:, 0] = True
    sums = back(adapter.segment_sum(xp, to(starts), to(g)))
    firsts = back(adapter.segment_first(xp, to(starts), to(g)))
    for row in range(2):
        edges = [*np.flatnonzero(starts[row]), g.shape[1]]
        for lo, hi in zip(edges[:-1], edges[1:]):
            assert len(set(sums[row, lo:hi].tolist())) == 1  # bit-identical across the segment
            assert_allclose(sums[row, lo], np.sum(g[row, lo:hi]), rtol=1e-12, atol=1e-12)
            assert_array_equal(firsts[row, lo:hi], g[row, lo])
    # stacked operands share the starts (broadcast): each slice equals its own segmented sum
    stacked = back(adapter.segment_sum(xp, to(starts), to(np.stack([g, -3.0 * g]))))
    assert_array_equal(stacked[0], sums)
    assert_allclose(stacked[1], -3.0 * sums, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("backend_name", ["torch", "jax"])
@pytest.mark.parametrize("wide", [True, False], ids=["float64", "no-float64"])
def test_precise_float32_segment_sums_keep_long_segments_within_units(backend_name, wide, monkeypatch):
    """A scatter-add sums a float32 segment one entry at a time: 41-54 units off on a segment of 5 x 10^4 entries in
    [0.5, 1) (torch). ``precise=True`` sums in float64 where the device has it, else in two levels of pieces within
    chunks of about sqrt(n) entries (``no-float64``, the route of JAX's default and of a GPU without it): within 2."""
    from rankops._lib._adapters import _generic

    if not wide:
        monkeypatch.setattr(_generic, "wide_dtype", lambda xp, g: g.dtype)
    xp, adapter, to, back = on_backend(backend_name)
    n, eps = 100_000, np.finfo(np.float32).eps
    g = np.random.default_rng(0).uniform(0.5, 1.0, size=(2, 1, n)).astype(np.float32)
    starts = np.zeros((1, n), dtype=bool)
    starts[0, [0, 10, n // 2]] = True
    want = get_adapter(np).segment_sum(np, starts, g.astype(np.float64))
    plain, precise = (back(adapter.segment_sum(xp, to(starts), to(g), precise=p)).astype(np.float64) for p in (False, True))
    assert np.max(np.abs(precise - want) / want) < 2 * eps
    assert np.max(np.abs(plain - want) / want) > 8 * eps  # the scatter's own rounding, which the test would not see


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_segment_first_of_a_computed_row_is_one_value_per_segment(backend_name):
    """The pooling rounds' one value per segment, for a ``g`` computed in the same program (the p = 4/3 root of a
    block's moments). On JAX, compiled as ``jax.jit`` compiles by default (the suite's own test-time compilation skips
    the fusion at issue): XLA fused a gather with the expression and evaluated it again at each entry, whose vectorized
    loop and scalar tail rounded it 1 ulp apart, so a pooled segment came out as two blocks (a tied row's p = 4/3 rank
    was 59 positions off). Lengths 33 and 129 leave a scalar tail."""
    from rankops._cores import powers

    xp, adapter, to, back = on_backend(backend_name)
    rng = np.random.default_rng(0)

    def firsts(starts, a, b, c):
        return adapter.segment_first(xp, starts, c - powers.moment_root(xp, 4.0, a, c, b * b, b))

    for n, dtype in ((33, np.float64), (129, np.float32)):
        a, b, c = (rng.uniform(lo, hi, size=(64, n)).astype(dtype) for lo, hi in ((0.5, 3.0), (-2.0, 2.0), (1.0, 5.0)))
        starts = np.zeros((64, n), dtype=bool)
        starts[:, [0, n // 2]] = True
        args = tuple(map(to, (starts, a, b, c)))
        if backend_name == "jax":
            import jax

            optimised = {"xla_backend_optimization_level": 3, "xla_llvm_disable_expensive_passes": False}
            got = back(jax.jit(firsts).lower(*args).compile(optimised)(*args))
        else:
            got = back(firsts(*args))
        for lo, hi in ((0, n // 2), (n // 2, n)):
            assert_array_equal(got[:, lo:hi], np.broadcast_to(got[:, lo:lo + 1], (64, hi - lo)))


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_searchsorted_take_and_inverse_permutation(backend_name):
    xp, adapter, to, back = on_backend(backend_name)
    rng = np.random.default_rng(4)
    seq = np.sort(rng.integers(0, 20, size=(3, 50)).astype(float), axis=-1)  # with ties
    values = rng.integers(-2, 23, size=(3, 40)).astype(float)
    for side in ("left", "right"):
        got = back(adapter.searchsorted(xp, to(seq), to(values), side=side))
        assert_array_equal(got, np.stack([np.searchsorted(s, v, side=side) for s, v in zip(seq, values)]))
    order = np.stack([rng.permutation(50) for _ in range(3)])
    assert_array_equal(back(adapter.invert_permutation(xp, to(order))), np.argsort(order, axis=-1))
    assert_array_equal(back(adapter.take(xp, to(seq), to(order))), np.take_along_axis(seq, order, axis=-1))


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_order_is_a_stable_sort_with_its_values(backend_name, descending):
    """``sort_order``: the values sorted and the stable order (ties keep their positions, -0.0 and 0.0 tie)."""
    xp, adapter, to, back = on_backend(backend_name)
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, size=(3, 60)).astype(float)  # many ties
    x[0, :4] = [0.0, -0.0, 0.0, -0.0]
    s, order = (back(a) for a in adapter.sort_order(xp, to(x), descending=descending))
    # NumPy's stable sort of -x gives the stable descending order (NaN-free rows)
    expected = np.argsort(-x if descending else x, axis=-1, kind="stable")
    assert_array_equal(order, expected)
    assert_array_equal(s, np.take_along_axis(x, expected, axis=-1))
    assert_array_equal(np.signbit(s), np.signbit(np.take_along_axis(x, expected, axis=-1)))  # the values themselves


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "int8"])
@pytest.mark.parametrize("descending", [False, True])
def test_jax_packed_sort_order_is_numpys_stable_order(dtype, descending):
    """JAX's ``sort_order`` on a CPU sorts rows of at most 32 bits as one array of 64-bit integers (an order-preserving
    key above each entry's position, ``_jax._packed_order``), eagerly and under ``jit``: the order is NumPy's stable
    argsort's (``-x``'s descending), on rows with runs of ties, -0.0 beside 0.0, infinities and NaNs of either sign
    last; the values are the row's own, bit for bit; the gradient of the values flows back to the entries they came
    from; a batch of no rows and rows of one entry keep their shapes."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from array_api_compat import array_namespace

    from rankops._lib._adapters import _jax

    rng = np.random.default_rng(7)
    if dtype.startswith("int"):
        x = rng.integers(np.iinfo(dtype).min + 1, np.iinfo(dtype).max, size=(3, 300)).astype(dtype)
        x[:, :100] = x[:, 100:200]  # ties
        x[0, 200:210] = np.iinfo(dtype).min + 1
    else:
        x = rng.normal(size=(3, 300)).astype(np.float32)
        x[:, :100] = np.round(x[:, 100:200], 1)  # ties
        x[0, 200:240:2], x[0, 201:240:2] = 0.0, -0.0
        x[1, 200:204] = [np.inf, -np.inf, np.nan, -np.nan]
        x[2, 250:260] = np.nan
    a = jnp.asarray(x, dtype=dtype)
    xp = array_namespace(a)
    assert _jax._packs(a) == (jax.default_backend() == "cpu")
    host = np.asarray(a).astype(np.float64)  # exact for each dtype here; NumPy sorts NaN last, -0.0 tied with 0.0
    expected = np.argsort(-host if descending else host, axis=-1, kind="stable")
    for run in (lambda v: _jax.ADAPTER.sort_order(xp, v, descending=descending),
                jax.jit(lambda v: _jax.ADAPTER.sort_order(xp, v, descending=descending))):
        s, order = run(a)
        assert order.dtype == jnp.int64  # the index dtype (this suite runs JAX with 64-bit types)
        assert_array_equal(np.asarray(order), expected)
        assert_array_equal(np.asarray(s).view(np.uint8), np.take_along_axis(np.asarray(a), expected, axis=-1).view(np.uint8))
    if not dtype.startswith("int"):
        w = jnp.asarray(rng.normal(size=(3, 300)), dtype=dtype)
        grad = jax.grad(lambda v: jnp.sum(jnp.where(jnp.isfinite(s := _jax.ADAPTER.sort_order(xp, v, descending=descending)[0]), s, 0) * w))(a)
        want = np.zeros((3, 300))
        np.put_along_axis(want, expected, np.where(np.isfinite(np.take_along_axis(host, expected, axis=-1)), np.asarray(w, np.float64), 0.0), axis=-1)
        assert_array_equal(np.asarray(grad, np.float64), want)
    for shape in ((0, 5), (4, 1), (2, 0, 3)):
        s, order = _jax.ADAPTER.sort_order(xp, jnp.zeros(shape, dtype=dtype), descending=descending)
        assert s.shape == order.shape == shape
        assert_array_equal(np.asarray(order), np.broadcast_to(np.arange(shape[-1]), shape))


def test_jax_lapsum_past_one_scan_block_differentiates():
    """LapSum on JAX at n = 100 (four blocks of its blocked scan) under ``jit(value_and_grad)``, forward mode inside
    (JAX transposes LapSum's linear pullback): the values are NumPy's and the gradient is the central differences'."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import rankops
    from tests.reference import central_vjp

    rng = np.random.default_rng(5)
    x, w = rng.normal(size=(2, 100)), rng.normal(size=(2, 100))
    value, grad = jax.jit(jax.value_and_grad(lambda v: jnp.sum(rankops.soft_rank(v, method="lapsum", alpha=0.3) * w)))(jnp.asarray(x))
    ranks = rankops.soft_rank(x, method="lapsum", alpha=0.3)
    assert_allclose(float(value), np.sum(ranks * w), rtol=1e-12)
    assert_allclose(np.asarray(grad), central_vjp(lambda z: rankops.soft_rank(z, method="lapsum", alpha=0.3), x, w), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
@pytest.mark.parametrize("reverse", [False, True])
def test_float32_prefix_sums_stay_within_a_few_units_in_their_last_place(backend_name, reverse):
    """A float32 row of 10^4 entries in [0, 1): the adapter's prefix sums within 4 units in the last place of the
    row's total of the float64 ones. NumPy adds one entry at a time in float32 and drifted by 22.6 units on this row
    (the portable adapter accumulates in float64 on a CPU whose device has it); torch's CPU kernel accumulates in
    double, XLA's scan pairwise."""
    xp, adapter, to, back = on_backend(backend_name)
    g = np.random.default_rng(4).uniform(size=(2, 10_000)).astype(np.float32)
    want = np.cumsum(g.astype(np.float64)[..., ::-1] if reverse else g.astype(np.float64), axis=-1)
    want = want[..., ::-1] if reverse else want
    got = back(run_as_operators(backend_name, lambda a: adapter.cumulative_sum(xp, a, reverse=reverse), to(g)))
    assert got.dtype == np.float32
    ulp = np.spacing(np.float32(want.max()))
    assert np.abs(got - want).max() <= 4 * ulp, np.abs(got - want).max() / ulp


@pytest.mark.parametrize("backend_name", CPU_BACKENDS)
def test_float32_sums_over_a_leading_axis_stay_within_a_few_units_in_their_last_place(backend_name):
    """The column sums of a float32 (2, 10^4, 3) array in [0, 1) (a transport plan's shape): the adapter's ``sum``
    over axis -2 within 4 units in the last place of the float64 sums. NumPy sums over any axis but the last one entry
    at a time and drifted by 24 units; the portable adapter accumulates in float64 on a CPU."""
    xp, adapter, to, back = on_backend(backend_name)
    g = np.random.default_rng(6).uniform(size=(2, 10_000, 3)).astype(np.float32)
    want = np.sum(g.astype(np.float64), axis=-2)
    got = back(run_as_operators(backend_name, lambda a: adapter.sum(xp, a, -2), to(g)))
    assert got.dtype == np.float32
    ulp = np.spacing(np.float32(want.max()))
    assert np.abs(got - want).max() <= 4 * ulp, np.abs(got - want).max() / ulp
