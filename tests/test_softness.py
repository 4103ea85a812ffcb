"""``softness=``: calibrated rank blur on every method, gradients through the row's scale, masks, ties, backends.

References are independent: ``scipy.stats.rankdata`` for the blur, central
differences of the float64 operator for gradients, the same operator on a
row's valid entries alone for masks. docs/softness.md states the contract.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.stats import rankdata

import rankops
from benchmarks.softness import _sort_places, sample
from tests import reference as ref

METHODS = ("sinkhorn", "softsort", "neuralsort", "permutahedron", "lapsum", "diffsort")
# the bands of docs/softness.md: normal and uniform rows within 1.5 of s, lognormal and clustered within 2.5
BAND = {"normal": 1.5, "uniform": 1.5, "lognormal": 2.5, "clustered": 2.5}


def blur(method: str, x: np.ndarray, s: float, **options) -> float:
    return float(np.mean(np.abs(rankops.soft_rank(x, method=method, softness=s, **options) - rankdata(x, axis=-1))))


def sort_blur(method: str, x: np.ndarray, s: float, **options) -> float:
    """A soft sort's blur in places: each sorted value's place among the row's hard sorted values, from its own."""
    places = _sort_places(x, rankops.soft_sort(x, method=method, softness=s, **options))
    return float(np.mean(np.abs(places - rankdata(x, axis=-1))))


def _check_band(method: str, n: int, dists, softnesses, rows: int, seed: int, bands: dict | None = None, **options) -> None:
    rng = np.random.default_rng(seed)
    bands = bands or BAND
    outside = []
    for dist in dists:
        x = sample(dist, (rows, n), rng)
        for s in softnesses:
            ratio = blur(method, x, s, **options) / s
            if not 1 / bands[dist] <= ratio <= bands[dist]:
                outside.append((method, n, dist, s, round(ratio, 3)))
    assert not outside, outside


# A row's blur at s = 0.3 is set by its few closest pairs: rows enough for 5,000 entries (20,000 in the full grid)
# keep the sample's own spread far inside the bands.
def _rows(n: int, entries: int = 5000) -> int:
    return max(1, entries // n)


@pytest.mark.parametrize("method", METHODS)
def test_blur_is_about_softness(method):
    """A few lengths and softnesses on the four distributions (the full grid: ``-m exhaustive``)."""
    n = 64 if method == "diffsort" else 100
    lo = 1.0 if method == "sinkhorn" else 0.3
    _check_band(method, n, tuple(BAND), (lo, n / 20), rows=_rows(n), seed=0)


# the p-norm permutahedron: q = p / (p - 1) = 3, 4, 5 and 6 measured (p = 1.25: q = 5), p = 1.4, 1.75 and 1.22 read
# from tables blended in p. Its blur is set by where a row's gaps lie, not by one scale (docs/softness.md, "Limits"):
# normal rows hold the bands (on rows of 1000 and more below the pooling threshold, as "l2"'s), the others a factor 3
# up to n = 100 (2.6 measured), and drift beyond it on longer rows
P_NORMS = (1.5, 4.0 / 3.0, 1.4, 1.75, 1.25, 1.22)
WIDE = dict.fromkeys(BAND, 3.0)


@pytest.mark.parametrize("p", P_NORMS)
def test_blur_is_about_softness_for_the_p_norm(p):
    _check_band("permutahedron", 100, tuple(BAND), (0.3, 5.0), rows=_rows(100), seed=4, bands=WIDE, regularization="lp", p=p)
    _check_band("permutahedron", 1000, ("normal",), _softnesses("permutahedron", 1000), rows=_rows(1000), seed=5,
                regularization="lp", p=p)


SORTS = (*((m, {}) for m in METHODS), ("permutahedron", {"regularization": "kl"}),
         ("permutahedron", {"regularization": "lp"}), ("permutahedron", {"regularization": "lp", "p": 1.5}))


@pytest.mark.parametrize("method, options", SORTS, ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v.values())))
def test_a_sort_softens_as_softness_grows(method, options):
    """Every method's soft sort blurs more, in places, at a larger softness (the permutahedron's read the rank's
    length as 1 / strength once: the other way round), and at s = 0.3 stays near the hard sort."""
    n = 64 if method == "diffsort" else 100
    x = sample("normal", (_rows(n, 2000), n), np.random.default_rng(11))
    blurs = [sort_blur(method, x, s, **options) for s in (0.3, 1.0, 3.0)]
    assert blurs[0] < blurs[1] < blurs[2], blurs
    assert blurs[0] < 0.6, blurs


@pytest.mark.parametrize("options", ({}, {"regularization": "kl"}, {"regularization": "lp"}, {"regularization": "lp", "p": 1.25},
                                     {"regularization": "lp", "p": 1.2}), ids=("l2", "kl", "lp", "lp-1.25", "lp-1.2"))
def test_permutahedron_sort_blur_is_about_softness(options):
    """The permutahedron's sort reads tables of its own (docs/softness.md, "Sorts"): normal rows hold the bands."""
    rng = np.random.default_rng(12)
    for n in (10, 100, 1000):
        x = sample("normal", (_rows(n), n), rng)
        ratios = [sort_blur("permutahedron", x, s, **options) / s for s in (0.3, 1.0, max(1.0, n / 20))]
        assert all(1 / 1.5 <= r <= 1.5 for r in ratios), (n, ratios)


def test_the_p_norm_below_its_calibration_keeps_strength_as_its_default():
    """Below p = 6/5 there is no table: softness= is an error (tests/test_errors.py) and the default is strength=1; at
    and above it the default is softness=1, as for the other regularizers."""
    x = np.random.default_rng(5).standard_normal((3, 50)) * 100.0
    lp = {"method": "permutahedron", "regularization": "lp"}
    assert_allclose(rankops.soft_rank(x, p=1.1, **lp), rankops.soft_rank(x, p=1.1, strength=1.0, **lp), rtol=0, atol=0)
    for p in (1.2, 1.25, 4.0 / 3.0, 1.75):
        assert_allclose(rankops.soft_rank(x, p=p, **lp), rankops.soft_rank(x, p=p, softness=1.0, **lp), rtol=0, atol=0)
        assert 0.5 <= blur("permutahedron", x, 1.0, p=p, regularization="lp") <= 2.0


def test_blur_is_about_softness_on_long_rows():
    _check_band("lapsum", 10_000, tuple(BAND), (0.3, 3.0, 500.0), rows=1, seed=1)


# Where the methods themselves leave the bands (docs/softness.md, "Calibration, measured" and "Limits"):
# - the permutahedron's blur near its pooling threshold (s between about 1 and n / 30 on rows of 1000 and more) is
#   set by a row's few largest pooled blocks and varies by a factor 2-3 from row to row, normal rows included: the
#   full grid asserts it below the threshold;
# - SoftSort's and NeuralSort's ranks blur by at most about n / 30 (less on lognormal rows): the grid stops at n / 40;
# - Sinkhorn's squash standardizes by the standard deviation: on lognormal and clustered rows of 300 and more its
#   blur reaches 3.6 times s near s = 3 (band 4 there).
def _softnesses(method: str, n: int) -> list[float]:
    lo = 1.0 if method == "sinkhorn" else 0.3
    top = n / 40 if method in ("softsort", "neuralsort") else n / 20
    ss = sorted({lo, *(s for s in (1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0) if lo <= s <= top), max(lo, top)})
    if method == "permutahedron" and n >= 1000:
        ss = [s for s in ss if s <= 0.3]
    return ss


def _bands(method: str, n: int) -> dict:
    return {**BAND, "lognormal": 4.0, "clustered": 4.0} if method == "sinkhorn" and n >= 300 else BAND


@pytest.mark.exhaustive
@pytest.mark.parametrize("method", METHODS)
def test_blur_is_about_softness_full_grid(method):
    largest = {"sinkhorn": 1000, "softsort": 1000, "neuralsort": 1000, "diffsort": 1024}.get(method, 100_000)
    ns = (16, 128, 1024) if method == "diffsort" else tuple(n for n in (10, 100, 1000, 10_000, 100_000) if n <= largest)
    for n in ns:
        _check_band(method, n, tuple(BAND), _softnesses(method, n), rows=_rows(n, 20_000), seed=n, bands=_bands(method, n))


@pytest.mark.exhaustive
@pytest.mark.parametrize("p", P_NORMS)
def test_blur_is_about_softness_full_grid_for_the_p_norm(p):
    for n in (10, 100):
        _check_band("permutahedron", n, tuple(BAND), _softnesses("permutahedron", n), rows=_rows(n, 20_000), seed=n,
                    bands=WIDE if n > 10 else BAND, regularization="lp", p=p)
    for n in (1000, 10_000):  # below the pooling threshold, as "l2"'s grid
        _check_band("permutahedron", n, ("normal",), _softnesses("permutahedron", n), rows=_rows(n, 20_000), seed=n,
                    regularization="lp", p=p)


@pytest.mark.parametrize("method", METHODS)
def test_defaults_blur_within_bounds(method):
    """At its defaults every method blurs ranks by at least 0.05 (never silently hard) and at most max(10, n / 100)."""
    rng = np.random.default_rng(3)
    for n in (10, 100, 1000) if method != "diffsort" else (16, 128, 1024):
        x = rng.standard_normal((2, n))
        for scale in (0.01, 100.0):
            b = float(np.mean(np.abs(rankops.soft_rank(scale * x, method=method) - rankdata(x, axis=-1))))
            assert 0.05 <= b <= max(10.0, n / 100), (method, n, scale, b)


OUTPUTS = {"rank": rankops.soft_rank, "sort": rankops.soft_sort}


def _native(method: str, output: str, x: np.ndarray, s: float) -> dict:
    """The native temperature that softness sets on each row of ``x`` (one row here): ``t = scale * T(s, n)``."""
    import array_api_compat.numpy as xp

    from rankops._cores.softness import length, reads_deviation, row_scale

    key = {"permutahedron": f"permutahedron-{'sort-' * (output == 'sort')}l2", "softsort": "softsort-1",
           "diffsort": "diffsort-cauchy"}.get(method, method)
    t = float(row_scale(xp, np.sort(x, axis=-1), x.shape[-1], reads_deviation(key))[0, 0]) * length(xp, key, s, x.shape[-1])
    return {"lapsum": {"alpha": t}, "softsort": {"tau": t}, "neuralsort": {"tau": t}, "diffsort": {"steepness": 1.0 / t},
            "permutahedron": {"strength": t if output == "rank" else 1.0 / t}}[method]


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("method", ("softsort", "neuralsort", "permutahedron", "lapsum", "diffsort"))
def test_softness_is_the_native_temperature_of_the_row(method, output):
    """Value: the method at the temperature softness sets from the row; gradient: that method's at that temperature,
    against central differences (the scale carries no gradient, docs/softness.md), on NumPy's own rule."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 9))
    ct = rng.standard_normal((1, 9))
    s = 4.0 if method == "permutahedron" else 1.5  # the permutahedron pools blocks: a non-zero gradient
    native = _native(method, output, x, s)
    fn = OUTPUTS[output]
    assert_allclose(fn(x, method=method, softness=s), fn(x, method=method, **native), rtol=1e-12, atol=1e-12)
    _, back = rankops.vjp(fn, x, method=method, softness=s)
    (got,) = back(ct)
    want = ref.central_vjp(lambda v: fn(v, method=method, **native), x, ct)
    assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ("lapsum", "permutahedron", "neuralsort", "diffsort", "sinkhorn"))
def test_learnable_softness_gradient(method):
    """A 0-d array softness receives the derivative of the operator in it (NumPy's rule against central differences)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 8))
    ct = rng.standard_normal((3, 8))
    s0 = 2.5 if method != "sinkhorn" else 1.5
    extra = {"tol": 1e-10, "max_iter": 20_000} if method == "sinkhorn" else {}

    def f(s: float) -> float:
        return float(np.sum(ct * rankops.soft_sort(x, method=method, softness=np.asarray(s), **extra)))

    _, back = rankops.vjp(rankops.soft_sort, x, method=method, softness=np.asarray(s0), **extra)
    _, ds = back(ct)
    h = 1e-5
    assert_allclose(ds, (f(s0 + h) - f(s0 - h)) / (2 * h), rtol=2e-4, atol=1e-7)


@pytest.mark.parametrize("method", ("softsort", "neuralsort", "permutahedron", "lapsum", "diffsort"))
def test_host_autodiff_equals_the_rule(method):
    """torch autograd and jax.grad (through the scale and a learnable softness) equal NumPy's hand-written pullback."""
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 7))
    ct = rng.standard_normal((2, 7))
    _, back = rankops.vjp(rankops.soft_rank, x, method=method, softness=np.asarray(2.0))
    want_x, want_s = back(ct)
    xt, st = torch.tensor(x, requires_grad=True), torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    gx, gs = torch.autograd.grad((rankops.soft_rank(xt, method=method, softness=st) * torch.tensor(ct)).sum(), (xt, st))
    assert_allclose(gx.numpy(), want_x, rtol=1e-9, atol=1e-11)
    assert_allclose(gs.numpy(), want_s, rtol=1e-9, atol=1e-11)
    jnp = jax.numpy
    loss = jax.jit(lambda v, s: jnp.sum(rankops.soft_rank(v, method=method, softness=s) * ct))
    jx, js = jax.grad(loss, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(2.0))
    assert_allclose(np.asarray(jx), want_x, rtol=1e-9, atol=1e-11)
    assert_allclose(np.asarray(js), want_s, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("method", ("softsort", "neuralsort", "permutahedron", "lapsum", "diffsort"))
def test_masked_rows_are_their_valid_entries_alone(method):
    """The scale and n of a masked row are its valid entries': the same ranks and sort as the entries alone."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 12))
    mask = np.ones((2, 12), bool)
    mask[0, 7:] = False
    x[0, 7:] = np.nan  # padding may hold anything
    for fn in (rankops.soft_rank, rankops.soft_sort):
        got = fn(x, method=method, softness=1.5, mask=mask)
        alone = fn(x[:1, :7], method=method, softness=1.5)
        assert_allclose(got[0, :7], alone[0], rtol=1e-12, atol=1e-12)
        assert_allclose(got[0, 7:], 0.0)
        assert_allclose(got[1], fn(x[1:], method=method, softness=1.5)[0], rtol=1e-12, atol=1e-12)
    _, back = rankops.vjp(rankops.soft_rank, x, method=method, softness=1.5, mask=mask)
    (g,) = back(np.ones_like(x))
    assert np.all(g[0, 7:] == 0.0) and np.all(np.isfinite(g))


@pytest.mark.parametrize("method", METHODS)
def test_constant_and_tied_rows(method):
    """A constant row (scale 0, read as 1) gives its tied ranks and itself as the sort, never NaN; a row of many
    ties (integer ratings: the densest window holds ties only) takes the mean absolute deviation, and stays finite."""
    x = np.full((1, 6), 3.25)
    ranks, values = rankops.soft_rank(x, method=method, softness=1.0), rankops.soft_sort(x, method=method, softness=1.0)
    assert np.all(np.isfinite(ranks)) and np.all(np.isfinite(values))
    assert_allclose(np.mean(ranks), 3.5, atol=1e-6)
    assert_allclose(np.mean(values), 3.25, atol=1e-6)
    if method != "diffsort":  # a sorting network is not permutation-equivariant: ties need not share a rank
        assert_allclose(ranks, 3.5, atol=1e-6)
    if method not in ("diffsort", "lapsum"):  # LapSum sorts ties into the quantiles of a Laplace mixture around them
        assert_allclose(values, 3.25, atol=1e-6)
    ratings = np.random.default_rng(8).integers(1, 6, (2, 60)).astype(float)
    r = rankops.soft_rank(ratings, method=method, softness=2.0)
    assert np.all(np.isfinite(r))
    assert float(np.mean(np.abs(r - rankdata(ratings, axis=-1)))) < 10.0


def test_nan_row_stays_in_its_row():
    x = np.random.default_rng(9).standard_normal((3, 6))
    x[1, 2] = np.nan
    for method in ("lapsum", "permutahedron", "softsort"):
        r = rankops.soft_rank(x, method=method, softness=1.0)
        assert np.all(np.isnan(r[1])) or np.isnan(r[1, 2])
        assert_allclose(r[[0, 2]], rankops.soft_rank(x[[0, 2]], method=method, softness=1.0))


def test_native_temperatures_keep_their_meaning():
    """strength is torchsort's, alpha and tau the papers', steepness diffsort's: softness changes none of them."""
    x = np.array([[0.3, -1.2, 2.5, 0.7]])
    d = (x[0][:, None] - x[0][None, :]) / 0.5
    laplace = np.where(d < 0, 0.5 * np.exp(np.minimum(d, 0)), 1 - 0.5 * np.exp(-np.maximum(d, 0)))
    assert_allclose(rankops.soft_rank(x, method="lapsum", alpha=0.5)[0], 0.5 + laplace.sum(axis=1), rtol=1e-12)
    assert_allclose(rankops.soft_sort(x, method="permutahedron", strength=1.0), [[-0.92, 0.08, 1.08, 2.08]], atol=1e-2)
    assert_allclose(rankops.softsort(x[0], tau=0.5), ref.softsort(x[0], 0.5), rtol=1e-12)


def test_a_temperature_of_none_is_not_given():
    """``tau=None`` (the matrices' signature default) means not given: the methods' default softness, the matrices'
    native ``tau=1.0`` / ``steepness=10.0``."""
    x = np.random.default_rng(10).standard_normal((2, 7))
    for method, name in (("lapsum", "alpha"), ("softsort", "tau"), ("permutahedron", "strength"), ("diffsort", "steepness")):
        assert_allclose(rankops.soft_rank(x, method=method, **{name: None}), rankops.soft_rank(x, method=method, softness=1.0))
    assert_allclose(rankops.softsort(x, tau=None), ref.softsort(x, 1.0), rtol=1e-12)
    assert_allclose(rankops.diffsort(x, steepness=None), rankops.diffsort(x, steepness=10.0))


# (method options, the rank's tolerance): the pairwise methods' ranks read each entry against all others, steeper
_OFF_ZERO = {"permutahedron": ({"method": "permutahedron"}, 1e-3),
             "kl": ({"method": "permutahedron", "regularization": "kl"}, 1e-3),
             "lp": ({"method": "permutahedron", "regularization": "lp", "p": 4.0 / 3.0}, 1e-3),
             "lapsum": ({"method": "lapsum"}, 1e-3), "softsort": ({"method": "softsort"}, 0.02),
             "neuralsort": ({"method": "neuralsort"}, 0.02), "diffsort": ({"method": "diffsort"}, 0.02)}


@pytest.mark.parametrize(("options", "rank_tol"), list(_OFF_ZERO.values()), ids=list(_OFF_ZERO))
def test_float32_rows_far_from_zero_are_shifted_before_they_are_scaled(options, rank_tol):
    """Rows of 1000 plus normal noise in float32, at the default softness: the rule gets ``(x - c) / t``, ``c`` the
    row's midrange (``_numerics.exact_centre``: only where ``|c|`` is at least the row's range, so that ``x - c`` is
    exact), where ``x / t`` rounded by a unit in x's last place (every output here is invariant under the shift, the
    sorts equivariant). Against float64 on the same float32 values, before the shift: ranks 0.0046-0.013 off (the
    permutahedron, LapSum), 0.2-0.79 (SoftSort, NeuralSort, diffsort); sorts up to 3 ulps; masks 6e-5-0.0025. The
    p-norm sort moves with x (its regularizer is not shift-invariant) and is not shifted. A row with an outlier is
    not shifted either: shifting by its end, ``x - (-1e30)``, tied the dense part (LapSum ranks 4.5 each)."""
    x = (1000.0 + np.random.default_rng(0).standard_normal((4, 200))).astype(np.float32)
    wide = x.astype(np.float64)
    assert_allclose(rankops.soft_rank(x, **options), rankops.soft_rank(wide, **options), rtol=0, atol=rank_tol)
    if options.get("regularization") != "lp":
        assert_allclose(rankops.soft_sort(x, **options), rankops.soft_sort(wide, **options), rtol=0, atol=6.2e-5)
    if options["method"] in ("permutahedron", "lapsum"):
        assert_allclose(rankops.soft_topk_mask(x, 20.0, **options), rankops.soft_topk_mask(wide, 20.0, **options), rtol=0, atol=2e-5)
        for outlier in (-1e30, 1e30):  # the dense part's ranks stay apart (these methods' ranks are monotone)
            ranks = rankops.soft_rank(np.array([outlier, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0], dtype=np.float32), **options)
            assert np.all(np.diff(ranks[1:]) > 0.1), ranks
