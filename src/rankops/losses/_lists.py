"""What the learning-to-rank losses and metrics share: lists with their padding, gains, discounts and positions.

A list is one row of ``pred`` (scores) and ``target`` (graded relevance
labels) along ``axis``; ``mask`` marks its valid entries (allRank pads with
the label -1 instead). Padded entries are replaced by zeros before any
arithmetic, so whatever they hold (NaN included) changes nothing and gets no
gradient.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from .._lib._adapters import get_adapter
from .._lib._compat import concrete_number, device as _device
from ._common import row_mask, rows, with_mask


def lists(where: str, pred: Any, target: Any, mask: Any, axis: int, *, zeroed: bool = True,
          finite: bool | str = True) -> tuple[Any, Any, Any, Any]:
    """``(xp, s, t, valid)``: scores and labels as one floating dtype with ``axis`` last; ``valid`` a bool array.

    ``finite``: a list with a NaN or infinite score or label among its valid
    entries counts as having none (its value NaN, as every loss gives a
    non-finite row), and its scores and labels are replaced by 0: nothing
    non-finite is computed with (no NumPy warning), no gradient reaches it.
    ``finite="labels"`` (the metrics, for which an infinite score is an
    order like any other): only a NaN score, or a non-finite label, does.
    ``zeroed``: the padding (and such a list) of ``s`` and ``t`` replaced by 0
    (False: for a caller that reads them only where ``valid``).
    """
    xp, axis, (s, t) = rows(where, axis, {"pred": pred, "target": target}, also=with_mask(mask))
    t = xp.astype(t, s.dtype)
    m = row_mask(xp, mask, pred, axis)
    valid = xp.ones(s.shape, dtype=xp.bool, device=_device(s)) if m is None else m
    if finite:
        # |x| < inf: finite, in two operations (NaN compares False, without a NumPy warning)
        ok = ((xp.abs(s) < math.inf) if finite is True else (s == s)) & (xp.abs(t) < math.inf)
        fine = ~xp.any(valid & ~ok, axis=-1, keepdims=True)
        valid = valid & fine
    if zeroed and (finite or m is not None):
        s, t = xp.where(valid, s, 0.0), xp.where(valid, t, 0.0)
    return xp, s, t, valid


def per_list(xp: Any, value: Any, valid: Any) -> Any:
    """``value`` where the list has a valid entry, NaN for a list of padding only (docs/api.md, "Ragged rows")."""
    return xp.where(xp.any(valid, axis=-1), value, math.nan)


def gains(xp: Any, t: Any, powered: bool) -> Any:
    """``2**t - 1`` (Burges et al. 2005; allRank's default) or ``t`` itself."""
    return 2.0**t - 1.0 if powered else t


def check_gain(gain: str) -> bool:
    """Whether ``gain`` ("exp" or "linear") is powered."""
    if gain not in ("exp", "linear"):
        raise ValueError(f"gain must be 'exp' or 'linear', got {gain!r}")
    return gain == "exp"


def discounts(xp: Any, n: int, k: int | None, like: Any) -> Any:
    """``1 / log2(2 + p)`` at the 0-based positions p < k (all when k is None), 0 from k on: shape (n,)."""
    p = xp.arange(n, dtype=like.dtype, device=_device(like))
    d = 1.0 / xp.log2(2.0 + p)
    return d if k is None else xp.where(p < k, d, xp.zeros_like(d))


def _descending(xp: Any, a: Any) -> Any:
    return xp.flip(get_adapter(xp).sort(xp, a), axis=-1)


def ideal_dcg(xp: Any, g: Any, valid: Any, k: int | None) -> Any:
    """DCG@k of the gains ``g`` in their best order (largest first), over each list's valid entries (None: every entry)."""
    if valid is not None:
        g = xp.where(valid, g, xp.zeros_like(g))
    best = get_adapter(xp).rows(xp, _descending, g, dtype=g.dtype)
    return xp.sum(best * discounts(xp, g.shape[-1], k, g), axis=-1)


def max_dcg(xp: Any, g: Any, valid: Any, k: int | None, eps: float) -> Any:
    """allRank's normaliser ``max(DCG@k of the ideal order, eps)``; NaN where it is 0 (``eps = 0`` and a list without a
    relevant item), so that the gains divided by it are NaN without a NumPy warning (0 / 0)."""
    m = xp.maximum(ideal_dcg(xp, g, valid, k), xp.full_like(g[..., 0], eps))
    return xp.where(m > 0, m, xp.full_like(m, math.nan))


def number(name: str, value: Any, *, positive: bool = False) -> float:
    """An option that is a finite real number >= 0 (> 0 when ``positive``), as a float."""
    value = concrete_number(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if positive and value == 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return float(value)


def count(name: str, value: Any) -> int:
    """An option that is an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return int(value)


def flag(name: str, value: Any) -> bool:
    """An option that is a bool (not merely truthy)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return value


def check_cutoff(n: int, k: Any) -> int | None:
    """``k``: None (the whole list) or an int >= 1; a ``k`` past the list's length is the whole list, as in allRank."""
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be None or an int >= 1, got {k!r}")
    return min(k, n) if n > 0 else k


def pairs(xp: Any, valid: Any) -> Any:
    """``valid_i & valid_j``: the (..., n, n) pairs of valid entries."""
    return valid[..., :, None] & valid[..., None, :]


def _positions(xp: Any, s: Any, valid: Any) -> Any:
    adapter = get_adapter(xp)
    _, order = adapter.sort_order(xp, xp.where(valid > 0, s, xp.full_like(s, -math.inf)), descending=True)
    return xp.astype(adapter.invert_permutation(xp, order), s.dtype)


def positions(xp: Any, s: Any, valid: Any) -> Any:
    """Each valid entry's 0-based position when the list is sorted by ``s``, largest first, ties in order of appearance.

    The padding sorts after the valid entries; no gradient flows through positions.
    """
    return get_adapter(xp).rows(xp, _positions, s, xp.astype(valid, s.dtype), dtype=s.dtype)


def log_sigmoid(xp: Any, z: Any) -> Any:
    """``log(sigmoid(z))``, stable and smooth at 0: the backend's own kernel where it has one."""
    return get_adapter(xp).log_sigmoid(xp, z)


def sigmoid(xp: Any, z: Any) -> Any:
    """The logistic function, stable: the backend's own kernel where it has one."""
    return get_adapter(xp).sigmoid(xp, z)
