r"""Ragged rows: the valid entries of a row (``mask``), and what the masked ones read and receive.

A core given a ``mask`` computes the operator on each row's valid entries
alone (how is its own: zero weights, a shorter grid, ...). What is common
is written here once: masked entries enter the core as 0 (padding may hold
anything, NaN included, and must not reach a valid entry), they hold 0 in an
output shaped like the input, a row with no valid entry is NaN, and their
gradients are exactly 0: the backends' autodiff sees the selections, and a
core's own pullback (``rankops.vjp``) drops the masked outputs' cotangents
(:func:`output_cotangents`) and zeroes the masked inputs' gradients (:func:`zero_masked_grads`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Mapping

from .._lib._adapters import custom_backward
from .._lib._calls import LIKE_INPUT, Prepared
from .._lib._compat import index_dtype, is_array, device as _device

__all__ = ["arrays", "with_mask", "in_core_layout", "zero_masked", "masked_output", "output_cotangents", "zero_masked_grads", "as_masked_operator", "backward", "zeros_masked_input", "squared", "prefix", "held_last", "valid_first", "ValidFirst", "valid_count", "trailing", "sorted_rows"]


def arrays(mask: Any) -> dict[str, Any]:
    """The mask among a call's arrays (namespace and device checks), when there is one."""
    return {} if mask is None else {"mask": mask}


def with_mask(p: Prepared, params: dict[str, Any], mask: Any) -> dict[str, Any]:
    """A core's parameters with the caller's mask (None: none) laid out for it."""
    return params if mask is None else {**params, "mask": in_core_layout(p, mask)}


def in_core_layout(p: Prepared, mask: Any) -> Any:
    """The caller's ``mask`` (bool, broadcastable to the input's shape) in the core's layout, shaped like the input there."""
    xp = p.xp
    if mask.dtype != xp.bool:
        raise TypeError(f"mask must be a bool array (True for the valid entries), got dtype {mask.dtype}")
    try:
        mask = xp.broadcast_to(mask, p.shape)
    except (ValueError, RuntimeError) as exc:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {p.name}'s shape {p.shape}") from exc
    return p.layout.to_core(mask, LIKE_INPUT)


def zero_masked(xp: Any, x: Any, mask: Any) -> Any:
    """``x`` with its masked entries set to 0."""
    return xp.where(mask, x, xp.zeros_like(x))


def masked_output(xp: Any, value: Any, mask: Any) -> Any:
    """An output shaped like the input: 0 at masked entries, NaN on a row without a valid entry."""
    out = xp.where(mask, value, xp.zeros_like(value))
    return xp.where(xp.any(mask, axis=-1, keepdims=True), out, math.nan)


def output_cotangents(xp: Any, cts: tuple[Any, ...], mask: Any) -> tuple[Any, ...]:
    """The cotangent of an output made by :func:`masked_output`, for the core's output before it: none at masked entries."""
    ct = cts[0]
    return cts if ct is None else (xp.where(mask, ct, xp.zeros_like(ct)), *cts[1:])


def zero_masked_grads(xp: Any, grads: Mapping[str, Any], mask: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The core's gradients with those of ``names`` (laid out like the input) set to 0 at masked entries."""
    return {k: (xp.where(mask, g, xp.zeros_like(g)) if k in names and g is not None else g) for k, g in grads.items()}


def as_masked_operator(xp: Any, outs: tuple[Any, ...], back: Any, mask: Any, out_mask: Any, names: tuple[str, ...] = ("x",),
             then: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> tuple[tuple[Any, ...], Any]:
    """A core's ``(outputs, pullback)`` from ``custom_backward`` over ``(entered x, ..., mask)``, as the masked operator.

    The first output is the value, valid where ``out_mask`` is; the gradients are those of ``names`` (the
    masked entries' at 0), passed through ``then`` when given; the mask's own (None) gradient is dropped.
    """

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        grads = zero_masked_grads(xp, back(output_cotangents(xp, cts, out_mask)), mask, names)
        grads.pop("mask", None)
        return grads if then is None else then(grads)

    return (masked_output(xp, outs[0], out_mask), *outs[1:]), pullback


def zeros_masked_input(rule: Callable[..., Any]) -> Callable[..., Any]:
    """A core rule that gets ``x`` with its masked entries at 0 whenever a ``mask`` parameter comes.

    Outermost, so that nothing before the rule (a temperature's rescaling,
    :mod:`.tempered`) multiplies the padding: ``0 * nan`` in a sum over the
    row would reach the temperature's gradient.
    """

    @functools.wraps(rule)
    def run(xp: Any, x: Any, opts: Any, **params: Any) -> Any:
        mask = params.get("mask")
        return rule(xp, x if mask is None else zero_masked(xp, x, mask), opts, **params)

    return run


def backward(
    xp: Any, fwd: Any, bwd: Any, arrays: tuple[Any, ...], names: tuple[str, ...], mask: Any, *, positional: bool = False,
    residuals: Any = None,
) -> tuple[tuple[Any, ...], Any]:
    """``custom_backward`` of a core whose forward takes the mask (None: none) as its last argument.

    The first array is the input, its masked entries already at 0 (the core
    rule is :func:`zeros_masked_input`'s); the first output is valid where the input
    is, or on the first n_v positions (``positional``: a sort); ``bwd``
    returns None for the mask.
    """
    if mask is None:
        return custom_backward(xp, fwd, bwd, arrays, names=names, residuals=residuals)
    outs, back = custom_backward(xp, fwd, bwd, (*arrays, mask), names=(*names, "mask"), residuals=residuals)
    return as_masked_operator(xp, outs, back, mask, prefix(xp, mask) if positional else mask)


def squared(xp: Any, outs: tuple[Any, ...], back: Any, mask: Any) -> tuple[tuple[Any, ...], Any]:
    """A permutation matrix's ``(outputs, pullback)`` (rows the positions, columns the items) as the masked operator's:
    the first n_v rows and the valid columns kept, the rest 0, a row without a valid entry NaN throughout."""
    kept = prefix(xp, mask)[..., :, None] & mask[..., None, :]
    value = xp.where(kept, outs[0], xp.zeros_like(outs[0]))
    value = xp.where(xp.any(mask, axis=-1)[..., None, None], value, math.nan)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        grads = back(cts if ct is None else (xp.where(kept, ct, xp.zeros_like(ct)), *cts[1:]))
        return zero_masked_grads(xp, grads, mask, ("x",))

    return (value, *outs[1:]), pullback


def prefix(xp: Any, mask: Any) -> Any:
    """True on the first n_v positions of each row (n_v its valid entries): where a sort's valid values go."""
    return _counted(xp, mask)[1]


def valid_count(xp: Any, like: Any, mask: Any) -> Any:
    """Each row's count of valid entries in ``like``'s dtype, shaped ``(..., 1)``; without a mask, n (a number)."""
    return like.shape[-1] if mask is None else xp.sum(xp.astype(mask, like.dtype), axis=-1, keepdims=True)


def _counted(xp: Any, mask: Any) -> tuple[Any, Any]:
    """``(n_v, prefix)``: each row's count of valid entries (index dtype, keepdims) and its first n_v positions."""
    idx = index_dtype(xp, _device(mask))
    count = xp.sum(xp.astype(mask, idx), axis=-1, keepdims=True)
    return count, xp.arange(mask.shape[-1], dtype=idx, device=_device(mask)) < count


def held_last(xp: Any, adapter: Any, a: Any, count: Any) -> Any:
    """Each row's entry ``count - 1`` of ``a`` (its last valid one, ``count`` as n_v), 0 on a row without one."""
    last = adapter.take(xp, a, xp.clip(count - 1, 0, None))
    return xp.where(count > 0, last, xp.zeros_like(last))


def sorted_rows(xp: Any, adapter: Any, x: Any, order: Any = None, *, descending: bool = False) -> tuple[Any, Any]:
    """``(x's rows sorted, their order)`` (stable); ``order``: that order, known already (:mod:`.softness` sorted the
    row): ``x`` gathered in it, no second sort."""
    if order is None:
        return adapter.sort_order(xp, x, descending=descending)
    return adapter.take(xp, x, order), order


def trailing(rest: tuple[Any, ...], ordered: bool, masked: bool) -> tuple[tuple[Any, ...], Any, Any]:
    """A forward's arguments after ``x`` split into ``(its own, order, mask)``: the row's sorting order (when
    ``ordered``: :mod:`.softness` sorted the row already) and the mask (when ``masked``) come last, in that order."""
    cut = len(rest) - ordered - masked
    return rest[:cut], rest[cut] if ordered else None, rest[-1] if masked else None


def trailing_grads(ordered: bool, masked: bool) -> tuple[None, ...]:
    """The gradients of the arguments :func:`trailing` splits off: the order and the mask have none."""
    return (None,) * (ordered + masked)


@dataclasses.dataclass(frozen=True)
class ValidFirst:
    """A row sorted with its valid entries first (in order) and the masked ones after them."""

    s: Any  # the sorted row; the masked tail repeats the last valid value (links of 1 to it, no inf)
    order: Any  # s = x[order] on the valid prefix
    valid: Any  # bool, True on the prefix of the row's n_v valid entries
    count: Any  # n_v, with keepdims (index dtype)


def valid_first(xp: Any, adapter: Any, x: Any, mask: Any, *, descending: bool = False, order: Any = None) -> ValidFirst:
    """``x``'s rows sorted (stable; ascending unless ``descending``) with each row's valid entries first.

    The masked entries sort after every valid one as +-inf keys; in ``s`` they
    then hold the last valid value (0 on a row without one), so that
    differences between neighbours stay finite and the masked tail, given no
    weight, adds nothing to any sum over the row. ``order``: that order,
    known already (:mod:`.softness` sorted the row): no second sort.
    """
    far = -math.inf if descending else math.inf
    s, order = sorted_rows(xp, adapter, xp.where(mask, x, far), order, descending=descending)
    count, valid = _counted(xp, mask)
    return ValidFirst(xp.where(valid, s, held_last(xp, adapter, s, count)), order, valid, count)


def row_k(xp: Any, x: Any, k_array: tuple[Any, ...], k: Any, count: Any) -> tuple[Any, Any]:
    """A top-k operator's ``(k, outside)`` per row, shaped ``(..., 1)``: ``k_array`` (a per-row k, the forward's
    argument) or the number ``k``; ``outside`` where k is not in (0, count] or is NaN (``count``: n, or n_v with a mask),
    where k is then 1/2, so that the row computes quietly before it is made NaN."""
    if k_array:
        k = xp.astype(k_array[0], x.dtype)[..., None]
    else:
        k = xp.full(x.shape[:-1] + (1,), k, dtype=x.dtype, device=_device(x))
    outside = ~((k > 0) & (k <= count))  # a NaN k too
    return xp.where(outside, 0.5, k), outside


def kth_largest(xp: Any, adapter: Any, s: Any, k: Any, count: Any, *, descending: bool) -> Any:
    """Each row's ``ceil(k)``-th largest valid entry of ``s``, sorted with its ``count`` valid entries first (decreasing
    where ``descending``, else increasing), for ``k`` as :func:`row_k` gives it (in (0, count])."""
    c = xp.ceil(k)
    place = c - 1.0 if descending else count - c
    return adapter.take(xp, s, xp.astype(place, index_dtype(xp, _device(s))))


def short_rows(xp: Any, value: Any, mask: Any, k: Any) -> Any:
    """A masked top-k's value NaN throughout (masked entries included) on the rows with fewer than k valid entries."""
    count = valid_count(xp, value, mask)
    return xp.where(count < (k[..., None] if is_array(k) else k), math.nan, value)
