"""Segmented sums and maxima for the JAX adapter: one scatter into a slot per segment, read back by one gather."""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp


def _by_entry(a: Any, ids: Any) -> Any:
    """``a`` as ``(stack, entries)``: the arrays it stacks, each over the entries that ``ids`` numbers."""
    return jnp.reshape(a, (a.size // max(ids.size, 1), ids.size))


def slot_sums(ids: Any, g: Any) -> Any:
    """Each segment's sum of ``g`` in its slot, flat (``ids`` from :func:`segment_slots`); 0 where empty. Stacked sums
    over the same segments scatter each entry's column of them at once: one index for them all."""
    g = _by_entry(g, ids)
    return jnp.reshape(jnp.zeros_like(g).at[:, ids].add(g, mode="promise_in_bounds", indices_are_sorted=True), (-1,))


def slot_max(ids: Any, g: Any) -> Any:
    """Each segment's maximum of ``g`` in its slot, flat (as :func:`slot_sums`); -inf where empty."""
    g = _by_entry(g, ids)
    return jnp.reshape(jnp.full_like(g, -jnp.inf).at[:, ids].max(g, mode="promise_in_bounds", indices_are_sorted=True), (-1,))


def segment_slots(starts: Any, g: Any) -> tuple[Any, Any]:
    """``(ids, read)``: each entry's slot, one per segment, rows apart, flat over ``starts``' shape where ``g``
    stacks arrays of that shape (one index serves them all), else over ``g``'s (``starts`` broadcasts against it),
    and ``read(slots, exact=False)``, each entry's slot value in ``g``'s shape (``slots`` flat, of ``g.size``).

    XLA fuses the expression that computes the slots into the gather that reads them, and evaluates it again at each
    entry it writes, where a kernel's vectorized loop and its scalar tail may round it apart (vectorized exp and log,
    contracted multiply-adds): a segment's entries would not all hold one value, and a block would split in two (the
    p = 4/3 rank of 135 float32 entries under ``jax.jit``, three tied entries ranked 2.5 apart). Slots computed by
    correctly rounded operations alone (a scatter's own sums, a quotient of them: ``exact``) give the same bits at
    every entry; any others are stored first."""
    shape, n = g.shape, g.shape[-1]
    stacked = 0 < starts.ndim <= g.ndim and tuple(starts.shape) == tuple(shape[g.ndim - starts.ndim:])
    rows = tuple(starts.shape) if stacked else shape
    # the running count of starts at their own shape, then broadcast: one program's segmented sums over the same
    # segments then share one count (a compiler merges equal operations, not a count of each broadcast)
    ids = jnp.broadcast_to(jnp.cumsum(jnp.astype(starts, jnp.int32), axis=-1) - 1, rows)
    ids = jnp.reshape(ids + n * jnp.reshape(jnp.arange(math.prod(rows) // max(n, 1), dtype=jnp.int32), rows[:-1] + (1,)), (-1,))

    def read(slots: Any, exact: bool = False) -> Any:
        slots = _by_entry(slots, ids)
        if not exact:  # stored first (a scatter's result is; a gather reads its operand as stored)
            every = jnp.arange(ids.size)
            slots = jnp.zeros_like(slots).at[:, every].set(slots, indices_are_sorted=True, unique_indices=True)
        return jnp.reshape(slots.at[:, ids].get(mode="promise_in_bounds", indices_are_sorted=True), shape)

    return ids, read
