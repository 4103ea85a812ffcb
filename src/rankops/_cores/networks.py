r"""Sorting networks as wiring tables: for every layer, each wire's partner and side.

A layer of a sorting network compares disjoint pairs of wires (Knuth, TAOCP
vol. 3, 5.3.4). Here a layer is two rows of a table over the n wires: the
partner of each wire (itself when idle) and its side, -1 on the low wire
(which receives the minimum), +1 on the high one, 0 when idle. Tables are
built with ``xp`` integer operations, O(n) per layer, on the input's device.

- ``"odd_even"``: odd-even transposition, n layers, alternately comparing
  wires (0, 1), (2, 3), ... and (1, 2), (3, 4), ... (any n); the layers are
  the same two, so they are two table columns and a schedule of n indices.
- ``"bitonic"``: Batcher's bitonic sorter, ``L (L + 1) / 2`` layers for
  ``L = ceil(log2 n)``, written with every comparator ascending: the first
  layer of merge stage b compares wire i with its mirror in its block of
  ``2^(b+1)``, the others with ``i XOR 2^(b - l)`` (Batcher 1968; the
  mirrored form of e.g. Lang, "Bitonic sorting network for n not a power of
  2"). This is the ``diffsort`` package's network with its descending
  blocks turned over, which changes no value. For n not a power of two the
  wires are padded to ``2^L`` with +inf above the row: a comparator with a
  padded wire would leave the real one in place, so it is dropped. (The
  package drops its padded wires' comparators in the descending layout,
  where a padded wire can hold the minimum: for n = 22, say, its hard limit
  does not sort; this one sorts every n.)
"""

from __future__ import annotations

from typing import Any

from .._lib._compat import index_dtype, device as _device

__all__ = ["NETWORKS", "Wiring", "wiring", "stage_sizes"]

NETWORKS = ("odd_even", "bitonic")


class Wiring:
    """``partner`` and ``side`` (shape ``(n, D)``) for D distinct layers, and ``schedule`` (shape ``(K,)``): layer k is column ``schedule[k]``."""

    def __init__(self, partner: Any, side: Any, schedule: Any) -> None:
        self.partner, self.side, self.schedule = partner, side, schedule


def _bitonic_masks(n: int) -> list[tuple[int, bool]]:
    """Per layer: the XOR mask of the partner's index and whether it is a mirror (the first layer of a merge)."""
    stages = (n - 1).bit_length()
    masks = []
    for b in range(stages):
        masks.append(((2 << b) - 1, True))
        masks.extend((1 << (b - level), False) for level in range(1, b + 1))
    return masks


def stage_sizes(n: int) -> list[int]:
    """Per bitonic layer on n wires, ``2^b`` for its merge stage b: the stage sorts networks of more than 2^b wires."""
    return [1 << b for b in range((n - 1).bit_length()) for _ in range(b + 1)]


def wiring(xp: Any, network: str, n: int, like: Any) -> Wiring:
    """The wiring of ``network`` on n wires, on ``like``'s device, ``side`` in ``like``'s dtype."""
    device = _device(like)
    idx = index_dtype(xp, device)
    wire = xp.arange(n, dtype=idx, device=device)[:, None]
    if network == "odd_even":
        parity = xp.asarray([0, 1], dtype=idx, device=device)
        up = (wire - parity) % 2 == 0  # the low wire of its pair in this layer
        partner = xp.where(up, wire + 1, wire - 1)
        schedule = xp.asarray([k % 2 for k in range(n)], dtype=idx, device=device)
    else:
        masks = _bitonic_masks(n)
        xor = xp.asarray([m for m, _ in masks], dtype=idx, device=device)
        partner = xp.bitwise_xor(wire, xor)
        schedule = xp.arange(len(masks), dtype=idx, device=device)
    idle = (partner < 0) | (partner >= n)
    partner = xp.where(idle, xp.broadcast_to(wire, partner.shape), partner)
    one = xp.ones(partner.shape, dtype=like.dtype, device=device)
    side = xp.where(idle, 0.0 * one, xp.where(wire < partner, -one, one))
    return Wiring(partner, side, schedule)
