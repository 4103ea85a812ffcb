"""Rank correlations as losses: Spearman through soft ranks, Kendall through smooth pair signs."""

from __future__ import annotations

import math
from typing import Any

from .._lib._compat import Array
from ..kernels import soft_kendall_tau
from ..sorting import soft_rank
from .._lib._docs import fill_doc
from ._common import MASK, RANK_METHOD, per_row_returns, DEFAULT_METHOD, _pearson, in_float32, without_nan, rankdata, row_mask, rows, with_mask

__all__ = ["spearman_loss", "soft_spearman", "kendall_loss"]


@in_float32
@fill_doc(returns=per_row_returns("``pred``'s"), rank_method=RANK_METHOD, mask=MASK)
def spearman_loss(pred: Array, target: Array, /, *, mask: Array | None = None, axis: int = -1, method: str = DEFAULT_METHOD, **options: Any) -> Array:
    r"""``1 - corr(soft_rank(pred), rankdata(target))``: a differentiable Spearman loss per row.

    ``corr`` is Pearson's correlation along ``axis``; ``rankdata(target)``
    ranks the targets with ties averaged, like ``scipy.stats.rankdata``, and
    carries no gradient (targets are data). As the relaxation tends to the
    hard ranks (``strength``, ``alpha``, ``tau``, ``epsilon`` -> 0) the loss
    tends to ``1 - scipy.stats.spearmanr(pred, target)``. Values in [0, 2];
    a row whose targets (or soft ranks) are all equal has no correlation:
    NaN, as in SciPy.

    Parameters
    ----------
    pred : array
        Predictions; every axis but ``axis`` is a batch axis. Differentiable.
    target : array
        Same shape, namespace and device; any real dtype.
    %(mask)s
    axis : int, default -1
        The axis along which the rows are ranked.
    %(rank_method)s

    %(returns)s
    >>> pred, target = np.array([0.1, 0.4, 0.35, 0.8]), np.array([1.0, 2.0, 3.0, 4.0])
    >>> round(float(rankops.losses.spearman_loss(pred, target, strength=1e-3)), 6)   # 1 - spearmanr = 1 - 0.8
    0.2
    """
    xp, axis, (p, t) = rows("losses.spearman_loss", axis, {"pred": pred, "target": target}, also=with_mask(mask))
    m = row_mask(xp, mask, pred, axis)
    r = soft_rank(p, method=method, mask=m, **options)
    # a NaN target has no rank: the row's loss is NaN, with gradient 0 (its ranks are not formed from it)
    t, bad = without_nan(xp, xp.astype(t, r.dtype), m)
    if m is not None:  # the valid targets' ranks among themselves: the others rank above them all
        t = xp.where(m, t, xp.full_like(t, math.inf))
    return xp.where(bad, math.nan, 1 - _pearson(xp, r, rankdata(xp, t), m))


@in_float32
@fill_doc(returns=per_row_returns("``x``'s"), rank_method=RANK_METHOD, mask=MASK)
def soft_spearman(x: Array, y: Array, /, *, mask: Array | None = None, axis: int = -1, method: str = DEFAULT_METHOD, **options: Any) -> Array:
    r"""``corr(soft_rank(x), soft_rank(y))``: a soft Spearman correlation, differentiable in both arguments.

    For two learned scorings of the same items (agreement between two
    models, a rank-correlation regulariser). Pearson's correlation of the
    soft ranks along ``axis``; tends to ``scipy.stats.spearmanr(x, y)`` as
    the relaxation tends to the hard ranks. Values in [-1, 1]; NaN for a
    row whose soft ranks are all equal.

    Parameters
    ----------
    x, y : array
        Same shape, namespace and device; every axis but ``axis`` is a batch axis.
    %(mask)s
    axis : int, default -1
        The axis along which the rows are ranked.
    %(rank_method)s

    %(returns)s
    >>> x, y = np.array([0.1, 0.4, 0.35, 0.8]), np.array([1.0, 2.0, 3.0, 4.0])
    >>> round(float(rankops.losses.soft_spearman(x, y, strength=1e-3)), 6)   # scipy.stats.spearmanr
    0.8
    """
    xp, axis, (xr, yr) = rows("losses.soft_spearman", axis, {"x": x, "y": y}, also=with_mask(mask))
    m = row_mask(xp, mask, x, axis)
    # a non-finite entry of either row gives that side NaN ranks: the row's correlation is NaN, with gradient 0 (the
    # ranks set to 0 first, so that Pearson's formula multiplies no NaN into the other side's gradient)
    (a, bad_a), (b, bad_b) = (without_nan(xp, soft_rank(v, method=method, mask=m, **options), m) for v in (xr, yr))
    return xp.where(bad_a | bad_b, math.nan, _pearson(xp, a, b, m))


# tanh(_SHARP * d) rounds to exactly 1 in float64 for every rank gap d >= 1/2
_SHARP = 40.0


@in_float32
@fill_doc(returns=per_row_returns("``pred``'s"), mask=MASK)
def kendall_loss(pred: Array, target: Array, /, *, mask: Array | None = None, axis: int = -1, tau: float = 0.1) -> Array:
    r"""``1 - T(pred, target)``: the smooth Kendall tau of :func:`rankops.soft_kendall_tau` as a loss.

    ``T = sum_{i<j} tanh((pred_i - pred_j)/tau) sign(target_i - target_j) / P``,
    ``P = n (n-1)/2``: the pair signs of the predictions are smoothed, those
    of the targets are exact (targets are data and carry no gradient; tied
    targets count 0, as in Kendall's tau-a). As ``tau -> 0`` the loss tends
    to ``1 - tau_a(pred, target)``. Values in [0, 2]; O(n) memory, O(n^2) time.
    The Kendall counterpart of :func:`spearman_loss`.

    Parameters
    ----------
    pred, target : array
        Same shape, namespace and device; every axis but ``axis`` is a batch axis.
    %(mask)s
    axis : int, default -1
        The axis of the entries.
    tau : float, default 0.1
        Width of the smooth sign, in the units of ``pred``.

    %(returns)s
    >>> pred, target = np.array([0.1, 0.4, 0.35, 0.8]), np.array([1.0, 2.0, 3.0, 4.0])
    >>> round(float(rankops.losses.kendall_loss(pred, target, tau=1e-4)), 6)   # 1 - tau_a = 1 - 4/6
    0.333333
    """
    xp, axis, (p, t) = rows("losses.kendall_loss", axis, {"pred": pred, "target": target}, also=with_mask(mask))
    m = row_mask(xp, mask, pred, axis)
    t = xp.astype(t, p.dtype)
    if m is not None:  # the valid targets' ranks among themselves
        t = xp.where(m, t, xp.full_like(t, math.inf))
    # the targets' pair signs through the same smooth sign: rank gaps (>= 1/2 unless tied) scaled so that tanh is exactly +-1
    sharp = rankdata(xp, t) * (_SHARP * tau)
    return 1 - soft_kendall_tau(p, sharp, axis=-1, tau=tau, mask=m)
