"""Scans along the last axis for the JAX adapter whose programs do not grow with the row's length.

An associative scan (``lax.associative_scan``) is unrolled by XLA into
``log2 n`` levels, each a few kernels of its own, so its program, and its
compile time, grow with n. Here a row of more than :data:`SCAN_BLOCK`
entries is cut into blocks of that many: one ``lax.scan`` over a block's
positions combines every block at once, and one ``lax.fori_loop`` of
doubling steps combines the blocks' totals. O(n) work within the blocks,
O(m log m) over the m blocks, and the same few loop bodies at any n.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from ._jax_autodiff import varying

__all__ = ["linear_scan", "cumlogsumexp", "SCAN_BLOCK"]

# rows up to it take one associative scan (log2 of it levels, unrolled), longer ones a loop of this many steps within
# blocks of it and one of doubling steps over the blocks, whatever the row's length
SCAN_BLOCK = 32

Combine = Callable[[tuple[Any, ...], tuple[Any, ...]], tuple[Any, ...]]


def _compose(earlier: tuple[Any, ...], later: tuple[Any, ...]) -> tuple[Any, ...]:
    """Two affine maps ``z -> b + a z`` applied in order, as pairs ``(a, b)``."""
    (a1, b1), (a2, b2) = earlier, later
    return a1 * a2, b2 + a2 * b1


def _log_sum(earlier: tuple[Any, ...], later: tuple[Any, ...]) -> tuple[Any, ...]:
    """Two log-sums combined: ``log(exp(a) + exp(b))``."""
    return (jnp.logaddexp(earlier[0], later[0]),)


def _in_blocks(z: Any, fill: float) -> Any:
    """``z`` padded at the end of its last axis with ``fill`` to whole blocks, shaped ``(..., blocks, SCAN_BLOCK)``."""
    blocks = -(-z.shape[-1] // SCAN_BLOCK)
    pad = [(0, 0)] * (z.ndim - 1) + [(0, blocks * SCAN_BLOCK - z.shape[-1])]
    return jnp.reshape(jnp.pad(z, pad, constant_values=fill), z.shape[:-1] + (blocks, SCAN_BLOCK))


def _within_blocks(combine: Combine, identity: tuple[Any, ...], parts: tuple[Any, ...]) -> tuple[Any, ...]:
    """``combine`` from the start of each block (the last axis) to each entry: one ``lax.scan`` over the block's
    positions, every block at once (``identity`` shaped as one position of ``parts``)."""

    def step(carry: tuple[Any, ...], entry: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        combined = combine(carry, entry)
        return combined, combined

    by_position = tuple(jnp.moveaxis(p, -1, 0) for p in parts)
    return tuple(jnp.moveaxis(c, 0, -1) for c in jax.lax.scan(step, varying(identity, *parts), by_position)[1])


def _doubling(combine: Combine, parts: tuple[Any, ...]) -> tuple[Any, ...]:
    """The inclusive scan of ``combine`` along the last axis by doubling, in one ``lax.fori_loop``: each step combines
    every entry with the one ``d`` before it (O(m log m) for m entries; the blocks of a row are few)."""
    m = parts[0].shape[-1]
    pos = jnp.arange(m)

    def step(i: Any, state: tuple[Any, ...]) -> tuple[Any, ...]:
        *now, d = state
        has = pos >= d
        combined = combine(tuple(jnp.roll(u, d, axis=-1) for u in now), tuple(now))
        return (*(jnp.where(has, c, u) for c, u in zip(combined, now)), d * 2)

    steps = max((m - 1).bit_length(), 0)
    return tuple(jax.lax.fori_loop(0, steps, step, varying((*parts, jnp.asarray(1)), parts[0]))[:-1]) if steps else parts


def linear_scan(a: Any, b: Any, reverse: bool) -> Any:
    """``z_i = b_i + a_i z_(i-1)`` along the last axis (``a`` the n - 1 links between neighbours; ``reverse``: from
    the end): the affine maps composed by ``lax.associative_scan`` in a row of at most :data:`SCAN_BLOCK` entries, in
    blocks in a longer one."""
    # each entry's own link to the entry it follows (none for the first one)
    zero = jnp.zeros_like(b[..., :1])
    a = jnp.concatenate([a, zero] if reverse else [zero, a], axis=-1)
    if reverse:
        a, b = jnp.flip(a, axis=-1), jnp.flip(b, axis=-1)
    n = b.shape[-1]
    if n <= SCAN_BLOCK:
        out = jax.lax.associative_scan(_compose, (a, b), axis=b.ndim - 1)[1]
    else:
        # padded entries come last: links of 1 and values of 0 change nothing before them
        pa, pb = _in_blocks(a, 1.0), _in_blocks(b, 0.0)
        pa, pb = _within_blocks(_compose, (jnp.ones_like(pb[..., 0]), jnp.zeros_like(pb[..., 0])), (pa, pb))
        # the value each block ends with: the blocks' own maps composed in order
        ends = _doubling(_compose, (pa[..., -1], pb[..., -1]))[1]
        before = jnp.concatenate([jnp.zeros_like(ends[..., :1]), ends[..., :-1]], axis=-1)  # what enters each block
        out = jnp.reshape(pb + pa * before[..., None], b.shape[:-1] + (-1,))[..., :n]
    return jnp.flip(out, axis=-1) if reverse else out


def cumlogsumexp(z: Any, reverse: bool) -> Any:
    """``log(cumsum(exp(z)))`` along the last axis (``reverse``: from the end), ``logaddexp`` combined within blocks
    and then over their totals. XLA's own ``lax.cumlogsumexp`` (a ``reduce_window``) costs several times more on a
    CPU (docs/benchmarks-scripts.md)."""
    if reverse:
        return jnp.flip(cumlogsumexp(jnp.flip(z, axis=-1), False), axis=-1)
    n = z.shape[-1]
    if n <= SCAN_BLOCK:
        return jax.lax.associative_scan(jnp.logaddexp, z, axis=z.ndim - 1)
    # padded entries come last, at -inf: they add nothing to what precedes them
    blocks = _in_blocks(z, -jnp.inf)
    (within,) = _within_blocks(_log_sum, (jnp.full_like(blocks[..., 0], -jnp.inf),), (blocks,))
    (ends,) = _doubling(_log_sum, (within[..., -1],))
    before = jnp.concatenate([jnp.full_like(ends[..., :1], -jnp.inf), ends[..., :-1]], axis=-1)  # what enters each block
    return jnp.reshape(jnp.logaddexp(within, before[..., None]), z.shape[:-1] + (-1,))[..., :n]
