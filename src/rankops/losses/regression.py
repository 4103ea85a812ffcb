"""Regression losses through quantiles: the soft quantile of the residuals and the pinball baseline."""

from __future__ import annotations

import math
from typing import Any

from .._lib._compat import Array
from ..sorting import soft_sort
from ..transport import soft_quantile
from .._lib._adapters import get_adapter
from .._lib._docs import fill_doc
from .._lib._numerics import safe_divide
from ._common import MASK, per_row_returns, _level, in_float32, without_nan, row_mask, rows, with_mask

__all__ = ["quantile_loss", "pinball_loss"]


@in_float32
@fill_doc(returns=per_row_returns("``pred``'s"), mask=MASK)
def quantile_loss(pred: Array, target: Array, q: float, /, *, mask: Array | None = None, axis: int = -1, method: str = "sinkhorn",
                  **options: Any) -> Array:
    r"""The soft q-quantile of the absolute residuals ``|target - pred|`` along ``axis``: a robust regression objective.

    001 Sec. 4 (Cuturi, Teboul & Vert 2019) trains regressors by minimising
    an S-quantile of the residuals directly instead of a sum of pinball
    losses. Minimising the q-quantile of ``|r|`` is least-quantile regression
    (Rousseeuw 1984; ``q = 0.5``: least median of deviations): the fit ignores
    the ``1 - q`` fraction of largest residuals, so outliers in the targets
    do not pull it. ``method="sinkhorn"`` is the paper's S-quantile
    (:func:`rankops.soft_quantile`, its options); any other method of
    :func:`rankops.soft_sort` interpolates its soft sort linearly at position
    ``q (n - 1)``, which equals ``numpy.quantile(|r|, q)`` in the hard limit.
    Their temperatures are in the units of the residuals, and they smooth the
    widest gaps last only up to a point: a ``strength`` or ``alpha`` large
    against the gap between the inliers and the outliers pools them, and the
    soft quantile moves towards the outliers (permutahedron at the default
    strength 1 is the exact order statistic for residuals of a few units).

    Parameters
    ----------
    pred, target : array
        Same shape; the residuals' axis is ``axis``, every other axis a batch
        axis. Differentiable in both.
    q : float
        Level in [0, 1].
    %(mask)s
    axis : int, default -1
    method : str, default "sinkhorn"

    %(returns)s
    >>> pred, target = np.zeros(5), np.array([0.1, -0.2, 0.3, 5.0, -0.4])
    >>> round(float(rankops.losses.quantile_loss(pred, target, 0.5, method="permutahedron", strength=1e-3)), 6)
    0.3
    """
    xp, axis, (p, t) = rows("losses.quantile_loss", axis, {"pred": pred, "target": target}, also=with_mask(mask))
    q = _level(q)
    m = row_mask(xp, mask, pred, axis)
    # a non-finite target makes the row's residuals' scale infinite, as a non-finite prediction does: NaN, gradient 0
    t, bad = without_nan(xp, t, m, finite=True)
    out = _residual_quantile(xp, xp.abs(t - p), q, m, method, options)
    if isinstance(out, tuple):  # (value, SinkhornInfo), return_info=True: such a row's problem is not reported solved
        value, info = out
        return xp.where(bad, math.nan, value), info._replace(converged=info.converged & ~bad,
                                                              error=xp.where(bad, math.nan, info.error))
    return xp.where(bad, math.nan, out)


def _residual_quantile(xp: Any, r: Any, q: float, m: Any, method: str, options: dict[str, Any]) -> Any:
    """The soft quantile at level ``q`` of each row's residuals ``r`` (``m``: a mask, or None) by ``method``."""
    if method == "sinkhorn":
        return soft_quantile(r, q, mask=m, **options)
    srt = soft_sort(r, method=method, mask=m, **options)
    n = srt.shape[-1]
    if m is None:
        pos = q * (n - 1)
        i = min(int(pos), n - 1)
        w = pos - i
        return srt[..., i] if w == 0 else (1 - w) * srt[..., i] + w * srt[..., i + 1]
    # each row's own position q (n_v - 1) among its n_v sorted valid values (the first n_v)
    adapter = get_adapter(xp)
    count = xp.sum(xp.astype(m, srt.dtype), axis=-1, keepdims=True)
    pos = q * xp.maximum(count - 1, xp.zeros_like(count))
    lo = xp.astype(xp.floor(pos), xp.int64)
    hi = xp.minimum(lo + 1, xp.astype(xp.maximum(count - 1, xp.zeros_like(count)), xp.int64))
    w = pos - xp.floor(pos)
    value = ((1 - w) * adapter.take(xp, srt, lo) + w * adapter.take(xp, srt, hi))[..., 0]
    return xp.where(count[..., 0] > 0, value, math.nan)


@in_float32
@fill_doc(returns=per_row_returns("``pred``'s"), mask=MASK)
def pinball_loss(pred: Array, target: Array, q: float, /, *, mask: Array | None = None, axis: int = -1) -> Array:
    r"""The pinball (check) loss of quantile regression, ``mean(max(q r, (q - 1) r))``, ``r = target - pred``.

    Koenker & Bassett (1978): its minimiser over constants is the q-quantile
    of the targets. The exact baseline that 001 Sec. 4 compares
    :func:`quantile_loss` against; no relaxation.

    Parameters
    ----------
    pred, target : array
        Same shape; the mean is taken along ``axis``.
    q : float
        Level in [0, 1].
    %(mask)s
    axis : int, default -1

    %(returns)s
    >>> float(rankops.losses.pinball_loss(np.zeros(2), np.array([1.0, -1.0]), 0.9))   # (0.9 + 0.1) / 2
    0.5
    """
    xp, axis, (p, t) = rows("losses.pinball_loss", axis, {"pred": pred, "target": target}, also=with_mask(mask))
    q = _level(q)
    m = row_mask(xp, mask, pred, axis)
    t, bad = without_nan(xp, t, m)  # a NaN target: a NaN loss with gradient 0 (an infinite one: inf, exactly)
    r = t - p
    check = xp.maximum(q * r, (q - 1) * r)
    if m is None:
        return xp.where(bad, math.nan, xp.mean(check, axis=-1))
    count = xp.sum(xp.astype(m, check.dtype), axis=-1)
    total = xp.sum(xp.where(m, check, xp.zeros_like(check)), axis=-1)
    return xp.where(bad, math.nan, safe_divide(xp, total, count, math.nan))
