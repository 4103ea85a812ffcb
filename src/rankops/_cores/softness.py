r"""Softness: one scale-free knob for every method, read as a length in each row's own units.

``softness=s`` asks for a soft rank whose mean distance from the hard one,
``mean_i |soft_rank(x)_i - rankdata(x)_i|``, is about ``s`` ranks on a row of
distinct values, whatever the row's scale, shift and length n. Every method
but Sinkhorn sees its input only through ``x / t`` for a length ``t`` (its
temperature or an inverse of it: LapSum's ``alpha``, the permutahedron's
rank ``strength``, SoftSort's ``tau ** (1 / power)``, NeuralSort's ``tau``, a
sorting network's ``1 / steepness``); softness sets, per row,

    t = scale(x) * T_method(s, n)

(:func:`row_scale`: the width of the row's densest window) and runs the
method at unit temperature on ``x / t``. Ranks, CDFs and masks are then
exactly invariant under ``x -> a x + b`` (``a > 0``), and sorted values
(``t * sort(x / t)``) exactly equivariant, but for the p-norm permutahedron's
sort (its regularizer ``|mu|^p`` is not shift-invariant, only homogeneous). ``T_method`` is measured, not
derived: ``python -m benchmarks.softness --calibrate`` finds, on rows of
standard normal entries, the unit-temperature length whose rank blur is
``s``, for a grid of ``(s, n)``, and :mod:`._calibration` holds that table,
read by bilinear interpolation in ``(log s, log n)`` (the grid spans s from
0.1 to 3e4 and n from 10 to 1e5; its edge cells extend it to smaller s,
longer rows and rows down to two entries). Sinkhorn squashes its
rows already (the sigmoid of the standardized row); softness sets its
``epsilon`` from the same kind of table.

The scale carries no gradient: the gradient is the method's own at the
row's temperature (a window's width has a derivative on its two end entries
only, a spike that says nothing about the ranks; docs/softness.md). A
learnable softness gets its exact gradient. With a ``mask`` the scale and n
are those of the row's valid entries.
"""

from __future__ import annotations

import dataclasses
import fractions
import functools
import math
from typing import Any, Callable

from .._lib._adapters import get_adapter
from .._lib._compat import index_dtype, is_array, device as _device
from .._lib._numerics import exact_centre
from . import _calibration, _calibration_sorts
from .masked import kth_largest, row_k, valid_first

# every calibration by key: the ranks' (and Sinkhorn's) tables, then the soft sorts' (one grid)
GRID = _calibration.GRID
LENGTHS = {**_calibration.LENGTHS, **_calibration_sorts.LENGTHS}

__all__ = ["softened", "length", "sinkhorn_epsilon", "row_scale", "reads_deviation", "calibrated", "lowest_calibrated_p", "output_is_sort"]


# the p-norm permutahedron's keys (its ranks', its sorts'): the conjugate exponent q = p / (p - 1) follows the prefix;
# q = 2 reads "l2"'s table
_LP_FAMILIES = {"permutahedron-lp-": "permutahedron-l2", "permutahedron-sort-lp-": "permutahedron-sort-l2"}


# each family's measured tables by q
_LP_TABLES = {
    prefix: {2.0: LENGTHS[l2], **{float(k[len(prefix):]): v for k, v in LENGTHS.items() if k.startswith(prefix)}}
    for prefix, l2 in _LP_FAMILIES.items() if l2 in LENGTHS
}


def _lp_tables(key: str) -> dict[float, Any] | None:
    """The measured tables by q of the p-norm family ``key`` belongs to (None: it belongs to none)."""
    return next((tables for prefix, tables in _LP_TABLES.items() if key.startswith(prefix)), None)


def _exponent(key: str) -> float:
    return float(key.rsplit("-", 1)[1])


def calibrated(key: str) -> bool:
    """Whether softness has a calibration for ``key`` (a method and the options that change its blur)."""
    tables = _lp_tables(key)
    return key in LENGTHS or (tables is not None and _exponent(key) <= max(tables))


def lowest_calibrated_p(key: str) -> str:
    """The smallest p whose softness the p-norm family of ``key`` calibrates (its largest measured q, ``q / (q - 1)``),
    as a fraction: ``"6/5"``."""
    tables = _lp_tables(key)
    assert tables is not None  # a p-norm key
    return str(fractions.Fraction(max(tables) / (max(tables) - 1.0)).limit_denominator(100))


def _tables(key: str) -> tuple[tuple[tuple[tuple[float, ...], ...], float], ...]:
    """``key``'s tables and their weights in ``log T``: its own, weight 1; a p-norm key between two measured q, those
    two, weighted linearly in ``1 / (q - 1)`` (``p - 1``: the blur changes smoothly with the regularizer's exponent).
    The interpolation is linear in the table, so blending the two readings is blending the tables."""
    if key in LENGTHS:
        return ((LENGTHS[key], 1.0),)
    tables, q = _lp_tables(key), _exponent(key)
    assert tables is not None  # calibrated(key)
    low = max(k for k in tables if k <= q)
    high = min(k for k in tables if k >= q)
    if high == low:
        return ((tables[low], 1.0),)
    f = (1.0 / (low - 1.0) - 1.0 / (q - 1.0)) / (1.0 / (low - 1.0) - 1.0 / (high - 1.0))
    return (tables[low], 1.0 - f), (tables[high], f)


# rows shorter than the grid's (10) read its first cell extended linearly, down to two entries (one has no blur)
_SHORTEST = math.log(2.0)


def _interpolated(table: tuple[tuple[float, ...], ...], u: float, w: float) -> float:
    """The table's bilinear interpolation at ``u = log s``, ``w = log n``, extended linearly by its edge cells to smaller
    s, longer rows and rows of 2 to 9 entries (held at the grid's largest s, where every method has pooled its row)."""
    u0, du, nu, w0, dw, nw = GRID
    a, b = min((u - u0) / du, nu - 1.0), (max(w, _SHORTEST) - w0) / dw
    i, j = min(max(math.floor(a), 0), nu - 2), min(max(math.floor(b), 0), nw - 2)
    fa, fb = a - i, b - j
    lo = table[i][j] + fb * (table[i][j + 1] - table[i][j])
    hi = table[i + 1][j] + fb * (table[i + 1][j + 1] - table[i + 1][j])
    return lo + fa * (hi - lo)


def _weights(xp: Any, v: Any, start: float, step: float, count: int, slope: bool = False) -> Any:
    """The linear interpolation weights of ``v`` on the knots ``start + step * arange(count)`` (the edge cell beyond
    them), shape ``v.shape + (count,)``; ``slope``: their derivative in ``v``."""
    a = (v - start) / step
    cell = xp.clip(xp.floor(a), 0.0, count - 2.0)
    frac = a - cell
    knots = xp.arange(count, dtype=v.dtype, device=_device(v))
    low, high = knots == cell[..., None], knots == cell[..., None] + 1.0
    zero = xp.zeros_like(low, dtype=v.dtype)
    if slope:
        return (xp.where(high, zero + 1.0, zero) - xp.where(low, zero + 1.0, zero)) / step
    return xp.where(low, 1.0 - frac[..., None], zero) + xp.where(high, frac[..., None], zero)


def _interpolated_array(xp: Any, table: tuple[tuple[float, ...], ...], u: Any, w: Any, slope: bool = False) -> Any:
    """:func:`_interpolated` with ``u`` and ``w`` arrays (broadcast together); ``slope``: its derivative in ``u``."""
    u0, du, nu, w0, dw, nw = GRID
    values = xp.asarray(table, dtype=u.dtype, device=_device(u))
    clip = get_adapter(xp).clip
    u, w = clip(xp, u, None, u0 + du * (nu - 1)), clip(xp, w, _SHORTEST)
    wu, ww = _weights(xp, u, u0, du, nu, slope), _weights(xp, w, w0, dw, nw)
    return xp.sum(xp.matmul(wu[..., None, :], values)[..., 0, :] * ww, axis=-1)


def length(xp: Any, key: str, s: Any, n: Any) -> Any:
    """``T_key(s, n)``: the unit-temperature length (in units of the row's scale) whose rank blur is ``s``.

    Python numbers give a Python float (a constant to compilers); an array
    ``s`` (learnable) or ``n`` (a mask's per-row counts) give an array.
    """
    if not is_array(s) and not is_array(n):
        return math.exp(sum(f * _interpolated(table, math.log(s), math.log(n)) for table, f in _tables(key)))
    logs = _logs(xp, s, n)
    out = xp.exp(sum(f * _interpolated_array(xp, table, *logs) for table, f in _tables(key)))
    return out if is_array(out) else xp.asarray(out)  # NumPy's 0-d results are scalars


def length_slope(xp: Any, key: str, s: Any, n: Any) -> Any:
    """``d log T / d log s`` at ``(s, n)`` (``s`` an array): the pullback of a learnable softness on backends without autodiff."""
    logs = _logs(xp, s, n)
    return sum(f * _interpolated_array(xp, table, *logs, slope=True) for table, f in _tables(key))


def _logs(xp: Any, s: Any, n: Any) -> tuple[Any, Any]:
    """``(log s, log n)`` as arrays of the dtype and device of whichever of ``s`` and ``n`` is one."""
    like = s if is_array(s) else n
    return tuple(xp.log(v) if is_array(v) else xp.asarray(math.log(v), dtype=like.dtype, device=_device(like))
                 for v in (s, n))


def sinkhorn_epsilon(xp: Any, s: Any, n: int) -> Any:
    """Sinkhorn's ``epsilon`` (on the squashed row) whose rank blur is ``s`` on a row of length ``n``."""
    return length(xp, "sinkhorn", s, n)


def window(n: int) -> int:
    """The gaps a scale window spans: a tenth of the row, at least 3 (n - 1 on a shorter row)."""
    return min(n - 1, max(3, round(n / 10)))


def row_scale(xp: Any, srt: Any, count: Any, deviation: bool = False) -> Any:
    """Each row's scale (keepdims) from its sorted entries ``srt``: the width of the densest window, 1 on a constant row.

    The width of the narrowest window of ``k`` + 1 consecutive sorted entries
    (:func:`window`), scaled by ``1 / (2 Phi^-1(1/2 + k / (2 n)))`` so that
    it is about the standard deviation on a normal row: the inverse of the
    row's peak density, which is what sets the blur of a method that pools
    neighbours (the permutahedron most of all: its densest stretch pools
    first). ``deviation``: the row's standard deviation instead, for the
    permutahedron's soft sort (:func:`reads_deviation`). A row whose window
    holds ties only (many repeated values) takes a quarter of its range
    instead, and a constant row 1: its ties are kept, never NaN. ``count``:
    n (a Python int), or each row's valid count (an array of the dtype,
    keepdims, at least 1) when the valid entries come first
    (:func:`.masked.valid_first`: the tail repeats the last valid value).
    """
    spread = srt[..., -1:] - srt[..., :1]  # the range; 0 on a constant row, read as 1
    fallback = spread * 0.25 + xp.astype(spread <= 0.0, spread.dtype)
    width = _deviation(xp, srt, count) if deviation else _narrowest(xp, srt, count)
    return xp.where(width > 0.0, width, fallback)


def _narrowest(xp: Any, srt: Any, count: Any) -> Any:
    """The width of each row's narrowest window of :func:`window` + 1 sorted entries, in standard deviations of a
    normal row (0 where it holds ties only, or a masked row has one valid entry)."""
    n = srt.shape[-1]
    if not is_array(count):
        k: Any = window(n)
        widths = srt[..., k:] - srt[..., :-k] if k >= 1 else xp.zeros_like(srt[..., :1])
        factor: Any = _normal_width(k, n)
    else:
        k = xp.minimum(xp.clip(xp.round(count / 10.0), 3.0, None), count - 1.0)
        idx = index_dtype(xp, _device(srt))
        ahead = xp.arange(n, dtype=idx, device=_device(srt)) + xp.astype(k, idx)
        adapter = get_adapter(xp)
        upper = adapter.take(xp, srt, adapter.clip(xp, ahead, 0, n - 1))
        widths = xp.where(ahead < xp.astype(count, idx), upper - srt, xp.full_like(srt, math.inf))
        factor = _normal_width_array(xp, k, count)
    narrowest = xp.min(widths, axis=-1, keepdims=True)
    if is_array(count):  # a masked row of one valid entry has no window (inf)
        narrowest = xp.where(narrowest < math.inf, narrowest, xp.zeros_like(narrowest))
    return narrowest * factor


def _deviation(xp: Any, srt: Any, count: Any) -> Any:
    """Each row's standard deviation (of its valid entries: the first ``count``)."""
    if not is_array(count):
        if 0 in srt.shape:  # an empty batch: torch's std warns of its degrees of freedom (input / output numel, 0 / 0)
            return xp.zeros(srt.shape[:-1] + (1,), dtype=srt.dtype, device=_device(srt))
        return xp.std(srt, axis=-1, keepdims=True)
    valid = xp.arange(srt.shape[-1], dtype=srt.dtype, device=_device(srt)) < count
    zero = xp.zeros_like(srt)
    centred = xp.where(valid, srt - xp.sum(xp.where(valid, srt, zero), axis=-1, keepdims=True) / count, zero)
    return xp.sqrt(xp.sum(centred * centred, axis=-1, keepdims=True) / count)


def reads_deviation(key: str) -> bool:
    """Whether calibration ``key`` reads a row's scale as its standard deviation (:func:`row_scale`): the
    permutahedron's soft sort, whose blur is set by where a row's gaps are largest, not smallest as a rank's. No
    window's width follows that across distributions; the deviation errs least (docs/softness.md, "Sorts")."""
    return key.startswith("permutahedron-sort-")


def _normal_width(k: int, n: int) -> float:
    """``1 / (2 Phi^-1(1/2 + k / (2 n)))``: about the standard deviation over the width of k of n gaps at a normal's centre."""
    if k < 1:
        return 1.0
    p = min(max(k / n, 1e-6), 0.999)
    return 1.0 / (2.0 * math.sqrt(2.0) * _erfinv(math, p))


def _normal_width_array(xp: Any, k: Any, count: Any) -> Any:
    """:func:`_normal_width` per row (the masked rows' k and n_v), by the same formula."""
    return 1.0 / (2.0 * math.sqrt(2.0) * _erfinv(xp, xp.clip(k / count, 1e-6, 0.999)))


def _erfinv(xp: Any, p: Any) -> Any:
    """Winitzki's approximation of erfinv on (0, 1) (relative error below 2e-3: a scale needs no more); ``xp`` may be ``math``."""
    a = 0.147
    ln = xp.log(1.0 - p * p)
    t = 2.0 / (math.pi * a) + ln / 2.0
    return xp.sqrt(xp.sqrt(t * t - ln / a) - t)


def output_is_sort(opts: Any, params: dict[str, Any]) -> bool:
    """``in_units`` of :func:`softened` for a core whose ``output`` parameter picks a rank or a sort."""
    return bool(params["output"] == "sort")


def softened(
    key: Callable[[Any, dict[str, Any]], str],
    in_units: Callable[[Any, dict[str, Any]], bool],
    presort: Callable[[Any, dict[str, Any]], int] | None = None,
    shifts: Callable[[Any, dict[str, Any]], bool] = lambda opts, params: True,
    top: Callable[[dict[str, Any]], Any] | None = None,
) -> Callable[..., Any]:
    """Decorator of a core rule whose method sees ``x / t`` only (the module docstring): ``opts.softness`` sets ``t`` per row.

    ``key(opts, params)`` names the calibration; ``in_units(opts, params)``:
    the first output is in x's units (a sort: ``t * value(x / t)``, its
    positions the sorted order's), else laid out like x (ranks, masks) or
    unitless (matrices). The rule runs at temperature 1 (the option
    ``opts.temperature()``) on ``x / t``.

    The scale needs the row sorted. A method that sorts the row itself
    (LapSum, the permutahedron) names its order in ``presort``: +1 when it
    sorts ``x`` ascending, -1 when ``-x`` (stably, the masked entries last).
    The row is then sorted once, here, and the rule gets that order as its
    ``order`` parameter instead of sorting again (``x / t`` has the order of
    ``x``). The others (matrices and sorting networks) get no order.

    ``shifts(opts, params)``: whether the output is invariant under ``x ->
    x + b`` (a sort's equivariant). The rule then gets ``(x - c) / t`` (``c``
    added back to a sort), ``c`` the row's
    :func:`.._lib._numerics.exact_centre`: exact where ``x / t`` of a row
    far from 0 rounds by a unit in x's last place, much against ``t``.

    ``top(params)``: for an output that turns at one place of the row, the
    count ``k`` (a number, or an array per row) from its largest entry (a
    top-k mask's): the row is centred on its ``ceil(k)``-th largest valid
    entry instead (``presort`` given), where the entries that blend lie, so
    that they keep their differences to a unit in their own last place
    through the division by ``t`` (a float32 top-k mask of 10^5 normal
    entries was 6e-4 off with the midrange of a row about 0, which is 0).

    ``t`` carries no gradient to ``x`` (``stop_gradient``; docs/softness.md
    says why), a learnable softness gets its own. Backends with autodiff
    differentiate the rest themselves, and the pullback (``rankops.vjp``
    elsewhere) chains it by hand. Below :func:`.masked.zeros_masked_input`, so that
    masked entries are 0 here.
    """

    def wrap(rule: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(rule)
        def run(xp: Any, x: Any, opts: Any, **params: Any) -> Any:
            s = opts.softness
            if s is None:
                return rule(xp, x, opts, **params)
            adapter = get_adapter(xp)
            which, units = key(opts, params), in_units(opts, params)
            sign = None if presort is None else presort(opts, params)
            mask = params.get("mask")
            # the scale carries no gradient: sort a stopped copy (no graph for the backend to keep)
            keyed = adapter.stop_gradient(xp, x if sign is None or sign > 0 else -x)
            if mask is None:
                srt, order = adapter.sort_order(xp, keyed)
                count: Any = x.shape[-1]
            else:
                row = valid_first(xp, adapter, keyed, mask)
                srt, order = row.s, row.order
                count = xp.clip(xp.astype(row.count, x.dtype), 1.0, None)
            soft = xp.astype(s, x.dtype) if is_array(s) else s
            unit = length(xp, which, soft, count)
            scale = row_scale(xp, srt, count, reads_deviation(which))
            t = scale * unit
            inner_opts = dataclasses.replace(opts, softness=None, **{opts.temperature(): 1.0})
            # the centre carries no gradient (``srt`` is a stopped copy), which for an output invariant under the
            # shift is its exact derivative (a float32 top-k mask of 1000 + normal noise: 0.011 off unshifted, 6e-5)
            if top is not None and sign is not None:
                k = top(params)
                k, _ = row_k(xp, srt, (k,) if is_array(k) else (), k, count)  # a k outside (0, count]: the largest
                centre = kth_largest(xp, adapter, srt, k, count, descending=sign < 0)
            else:
                centre = exact_centre(xp, srt[..., :1], srt[..., -1:]) if shifts(opts, params) else 0.0
            centre = -centre if is_array(centre) and sign is not None and sign < 0 else centre  # srt sorts -x
            z = (x - centre) / t if mask is None else xp.where(mask, (x - centre) / t, 0.0)
            outs, back = rule(xp, z, inner_opts, **params, **({} if sign is None else {"order": order}))
            if units and mask is not None and is_array(centre):  # a sort's trailing places (past the valid entries) stay 0
                centre = xp.where(xp.arange(x.shape[-1], dtype=x.dtype, device=_device(x)) < count, centre, 0.0)
            value = outs[0] * t + centre if units else outs[0]

            def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
                ct = cts[0]
                inner = back((ct if ct is None or not units else ct * t, *cts[1:]))
                inner.pop("order", None)
                dz = inner["x"]
                grads = {**inner, "x": dz / t}
                if is_array(s):
                    # t = scale T(s): dL/dt per row, then dT/ds = T dlogT/dlogs / s
                    dt = -xp.sum(dz * z, axis=-1, keepdims=True) / t
                    if units and ct is not None:
                        dt = dt + xp.sum(ct * outs[0], axis=-1, keepdims=True)
                    grads["softness"] = xp.sum(dt * scale * unit * length_slope(xp, which, soft, count) / soft)
                return grads

            return (value, *outs[1:]), pullback

        return run

    return wrap
