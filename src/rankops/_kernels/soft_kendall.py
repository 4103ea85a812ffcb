r"""A smooth Kendall tau-a, streamed over blocks of rows, and SUQUAN's increasing targets.

``T(x, y) = sum_{i<j} s(x_i - x_j) s(y_i - y_j) / P`` with ``s(d) = tanh(d / tau)``
and ``P = p (p - 1) / 2``: Kendall's tau-a with each sign of a pair difference
smoothed, so ``T -> tau_a`` as ``tau -> 0``. The sum runs over all ordered
pairs (``T = sum_{i,j} ... / 2P``, the summand being symmetric), one block of
rows ``i`` at a time, and the backward pass is written by hand,

    dT/dx_k = sum_j s'(x_k - x_j) s(y_k - y_j) / P,    s'(d) = (1 - s(d)^2) / tau,

(and the mirror for ``y``), block by block too, accumulated column-wise
(by symmetry) into the carry: nothing p x p is ever held, and blocks of
about 1 MiB keep p = 10^5 in O(p) memory (O(p^2) time).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import array_api_compat

from .._lib._adapters import get_adapter
from .._lib._calls import Along, Call, core, hand_written, prepare
from .._lib._compat import namespace
from .._lib._options import Options, option
from .._lib._validation import positive_scalar, python_number

__all__ = ["bind_soft_kendall_tau", "suquan_targets"]


@dataclasses.dataclass(frozen=True)
class SoftKendallOptions(Options):
    """Options of ``soft_kendall_tau``."""

    tau: float = option(0.1, python_number(positive_scalar))


_TEMPORARY_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class _SoftTau:
    tau: float

    def _signs(self, xp: Any, rows: Any, full: Any) -> Any:
        a, b = rows[..., :, None], full[..., None, :]
        # equal entries are a tie, infinities included (inf - inf would be NaN): 0 - 0
        tie = a == b
        zero = xp.zeros((), dtype=rows.dtype, device=array_api_compat.device(rows))
        return xp.tanh((xp.where(tie, zero, a) - xp.where(tie, zero, b)) / self.tau)

    def _block(self, xp: Any, x: Any) -> int:
        # (block, p) temporaries of about 1 MiB stay in cache: 4x faster than 36 MiB ones at p = 10^4
        # (fresh mmap pages fault in on every pass); nothing small outlives a block (see bwd)
        row_bytes = max(1, math.prod(x.shape[:-1])) * x.shape[-1] * (xp.finfo(x.dtype).bits // 8)
        return min(x.shape[-1], max(1, _TEMPORARY_BYTES // row_bytes))

    def fwd(self, xp: Any, x: Any, y: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        p = x.shape[-1]

        def body(total: Any, blk: tuple[Any, ...]) -> Any:
            sx, sy = self._signs(xp, blk[0], x), self._signs(xp, blk[1], y)
            return total + xp.sum(xp.sum(sx * sy, axis=-1), axis=-1), ()

        zero = xp.zeros(x.shape[:-1], dtype=x.dtype, device=array_api_compat.device(x))
        total, _ = get_adapter(xp).scan_blocks(xp, body, zero, (x, y), self._block(xp, x))
        return (total / max(p * (p - 1), 1),), (x, y)  # p = 1: no pairs, 0

    def bwd(self, xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, Any]:
        (ct,) = cts
        x, y = res
        if ct is None:
            return None, None
        p = x.shape[-1]

        # By symmetry (s' even, s odd) a block of rows i adds -sum_i s'(x_i - x_k) s(y_i - y_k) to every
        # column k: the gradients accumulate in the carry, with no per-block outputs kept alive
        # (thousands of small ones would fragment the heap between the block temporaries).
        def body(carry: Any, blk: tuple[Any, ...]) -> Any:
            sx, sy = self._signs(xp, blk[0], x), self._signs(xp, blk[1], y)
            gx, gy = carry
            return (gx - xp.sum((1 - sx * sx) * sy, axis=-2), gy - xp.sum((1 - sy * sy) * sx, axis=-2)), ()

        zeros = xp.zeros_like(x)
        (gx, gy), _ = get_adapter(xp).scan_blocks(xp, body, (zeros, zeros), (x, y), self._block(xp, x))
        scale = xp.astype(ct, x.dtype)[..., None] * (2.0 / (self.tau * max(p * (p - 1), 1)))
        return gx * scale, gy * scale


def _scalar_tails(shape: tuple[int, ...], opts: Any, params: Any) -> dict[str, Any]:
    return {"value": ()}


@core(tails=_scalar_tails, batched={"y": (0,)})
def soft_kendall_core(xp: Any, x: Any, opts: SoftKendallOptions, *, y: Any) -> Any:
    """The smooth tau-a of matching rows of ``x`` and ``y`` and its streamed backward pass."""
    spec = _SoftTau(opts.tau)
    return hand_written(xp, spec.fwd, spec.bwd, (x, y), ("x", "y"))


def bind_soft_kendall_tau(x: Any, y: Any, axis: Any, tau: float) -> Call:
    """``rankops.soft_kendall_tau``: ``x`` and ``y`` broadcast to one shape, entries along ``axis`` (or a tuple of axes)."""
    xp = namespace(x, y, names=("x", "y"))
    if tuple(x.shape) != tuple(y.shape):
        try:
            x, y = xp.broadcast_arrays(x, y)
        except ValueError as err:  # the message names both shapes
            raise ValueError(f"x {tuple(x.shape)} and y {tuple(y.shape)} must have broadcastable shapes") from err
    opts, _ = SoftKendallOptions.parse({"tau": tau}, "soft_kendall_tau")
    p = prepare(x, axis=axis, opts=opts, arrays={"y": y})
    y = p.arrange(xp.astype(y, p.x.dtype) if y.dtype != p.x.dtype else y)  # laid out as x (several axes: merged alike)
    return Call(soft_kendall_core, p, opts, {"y": y}, readout=Along(axis_kept=False), along=("y",))


def suquan_targets(h: Any, /, *, low: float = 0.0, high: float = 1.0) -> Any:
    r"""An increasing quantile function from free parameters: ``low + (high - low) cumsum(softmax(h))``.

    The parameterisation of Cuturi, Teboul & Vert (2019, Sec. 4, after Le
    Morvan & Vert 2017's SUQUAN): ``f = cumsum(e^h / sum e^h)`` is strictly
    increasing from ``low`` (excluded) to ``high`` (the last value) for any
    real ``h``, so a model can learn the target quantile function of
    :func:`rankops.soft_quantile_normalize` by gradient descent on ``h``
    (softmax ignores a shift of ``h``: the paper fixes it by ``sum h = 0``).

    Parameters
    ----------
    h : array
        Shape ``(..., m)``, real floating; differentiable under the caller's
        autodiff (plain array operations).
    low, high : float
        The range of the targets (``low < high``).

    Returns
    -------
    array
        Shape ``(..., m)``: increasing along the last axis, ending at ``high``.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> rankops.suquan_targets(np.zeros(4))
    array([0.25, 0.5 , 0.75, 1.  ])
    """
    xp = namespace(h, names=("h",))
    if h.ndim < 1 or not xp.isdtype(h.dtype, "real floating"):
        raise TypeError(f"h must be a real floating array with at least one axis, got dtype {h.dtype} and shape {tuple(h.shape)}")
    if not (isinstance(low, (int, float)) and isinstance(high, (int, float)) and math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"low and high must be finite Python numbers with low < high, got {low!r} and {high!r}")
    w = get_adapter(xp).softmax(xp, h, axis=-1)
    return low + (high - low) * xp.cumulative_sum(w, axis=-1)
