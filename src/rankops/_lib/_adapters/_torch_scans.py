"""The eager torch scan over blocks, its outputs written into buffers allocated once."""

from __future__ import annotations

from typing import Any

import torch

from ._torch_autograd import plain

__all__ = ["scan_written"]


def scan_written(body: Any, carry: Any, xs: tuple[Any, ...], block: int) -> tuple[Any, tuple[Any, ...]]:
    """:func:`rankops._lib._loops.scan_blocks` for eager torch: each block's outputs written into buffers allocated
    at the first block, while writes are safe (:func:`plain`) and each block's outputs are as long as the block.

    Kept as a list, each block's small outputs would be carved from the freed temporaries of its step (a sorting
    network's n x n blends), and glibc's heap could reuse none of them: every step would take fresh memory
    (docs/reliability.md, "Long loops on torch's CPU"). Elsewhere the outputs are concatenated at the end.
    """
    n = xs[0].shape[-1]
    outs: list[tuple[Any, ...]] = []
    buffers: tuple[Any, ...] | None = None
    for start in range(0, n, block):
        stop = min(start + block, n)
        carry, ys = body(carry, tuple(x[..., start:stop] for x in xs))
        if start == 0 and stop < n and ys and plain(*ys) and all(y.shape[-1] == stop for y in ys):
            buffers = tuple(y.new_empty(y.shape[:-1] + (n,)) for y in ys)
        if buffers is not None and plain(*ys) and all(y.shape[-1] == stop - start for y in ys):
            for buffer, y in zip(buffers, ys):
                buffer[..., start:stop] = y
            continue
        if buffers is not None:  # outputs not the block's length, or not safe to write: what was written joins the list
            outs, buffers = [tuple(b[..., :start] for b in buffers)], None
        outs.append(ys)
    if buffers is not None:
        return carry, buffers
    return carry, tuple(parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1) for parts in zip(*outs))
