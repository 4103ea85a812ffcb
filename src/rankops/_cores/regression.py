"""``rankops.isotonic_regression``'s core: the least-squares fit of :mod:`.isotonic` and its block-wise pullback."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._lib._adapters import core, custom_backward, get_adapter, rebuilt, same_shape
from .._lib._compat import broadcast_arrays
from .._lib._numerics import checked_weights, safe_divide, unbroadcast
from . import masked
from .finite import finite_rows
from .isotonic import block_starts, block_sums, decreasing, fit

__all__ = ["regression_core"]


@dataclasses.dataclass(frozen=True)
class _Regression:
    increasing: bool
    weighted: bool

    def fwd(self, xp: Any, y: Any, *w: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        bad = xp.any(xp.isnan(y), axis=-1, keepdims=True)  # NaN rows stay NaN
        if w:
            y, weights = broadcast_arrays(xp, y, w[0])
            weights, valid = checked_weights(xp, weights)  # a row outside the domain: fitted with ones, then NaN
            bad = bad | ~valid
        else:
            weights = xp.ones_like(y)
        solve = fit if self.increasing else decreasing
        v = xp.where(bad, math.nan, solve(xp, get_adapter(xp), y, weights))
        return (v,), (y, weights, v, *w)

    def bwd(self, xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        (ct,) = cts
        if ct is None:
            return (None,) * (1 + self.weighted)
        y, w, v = res[:3]
        adapter = get_adapter(xp)
        starts = block_starts(xp, v)
        # v_B = sum_B w y / W_B: dv_B/dy_i = w_i / W_B, dv_B/dw_i = (y_i - v_B) / W_B (0 on a block of zero weights)
        per_weight = safe_divide(xp, block_sums(xp, adapter, starts, xp.astype(ct, y.dtype)), block_sums(xp, adapter, starts, w))
        dy = w * per_weight
        if not self.weighted:
            return (dy,)
        return dy, unbroadcast(xp, (y - v) * per_weight, tuple(res[3].shape))


@core(output_shapes=same_shape, batched={"weights": (0,), "mask": (0,)})
@finite_rows
def regression_core(xp: Any, y: Any, opts: Any, *, increasing: bool, weights: Any, mask: Any = None) -> Any:
    """The least-squares isotonic fit and its block-wise pullback (to ``weights`` too).

    ``mask``: the fit of the valid entries alone, as weights of 0 on the
    others. That is exact: the objective does not see a zero-weight entry,
    and any fit of the valid entries extends to one of the whole row (fill
    the gaps by their neighbours), so the whole row's optimum restricted to
    the valid entries is their own optimum, which is unique.
    """
    if mask is None:
        spec = _Regression(increasing, weights is not None)
        return custom_backward(xp, spec.fwd, spec.bwd, (y,) if weights is None else (y, weights), names=("x", "weights"),
                               residuals=rebuilt(spec.fwd))
    w = xp.ones_like(y) if weights is None else xp.broadcast_to(xp.astype(weights, y.dtype), y.shape)
    spec = _Regression(increasing, True)
    outs, back = custom_backward(xp, spec.fwd, spec.bwd, (masked.zero_masked(xp, y, mask), masked.zero_masked(xp, w, mask)),
                                 names=("x", "weights"), residuals=rebuilt(spec.fwd))

    def to_given_weights(grads: dict[str, Any]) -> dict[str, Any]:
        if weights is None:
            grads.pop("weights")
        else:
            grads["weights"] = unbroadcast(xp, grads["weights"], tuple(weights.shape))
        return grads

    return masked.as_masked_operator(xp, outs, back, mask, mask, ("x", "weights"), to_given_weights)
