"""The entries a row's transport sees: a mask, or weights of 0, as entries out of the problem (ragged rows)."""

from __future__ import annotations

import math
from typing import Any

from .._lib._compat import device as _device
from .._lib._numerics import safe_divide, unbroadcast
from . import masked

__all__ = ["Entries"]


class Entries:
    """The entries a row's transport sees: ``weights`` (None: uniform), ``support`` (None: all) and their count.

    A ``mask`` is weights of 0 off it, and a weight of 0 is an entry out of
    the problem (``mask=False``): the squash does not see it, its outputs
    are 0 and it receives no gradient. ``count`` is n_v per row (..., 1),
    or the Python number n when every entry counts.
    """

    def __init__(self, xp: Any, x: Any, weights: Any, mask: Any) -> None:
        self.user_weights = weights
        if weights is None and mask is None:
            self.weights, self.support, self.count = None, None, float(x.shape[-1])
            return
        w = xp.ones_like(x) if weights is None else xp.broadcast_to(xp.astype(weights, x.dtype), x.shape)
        if mask is not None:
            w = xp.where(mask, w, xp.zeros_like(w))
        # a weight outside the domain (negative, NaN) is no mask: its row is NaN (input_measure), not quietly 0 there
        self.weights, self.support = w, w != 0
        self.count = xp.sum(xp.astype(self.support, x.dtype), axis=-1, keepdims=True)

    def zero_masked(self, xp: Any, x: Any) -> Any:
        """``x`` with the entries out of the problem at 0 (padding, NaN included, reaches nothing)."""
        return x if self.support is None else masked.zero_masked(xp, x, self.support)

    def grid(self, xp: Any, m: int, like: Any) -> tuple[Any, Any, Any] | None:
        """``(y, b, log_b)`` of each row's own grid of n_v targets (padded to m = n, weight 0), or None: the shared grid.

        A row of n_v entries alone has the targets ``j / (n_v - 1)``, j < n_v;
        the others sit at 1 with no weight.
        """
        if self.support is None:
            return None
        dev = _device(like)
        j = xp.arange(m, dtype=like.dtype, device=dev)
        y = xp.minimum(j / xp.maximum(self.count - 1.0, xp.ones_like(self.count)), xp.ones_like(j))
        valid = j < self.count
        inv = safe_divide(xp, xp.ones_like(self.count), self.count)
        b = xp.where(valid, inv, xp.zeros_like(y))
        log_b = xp.where(valid, -xp.log(xp.where(self.count > 0, self.count, xp.ones_like(self.count))), -math.inf)
        return y, b, log_b

    def as_masked_operator(self, xp: Any, outs: tuple[Any, ...], back: Any, out_support: Any = None) -> tuple[tuple[Any, ...], Any]:
        """The core's ``(value, error), pullback`` with the value 0 off ``out_support`` (default: the entries' support),
        NaN on a row without an entry, and gradients to the caller's ``weights`` only (none to a mask)."""
        if self.support is None:
            return outs, back
        out_support = self.support if out_support is None else out_support
        user = self.user_weights

        def to_user_weights(grads: dict[str, Any]) -> dict[str, Any]:
            if user is None:
                grads.pop("weights", None)
            elif grads.get("weights") is not None:
                grads["weights"] = unbroadcast(xp, grads["weights"], tuple(user.shape))
            return grads

        return masked.as_masked_operator(xp, outs, back, self.support, out_support, ("x", "weights"), to_user_weights)
