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


def _scan(combine: Combine, identity: tuple[float, ...], parts: tuple[Any, ...]) -> tuple[Any, ...]:
    """The inclusive scan of ``combine`` (associative, ``identity`` its neutral element, one number per part) along the
    last axis of ``parts``: one ``lax.associative_scan`` in a row of at most :data:`SCAN_BLOCK` entries; in a longer
    one within blocks (padded at the end with the identity, which changes nothing before it), then over the blocks'
    totals, each block's entries combined last with what enters it."""
    n = parts[0].shape[-1]
    if n <= SCAN_BLOCK:
        return tuple(jax.lax.associative_scan(combine, parts, axis=parts[0].ndim - 1))
    blocked = tuple(_in_blocks(p, e) for p, e in zip(parts, identity))
    within = _within_blocks(combine, tuple(jnp.full_like(b[..., 0], e) for b, e in zip(blocked, identity)), blocked)
    ends = _doubling(combine, tuple(w[..., -1] for w in within))
    before = tuple(jnp.concatenate([jnp.full_like(t[..., :1], e), t[..., :-1]], axis=-1) for t, e in zip(ends, identity))
    out = combine(tuple(b[..., None] for b in before), within)
    # the blocks' length named, not -1: a batch of no rows (a leading 0) leaves nothing to infer it from
    return tuple(jnp.reshape(o, parts[0].shape[:-1] + (o.shape[-2] * o.shape[-1],))[..., :n] for o in out)


def linear_scan(a: Any, b: Any, reverse: bool) -> Any:
    """``z_i = b_i + a_i z_(i-1)`` along the last axis (``a`` the n - 1 links between neighbours; ``reverse``: from
    the end): the affine maps ``z -> b + a z`` composed in order (:func:`_scan`)."""
    # each entry's own link to the entry it follows (none for the first one)
    zero = jnp.zeros_like(b[..., :1])
    a = jnp.concatenate([a, zero] if reverse else [zero, a], axis=-1)
    if reverse:
        a, b = jnp.flip(a, axis=-1), jnp.flip(b, axis=-1)
    out = _scan(_compose, (1.0, 0.0), (a, b))[1]
    return jnp.flip(out, axis=-1) if reverse else out


def cumlogsumexp(z: Any, reverse: bool) -> Any:
    """``log(cumsum(exp(z)))`` along the last axis (``reverse``: from the end), ``logaddexp`` combined by
    :func:`_scan`. XLA's own ``lax.cumlogsumexp`` (a ``reduce_window``) costs several times more on a CPU
    (docs/benchmarks-scripts.md)."""
    if reverse:
        return jnp.flip(cumlogsumexp(jnp.flip(z, axis=-1), False), axis=-1)
    return _scan(_log_sum, (-jnp.inf,), (z,))[0]
