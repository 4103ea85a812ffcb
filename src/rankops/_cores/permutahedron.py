r"""Soft sort and soft rank as projections onto the permutahedron (Blondel, Teboul, Berthet & Djolonga 2020).

With ``rho = (n, n-1, ..., 1)``, ``eps`` the strength and ``P_Q(z, w)`` the
projection of z onto the permutahedron of w under regularisation Q
(Blondel et al., Eq. 6), per row:

- soft rank ``r = P_Q(x / eps, rho)``, 1-based ascending;
- soft sort ``P_Q(rho / eps, -x)``, negated: ascending.

Proposition 3 of the paper turns each projection into one sort and one
isotonic regression. With ``s`` the sorted (decreasing) entries:

- ``"l2"``: ``P(z, w) = z - v`` unsorted, ``v = iso(s_z - w)`` decreasing;
  the rank is ``s - iso(s - rho)``, the sort ``rho/eps - iso(rho/eps - s)``;
- ``"kl"``: ``P(z, w) = exp(z - v)``, ``v = iso_kl(s_z, log w)``; the rank is
  ``exp(s - iso_kl(s, log rho))``, the sort ``rho/eps - iso_kl(rho/eps, s)``.

On one-entry blocks the projection is the hard value, and it is returned
exactly (the soft sort as ``(iso(y) - y) - s``, the first term exactly 0
there): the direct forms cancel to 0 for entries of 1e30 and lose ``s``
under ``rho / eps`` in float32 at small strengths, where torchsort's
values are off by the data's own scale.

The conventions (scaling, which side is sorted, descending via ``-x``) are
torchsort's, so values and gradients agree with ``torchsort.soft_rank`` /
``soft_sort`` at the same ``regularization`` and ``regularization_strength``.
The isotonic step is :mod:`.isotonic` (exact, O(n log n) array
operations); its Jacobian is block-wise, so the backward pass is block
sums: O(n) memory, nothing n x n.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import array_api_compat

from .._lib._adapters import core, custom_backward, get_adapter, same_shape
from .._lib._compat import is_array
from . import isotonic
from .tempered import tempered

__all__ = ["projection_core"]


def _rho(xp: Any, like: Any) -> Any:
    n = like.shape[-1]
    return xp.arange(n, 0, -1, dtype=like.dtype, device=array_api_compat.device(like))


@dataclasses.dataclass(frozen=True)
class _Projection:
    output: str  # "rank" or "sort"
    regularization: str
    strength: float | None  # None: an array, the forward's second argument (the KL sort only)
    descending: bool

    def fwd(self, xp: Any, x: Any, *strength_array: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        adapter = get_adapter(xp)
        rho = _rho(xp, x)
        strength = strength_array[0] if strength_array else self.strength
        if self.output == "rank":
            z = (-x if self.descending else x) / strength
        else:
            z = x if self.descending else -x
        s, order = adapter.sort_order(xp, z, descending=True)
        inverse = adapter.invert_permutation(xp, order)
        # On a one-entry block the projection is the hard value, and it comes out exactly:
        # s - iso(s - rho) would cancel to 0 for entries of 1e30, rho/eps - iso(rho/eps - s)
        # lose s under rho/eps in float32. The rank is written on s - s_first (_pooled_ranks:
        # rho on a one-entry block, bit-equal on tied entries), the sort as (sol - y) - s.
        if self.output == "sort":
            w = rho / strength
            y = w - s  # both fits hold w - s on one-entry blocks
        if self.output == "rank" and self.regularization == "l2":
            # only the blocks of sol are used: those of the decreasing fit of s - rho are the
            # increasing fit's of rho - s (the fit negated)
            sol = isotonic.fit(xp, adapter, rho - s)
        elif self.output == "rank":
            sol = isotonic.decreasing(xp, adapter, s, xp.log(rho), "kl")
        elif self.regularization == "l2":
            sol = isotonic.decreasing(xp, adapter, y)
        else:
            sol = isotonic.decreasing(xp, adapter, w, s, "kl")
        starts = isotonic.block_starts(xp, sol)
        if self.output == "rank":
            ranks, share = _pooled_ranks(xp, adapter, starts, s, rho, self.regularization)
            value = adapter.take(xp, ranks, inverse)
        else:
            # (sol - y) is exactly 0 on one-entry blocks: the value is then s itself
            value = s - (sol - y) if self.descending else (sol - y) - s
        # a NaN has no place in the order: the whole row is NaN rather than quietly ranked
        value = xp.where(xp.any(xp.isnan(x), axis=-1, keepdims=True), math.nan, value)
        # the rank's backward needs each entry's share of its block, which the forward has at hand
        return (value,), (s, starts, order, inverse, value, share if self.output == "rank" else None, *strength_array)

    def bwd(self, xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any]:
        (ct,) = cts
        has_strength = len(res) > 6
        if ct is None:  # torch: the output was not used
            return (None,) * (1 + has_strength)
        s, starts, order, inverse, value, share = res[:6]
        adapter = get_adapter(xp)
        ct = xp.astype(ct, s.dtype, copy=False)
        if self.output == "rank":
            g = ct * value if self.regularization == "kl" else ct  # through exp(s - sol)
            g = adapter.take(xp, g, order)
            g = g - share * isotonic.block_sums(xp, adapter, starts, g)
            sign = -1.0 if self.descending else 1.0
            return (adapter.take(xp, g, inverse) * (sign / self.strength),)
        # sort: d value / d s is the block average, and s = sort(-+x) undoes the sign
        dx = adapter.take(xp, _block_average(xp, adapter, starts, s, ct, self.regularization), inverse)
        if not has_strength:
            return (dx,)
        # The KL sort's value is sol - w, w = rho / eps, sol_B = LSE(w_B) - LSE(s_B): d value_i / d eps
        # = -(softmax(w_B) . rho_B - rho_i) / eps**2 (ascending; negated descending), whose transpose
        # spreads each block's cotangent total by softmax(w_B): the block average of the forward's backward
        eps = res[6]
        rho = _rho(xp, s)
        spread = _block_average(xp, adapter, starts, xp.broadcast_to(rho / eps, s.shape), ct, "kl")
        d_eps = -xp.sum((spread - ct) * rho) / (eps * eps)
        return dx, -d_eps if self.descending else d_eps


def _pooled_ranks(xp: Any, adapter: Any, starts: Any, s: Any, rho: Any, regularization: str) -> tuple[Any, Any]:
    """The rank projection on each block: ``mean_B(rho) + s - mean_B(s)`` (l2), ``sum_B(rho) softmax_B(s)`` (kl),
    and each entry's share of its block, the Jacobian's weights (``1 / |B|``, ``softmax_B(s)``).

    These equal ``s - iso(s - rho)`` and ``exp(s - iso_kl(s, log rho))``, but
    are written on ``d = s - s_first`` (the block's largest entry): the direct
    forms subtract two numbers of the size of ``x / strength``, which at 1e4 /
    1e-4 in float32 leaves ranks off by several positions (a tied block is
    exactly ``mean_B(rho)`` here). ``d`` is exactly 0 at a block's first entry,
    infinite ones included, so a one-entry block is exactly its hard rank ``rho``.
    """
    d = xp.where(starts, 0.0, s - isotonic.block_first(xp, adapter, starts, s))
    shape = d if regularization == "l2" else xp.exp(d)
    stacked = xp.stack([xp.ones_like(s), xp.broadcast_to(rho, s.shape), shape])
    sums = isotonic.block_sums(xp, adapter, starts, stacked)
    count, total_rho, total = sums[0, ...], sums[1, ...], sums[2, ...]
    if regularization == "l2":
        return total_rho / count + (d - total / count), 1.0 / count
    share = shape / total
    return total_rho * share, share


def _block_average(xp: Any, adapter: Any, starts: Any, s: Any, g: Any, regularization: str) -> Any:
    """``sum_B g`` weighted by each entry's share of its block: ``1 / |B|`` (l2) or ``softmax(s_B)`` (kl; s decreasing)."""
    # the block's first entry is its largest: exp(s - s_first) lies in (0, 1]
    w = xp.ones_like(s) if regularization == "l2" else xp.exp(s - isotonic.block_first(xp, adapter, starts, s))
    total = isotonic.block_sums(xp, adapter, starts, xp.stack([w, g]))  # one segmented sum for both
    return w * (total[1, ...] / total[0, ...])


def _homogeneity(params: dict[str, Any], opts: Any) -> tuple[int, int] | None:
    """``(p, k)`` of :mod:`.tempered`: ranks see ``x / eps``; the l2 sort is jointly homogeneous; the KL sort is neither."""
    if params["output"] == "rank":
        return -1, 0
    return (1, -1) if opts.regularization == "l2" else None


@core(output_shapes=same_shape)
@tempered("strength", _homogeneity)
def projection_core(xp: Any, x: Any, opts: Any, *, output: str, descending: bool) -> Any:
    """Soft rank or sort by projection onto the permutahedron, with the block-wise backward rule."""
    if is_array(opts.strength):  # the KL sort (_homogeneity): the strength travels with x and gets its own gradient
        spec = _Projection(output, opts.regularization, None, descending)
        return custom_backward(xp, spec.fwd, spec.bwd, (x, xp.astype(opts.strength, x.dtype)), names=("x", "strength"))
    spec = _Projection(output, opts.regularization, opts.strength, descending)
    return custom_backward(xp, spec.fwd, spec.bwd, (x,))
