r"""A smooth Kendall tau-a, streamed over blocks of rows, and SUQUAN's increasing targets.

``T(x, y) = sum_{i<j} s(x_i - x_j) s(y_i - y_j) / P`` with ``s(d) = tanh(d / tau)``
and ``P = p (p - 1) / 2``: Kendall's tau-a with each sign of a pair difference
smoothed, so ``T -> tau_a`` as ``tau -> 0``. The sum runs over all ordered
pairs (``T = sum_{i,j} ... / 2P``, the summand being symmetric), one block of
rows ``i`` at a time, and the backward pass is written by hand,

    dT/dx_k = sum_j s'(x_k - x_j) s(y_k - y_j) / P,    s'(d) = (1 - s(d)^2) / tau,

(and the mirror for ``y``), block by block too, accumulated column-wise
(by symmetry) into the carry: nothing p x p is ever held, and blocks of
about 1 MiB keep p = 10^5 in O(p) memory (O(p^2) time). With a ``mask``
the pairs are those of the row's p_v valid entries (each pair's terms
times ``m_i m_j``) and ``P = p_v (p_v - 1) / 2``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._lib._compat import device as _device
from .._lib._adapters import core, custom_backward, get_adapter, rebuilt
from .._lib._adapters._generic import CACHE_BYTES
from . import masked
from .finite import finite_rows

__all__ = ["soft_kendall_core"]


@dataclasses.dataclass(frozen=True)
class _SoftTau:
    tau: float
    masked: bool = False  # a mask is the last argument: pairs of valid entries only

    def _signs(self, xp: Any, rows: Any, full: Any) -> Any:
        a, b = rows[..., :, None], full[..., None, :]
        # equal entries are a tie, infinities included (inf - inf would be NaN): 0 - 0
        tie = a == b
        zero = xp.zeros((), dtype=rows.dtype, device=_device(rows))
        return xp.tanh((xp.where(tie, zero, a) - xp.where(tie, zero, b)) / self.tau)

    def _block(self, xp: Any, x: Any) -> int:
        # (block, p) temporaries of about CACHE_BYTES (1 MiB) stay in cache, where large ones would not
        # (fresh mmap pages fault in on every pass); nothing small outlives a block (see bwd)
        row_bytes = max(1, math.prod(x.shape[:-1])) * x.shape[-1] * (xp.finfo(x.dtype).bits // 8)
        return min(x.shape[-1], max(1, CACHE_BYTES // row_bytes))

    def _pairs(self, xp: Any, x: Any, w: Any) -> Any:
        """``P`` twice over, the ordered pairs: ``p (p - 1)``, or per row ``p_v (p_v - 1)`` (at least 1: no pairs, 0)."""
        if w is None:
            return max(x.shape[-1] * (x.shape[-1] - 1), 1)
        count = xp.sum(w, axis=-1)
        return xp.maximum(count * (count - 1), xp.ones_like(count))

    def _weights(self, xp: Any, x: Any, rest: tuple[Any, ...]) -> tuple[Any, ...]:
        """The mask's 0/1 per entry (a block's rows are weighted by it, and so is every column), or none."""
        return (xp.astype(rest[0], x.dtype),) if self.masked else ()

    def fwd(self, xp: Any, x: Any, y: Any, *rest: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        w = self._weights(xp, x, rest)

        def body(total: Any, blk: tuple[Any, ...]) -> Any:
            sxy = self._signs(xp, blk[0], x) * self._signs(xp, blk[1], y)
            if w:  # a pair counts where both entries are valid
                sxy = sxy * (blk[2][..., :, None] * w[0][..., None, :])
            return total + xp.sum(xp.sum(sxy, axis=-1), axis=-1), ()

        zero = xp.zeros(x.shape[:-1], dtype=x.dtype, device=_device(x))
        total, _ = get_adapter(xp).scan_blocks(xp, body, zero, (x, y, *w), self._block(xp, x))
        return (total / self._pairs(xp, x, w[0] if w else None),), (x, y, *rest)  # p = 1: no pairs, 0

    def bwd(self, xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        (ct,) = cts
        x, y, *rest = res
        none = (None,) * self.masked  # the mask has no gradient
        if ct is None:
            return (None, None, *none)
        w = self._weights(xp, x, tuple(rest))

        # By symmetry (s' even, s odd) a block of rows i adds -sum_i s'(x_i - x_k) s(y_i - y_k) to every
        # column k: the gradients accumulate in the carry, with no per-block outputs kept alive
        # (thousands of small ones would fragment the heap between the block temporaries).
        def body(carry: Any, blk: tuple[Any, ...]) -> Any:
            sx, sy = self._signs(xp, blk[0], x), self._signs(xp, blk[1], y)
            gx, gy = carry
            if w:  # the pairs of valid entries (the columns' own weight comes last)
                sx, sy = sx * blk[2][..., :, None], sy * blk[2][..., :, None]
            return (gx - xp.sum((1 - sx * sx) * sy, axis=-2), gy - xp.sum((1 - sy * sy) * sx, axis=-2)), ()

        zeros = xp.zeros_like(x)
        (gx, gy), _ = get_adapter(xp).scan_blocks(xp, body, (zeros, zeros), (x, y, *w), self._block(xp, x))
        pairs = self._pairs(xp, x, w[0] if w else None)
        scale = xp.astype(ct, x.dtype)[..., None] * (2.0 / (self.tau * (pairs[..., None] if w else pairs)))
        if w:
            gx, gy = gx * w[0], gy * w[0]
        return (gx * scale, gy * scale, *none)


def _scalar_shapes(shape: tuple[int, ...], opts: Any, params: Any) -> dict[str, Any]:
    return {"value": ()}


@core(output_shapes=_scalar_shapes, batched={"y": (0,), "mask": (0,)})
@finite_rows(also=("y",))
def soft_kendall_core(xp: Any, x: Any, opts: Any, *, y: Any, mask: Any = None) -> Any:
    """The smooth tau-a of matching rows of ``x`` and ``y`` and its streamed backward pass (``mask``: valid pairs)."""
    spec = _SoftTau(opts.tau, mask is not None)
    if mask is None:
        return custom_backward(xp, spec.fwd, spec.bwd, (x, y), names=("x", "y"), residuals=rebuilt(spec.fwd))
    entered = (masked.zero_masked(xp, x, mask), masked.zero_masked(xp, y, mask), mask)
    (value,), back = custom_backward(xp, spec.fwd, spec.bwd, entered, names=("x", "y", "mask"), residuals=rebuilt(spec.fwd))

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        grads = masked.zero_masked_grads(xp, back(cts), mask, ("x", "y"))
        grads.pop("mask")
        return grads

    # one value per row (the entries' axis reduced): NaN for a row without a valid entry
    return (xp.where(xp.any(mask, axis=-1), value, math.nan),), pullback
