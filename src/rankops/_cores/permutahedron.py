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

from .._lib._adapters import core, get_adapter, rebuilt, same_shape
from .._lib._compat import index_dtype, is_array, device as _device
from .._lib._numerics import exact_centre, safe_divide
from . import isotonic, masked, pnorm
from .block_values import sorted_values
from .finite import finite_rows
from .power_sums import stepped_mean
from .softness import output_is_sort, softened
from .tempered import tempered

__all__ = ["projection_core", "topk_core", "softness_key"]


def _rho(xp: Any, like: Any) -> Any:
    n = like.shape[-1]
    return xp.arange(n, 0, -1, dtype=like.dtype, device=_device(like))


@dataclasses.dataclass(frozen=True)
class _Projection:
    output: str  # "rank" or "sort"
    regularization: str
    strength: float | None  # None: an array, the forward's second argument (the KL sort only)
    descending: bool
    masked: bool = False  # a mask is the forward's last argument
    ordered: bool = False  # the row's order as the projection sorts it (z descending, below) comes before the mask
    q: float = 2.0  # regularization="lp": the conjugate exponent p / (p - 1) (:mod:`.pnorm`)

    def fwd(self, xp: Any, x: Any, *rest: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        adapter = get_adapter(xp)
        strength_array, order, mask = masked.trailing(rest, self.ordered, self.masked)
        strength = strength_array[0] if strength_array else self.strength
        z = -x if self.descending != (self.output == "sort") else x  # sorted as the rank's z / strength sorts
        if mask is None:
            s, order = masked.sorted_rows(xp, adapter, z, order, descending=True)
            rho, weight = _rho(xp, x), None
        else:
            # The valid entries sort first with rho = (n_v, ..., 1); the masked tail has weight 0
            # (l2), or no term in the KL objective (value -inf, log-weight 0): its fit is free, and
            # the valid entries' fit is theirs alone.
            row = masked.valid_first(xp, adapter, z, mask, descending=True, order=order)
            s, order = row.s, row.order
            k = xp.arange(x.shape[-1], dtype=row.count.dtype, device=_device(x))
            rho = xp.astype(xp.clip(row.count - k, 0, None), x.dtype)
            weight = xp.astype(row.valid, x.dtype)
        if self.output == "rank" and (self.strength != 1.0 or self.regularization != "l2"):
            # the rank is invariant under a shift of the row: from its midrange where that is exact (the masked tail
            # holds the last valid entry), before the division, which would round each entry of a row far from 0
            # by a unit in the last place of z (float32 ranks of 1000 + normal noise at strength 1e-3: 0.05 off). A
            # strength of 1 divides nothing (the softness layer's and an array strength's: they scaled the row), but
            # the KL's pooled values are log-sums of the row itself, which round at its size (1000 + normal noise,
            # n = 3 x 10^4, strength 1: 1.5 ranks off), as do the p-norm's where its blocks' roots take Newton's steps
            # on power sums (p = 1.2, 1000 + normal noise, n = 10^5, strength 1, float32: 5.3 ranks off)
            s = s - exact_centre(xp, s[..., -1:], s[..., :1])
            s = s / self.strength if self.strength != 1.0 else s
        inverse = adapter.invert_permutation(xp, order)
        if self.regularization == "lp":
            valid = None if weight is None else weight > 0
            if self.output == "rank":
                mu, share, starts = pnorm.project(xp, adapter, s, rho, self.q, valid)
                value = adapter.take(xp, mu, inverse)
            else:  # rho / strength projected onto the permutahedron of the sorted row: weights of either sign
                mu, share, starts = _signed_projection(xp, adapter, rho, s, strength, self.q, valid)
                value = mu if self.descending else -mu
            return (value,), self._saved(s, starts, order, inverse, value, share, rho, strength_array)
        # On a one-entry block the projection is the hard value, and it comes out exactly:
        # s - iso(s - rho) would cancel to 0 for entries of 1e30, rho/eps - iso(rho/eps - s)
        # lose s under rho/eps in float32. The rank is written on s - s_first (_pooled_ranks:
        # rho on a one-entry block, bit-equal on tied entries), the sort as (sol - y) - s.
        if self.output == "sort":
            w = rho / strength
            y = w - s  # both fits hold w - s on one-entry blocks: only their blocks are used (.block_values)
        if self.output == "rank" and self.regularization == "l2":
            # only the blocks of sol are used: those of the decreasing fit of s - rho are the
            # increasing fit's of rho - s (the fit negated)
            sol = isotonic.fit(xp, adapter, rho - s, weight)
        elif self.output == "rank":
            log_rho = xp.log(rho if weight is None else xp.where(weight > 0, rho, xp.ones_like(rho)))
            sol = isotonic.decreasing(xp, adapter, *_kl_terms(xp, s, log_rho, weight), "kl")
        elif self.regularization == "l2":
            sol = isotonic.decreasing(xp, adapter, y, weight, chains=True)
        else:
            sol = isotonic.decreasing(xp, adapter, *_kl_terms(xp, w, s, weight), "kl")
        starts = isotonic.block_starts(xp, sol)
        if self.output == "rank":
            ranks, share = _pooled_ranks(xp, adapter, starts, s, rho, self.regularization, weight)
            value = adapter.take(xp, ranks, inverse)
        else:
            value, joined = sorted_values(xp, adapter, starts, sol, y, s, rho, strength, self.regularization, weight)
            # the KL's backward averages over the blocks its values were written on: its fit's logs round one block into
            # runs 1 ulp apart. The l2 fit's runs that close may be two blocks (a row of 10^4 at the default softness)
            starts = joined if self.regularization == "kl" else starts
            value = value if self.descending else -value
        # the rank's backward needs each entry's share of its block, which the forward has at hand
        share = share if self.output == "rank" else None
        return (value,), self._saved(s, starts, order, inverse, value, share, rho, strength_array)

    def _saved(self, s: Any, starts: Any, order: Any, inverse: Any, value: Any, share: Any, rho: Any,
               strength_array: tuple[Any, ...]) -> tuple[Any, ...]:
        """The residuals, always these eight: ``rho`` only with a mask (it then holds the valid counts), the
        strength only where it is an array (None else)."""
        return s, starts, order, inverse, value, share, rho if self.masked else None, strength_array[0] if strength_array else None

    def bwd(self, xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        grads = self._grads(xp, res, cts[0])
        return (*grads, *masked.trailing_grads(self.ordered, self.masked))

    def _grads(self, xp: Any, res: tuple[Any, ...], ct: Any) -> tuple[Any, ...]:
        s, starts, order, inverse, value, share, rho, eps = res
        if ct is None:  # torch: the output was not used
            return (None,) * (1 + (eps is not None))
        weight = None if rho is None else xp.astype(rho > 0, s.dtype)
        adapter = get_adapter(xp)
        ct = xp.astype(ct, s.dtype, copy=False)
        if self.output == "rank":
            if self.regularization == "lp":  # through (s - sol)^(q - 1)
                g = ct * pnorm.slope(xp, value, self.q)
            else:
                g = ct * value if self.regularization == "kl" else ct  # through exp(s - sol)
            g = adapter.take(xp, g, order)
            g = g - share * isotonic.block_sums(xp, adapter, starts, g)
            sign = -1.0 if self.descending else 1.0
            return (adapter.take(xp, g, inverse) * (sign / self.strength),)
        if self.regularization == "lp":  # d mu_i / d s_j = share_i on a block: the cotangent's share-weighted block sums
            return (adapter.take(xp, isotonic.block_sums(xp, adapter, starts, ct * share), inverse),)
        # sort: d value / d s is the block average, and s = sort(-+x) undoes the sign
        dx = adapter.take(xp, _block_average(xp, adapter, starts, s, ct, self.regularization, weight), inverse)
        if eps is None:
            return (dx,)
        # The KL sort's value is sol - w, w = rho / eps, sol_B = LSE(w_B) - LSE(s_B): d value_i / d eps
        # = -(softmax(w_B) . rho_B - rho_i) / eps**2 (ascending; negated descending), whose transpose
        # spreads each block's cotangent total by softmax(w_B): the block average of the forward's backward
        rho = _rho(xp, s) if rho is None else rho
        spread = _block_average(xp, adapter, starts, xp.broadcast_to(rho / eps, s.shape), ct, "kl", weight)
        d_eps = -xp.sum((spread - ct) * rho) / (eps * eps)
        return dx, -d_eps if self.descending else d_eps


def _signed_projection(xp: Any, adapter: Any, rho: Any, s: Any, strength: float, q: float, valid: Any) -> tuple[Any, Any, Any]:
    """:func:`.pnorm.project` of ``rho / strength`` onto the permutahedron of ``s`` (signed), by its homogeneity
    ``P(c z, c^(q-1) w) = c^(q-1) P(z, w)``: for ``strength = 2^e r`` (r in [1, 2)), ``P(rho / 2^e, s r^(q-1)) /
    r^(q-1)`` (the same shares and blocks). ``rho / 2^e`` is exact where ``rho / strength`` rounds every rank, and a
    long row's differences of ranks with it: in float32 at n = 3 x 10^4 and strength 10, by 1e-3 of themselves, and
    the first values of the sort by 2e-4. ``strength`` is a number: an array one reaches this sort at 1, by the same
    homogeneity (:func:`_homogeneity`)."""
    r, e = math.frexp(strength)  # r in [1/2, 1): a power of two (r = 1/2) scales nothing
    scale = (2.0 * r) ** (q - 1.0)
    mu, share, starts = pnorm.project(xp, adapter, rho * 2.0 ** (1 - e), s * scale if scale != 1.0 else s, q, valid, signed=True)
    return (mu / scale if scale != 1.0 else mu), share, starts


def _kl_terms(xp: Any, y: Any, log_w: Any, weight: Any) -> tuple[Any, Any]:
    """A KL fit's ``(y, log w)`` with the masked entries (``weight`` 0) out of the objective: value -inf, log-weight 0.

    Their terms ``exp(y - v)`` vanish and their fit sits at -inf, last in the
    decreasing order: it never pools with a valid entry, nor moves one.
    """
    if weight is None:
        return y, log_w
    valid = weight > 0
    return xp.where(valid, y, -math.inf), xp.where(valid, log_w, xp.zeros_like(log_w))


def _pooled_ranks(xp: Any, adapter: Any, starts: Any, s: Any, rho: Any, regularization: str, weight: Any = None) -> tuple[Any, Any]:
    """The rank projection on each block: ``mean_B(rho) + s - mean_B(s)`` (l2), ``sum_B(rho) softmax_B(s)`` (kl),
    and each entry's share of its block, the Jacobian's weights (``1 / |B|``, ``softmax_B(s)``).

    These equal ``s - iso(s - rho)`` and ``exp(s - iso_kl(s, log rho))``, but
    are written on ``d = s - s_first`` (the block's largest entry): the direct
    forms subtract two numbers of the size of ``x / strength``, which at 1e4 /
    1e-4 in float32 leaves ranks off by several positions (a tied block is
    exactly ``mean_B(rho)`` here). ``d`` is exactly 0 at a block's first entry,
    infinite ones included, so a one-entry block is exactly its hard rank ``rho``.
    ``weight``: 0 on a masked tail, which may share the last valid block
    (rho is 0 there) and counts in no sum; its share is 0.
    """
    # rho steps down by one over a block's valid entries, which come first: its block means in closed form, exact
    # where a running sum of ranks above 2^24 rounds (torch's and JAX's scatter-adds add one entry at a time)
    first = isotonic.block_first(xp, adapter, starts, xp.stack([s, xp.broadcast_to(rho, s.shape)]))
    d = xp.where(starts, 0.0, s - first[0, ...])
    shape = d if regularization == "l2" else xp.exp(d)
    if weight is not None:
        shape = shape * weight
    # kl: a soft block's ranks are its total's shares, and a scatter-add's error grows with the block's length (l2's
    # totals of d = s - s_first are of the spread's size: within float32 units of NumPy's at n = 10^5)
    sums = isotonic.block_sums(xp, adapter, starts, xp.stack([xp.ones_like(s) if weight is None else weight, shape]),
                               precise=regularization == "kl")
    count, total = sums[0, ...], sums[1, ...]
    mean_rho = stepped_mean(first[1, ...], count, -1.0)
    if weight is not None:
        mean_rho = xp.where(count > 0, mean_rho, 0.0)  # a block of masked entries only: no ranks
    if regularization == "l2":
        if weight is None:
            return mean_rho + (d - total / count), 1.0 / count
        inv = safe_divide(xp, xp.ones_like(count), count)  # 0 on a block of masked entries only
        return mean_rho + (d - total * inv), weight * inv
    share = shape / total if weight is None else safe_divide(xp, shape, total)
    return (count * mean_rho) * share, share


def _block_average(xp: Any, adapter: Any, starts: Any, s: Any, g: Any, regularization: str, weight: Any = None) -> Any:
    """``sum_B g`` weighted by each entry's share of its block: ``1 / |B|`` (l2) or ``softmax(s_B)`` (kl; s decreasing).

    ``weight``: 0 on a masked tail, which then has no share (and ``g`` is 0 there).
    """
    # the block's first entry is its largest: exp(s - s_first) lies in (0, 1]
    w = xp.ones_like(s) if regularization == "l2" else xp.exp(s - isotonic.block_first(xp, adapter, starts, s))
    if weight is not None:
        w = w * weight
    # the shares first, then the cotangent's sums: an expression linear in g alone, which JAX transposes (forward mode)
    total = isotonic.block_sums(xp, adapter, starts, w)
    share = w / total if weight is None else safe_divide(xp, w, total)
    return share * isotonic.block_sums(xp, adapter, starts, g)


def _homogeneity(params: dict[str, Any], opts: Any) -> tuple[float, float] | None:
    """``(p, k)`` of :mod:`.tempered`: ranks see ``x / eps``; the l2 sort is jointly homogeneous, and the p-norm sort
    too, in ``x eps^(q-1)`` (``mu = (z - v)^(q-1)``: ``P(rho / eps, x) = eps^(1-q) P(rho, x eps^(q-1))``); the KL sort
    is neither."""
    if params["output"] == "rank":
        return -1, 0
    if opts.regularization == "lp":
        e = pnorm.exponent(opts.p) - 1.0
        return e, -e
    return (1, -1) if opts.regularization == "l2" else None


def softness_key(regularization: str, p: float, output: str = "rank") -> str:
    """The softness calibration of the regularizer; the p-norm's by its conjugate exponent q (q = 2 is ``"l2"``).

    The soft sort has tables of its own: its strength is not a length of x
    (the l2 sort at strength e is ``t sort(x / t)`` at unit strength only
    for ``t = 1 / e``), so the length that gives it a blur of s places falls
    as s grows, where a rank's rises.
    """
    family = "permutahedron-" if output != "sort" else "permutahedron-sort-"
    if regularization != "lp":
        return family + regularization
    q = pnorm.exponent(p)
    return family + ("l2" if q == 2.0 else f"lp-{q!r}")


def _softness_key(opts: Any, params: dict[str, Any]) -> str:
    return softness_key(opts.regularization, opts.p, params.get("output", "rank"))


@core(output_shapes=same_shape, batched={"mask": (0,)})
@masked.zeros_masked_input
@finite_rows
@softened(_softness_key, output_is_sort,
          lambda opts, params: -1 if (params["output"] == "rank") != params["descending"] else 1,
          lambda opts, params: params["output"] == "rank" or opts.regularization != "lp")  # the p-norm sort moves with x
@tempered("strength", _homogeneity)
def projection_core(xp: Any, x: Any, opts: Any, *, output: str, descending: bool, mask: Any = None, order: Any = None) -> Any:
    """Soft rank or sort by projection onto the permutahedron, with the block-wise backward rule.

    ``mask``: the projection of each row's valid entries alone (rho = (n_v, ..., 1)); ``order``: the row's, from
    :mod:`.softness`.
    """
    # an array strength is the KL sort's (_homogeneity): it travels with x and gets its own gradient
    strength = is_array(opts.strength)
    ordered = order is not None
    spec = _Projection(output, opts.regularization, None if strength else opts.strength, descending, mask is not None, ordered, pnorm.exponent_of(opts))
    arrays = (x, *((xp.astype(opts.strength, x.dtype),) if strength else ()), *(order,) * ordered)
    names = ("x", *("strength",) * strength, *("order",) * ordered)
    return masked.backward(xp, spec.fwd, spec.bwd, arrays, names, mask, positional=output == "sort", residuals=rebuilt(spec.fwd))


# -- soft_topk_mask(method="permutahedron"): the top-k polytope -----------------------------------------------


@dataclasses.dataclass(frozen=True)
class _TopK:
    """The projection onto the top-k polytope ``P((1, ..., 1, k - floor k, 0, ..., 0))`` of ``x / strength``.

    ``{mu in [0, 1]^n : sum mu = k}`` (the capped simplex) is the
    permutahedron of ``w_j = clip(k - j, 0, 1)``, j = 0..n-1: :mod:`.pnorm`'s
    projection with ``q`` (2: l2). Its one-entry blocks hold ``w_j``
    exactly: the mask's zeros and ones.
    """

    strength: float
    k: Any  # a Python number, or None when k is an array argument
    q: float
    masked: bool = False
    ordered: bool = False

    def fwd(self, xp: Any, x: Any, *rest: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        adapter = get_adapter(xp)
        k_array, order, mask = masked.trailing(rest, self.ordered, self.masked)
        n = x.shape[-1]
        # sorted as x / strength sorts (strength > 0)
        if mask is None:
            s, order = masked.sorted_rows(xp, adapter, x, order, descending=True)
            valid, count = None, n
        else:
            row = masked.valid_first(xp, adapter, x, mask, descending=True, order=order)
            s, order, valid, count = row.s, row.order, row.valid, xp.astype(row.count, x.dtype)
        k, outside = masked.row_k(xp, x, k_array, self.k, count)
        # from the row's ceil(k)-th largest entry, before the division: the threshold lies within 1 below it
        # (pnorm.capped), so the entries that blend keep their differences to a unit in their own last place
        s = (s - masked.kth_largest(xp, adapter, s, k, count, descending=True)) / self.strength
        mu, share, starts = pnorm.capped(xp, adapter, s, k, self.q, valid)
        inverse = adapter.invert_permutation(xp, order)
        value = xp.where(outside, math.nan, adapter.take(xp, mu, inverse))
        # the position whose weight k moves (k - floor k on it): the k-gradient is its block's
        at = xp.astype(adapter.clip(xp, xp.floor(k), 0, n - 1), index_dtype(xp, _device(x)))
        return (value,), (starts, order, inverse, xp.where(outside, 0.0, value), share, at, outside)

    def bwd(self, xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        (ct,) = cts
        none = masked.trailing_grads(self.ordered, self.masked)
        if ct is None:  # torch: the output unused
            return (None,) * (1 + (self.k is None)) + none
        starts, order, inverse, value, share, at, outside = res
        adapter = get_adapter(xp)
        ct = xp.where(outside, 0.0, xp.astype(ct, value.dtype, copy=False))  # a NaN row's: gradient 0
        g = adapter.take(xp, ct * pnorm.slope(xp, value, self.q), order)
        g = g - share * isotonic.block_sums(xp, adapter, starts, g)
        dx = adapter.take(xp, g, inverse) / self.strength
        if self.k is not None:  # a Python k: no gradient of its own
            return (dx,) + none
        # d mu_i / d W_B = share_i on the block B that holds position floor(k)
        spread = isotonic.block_sums(xp, adapter, starts, adapter.take(xp, ct, order) * share)
        return (dx, adapter.take(xp, spread, at)[..., 0]) + none


@core(output_shapes=same_shape, batched={"k": (), "mask": (0,)})
@masked.zeros_masked_input
@finite_rows
@softened(_softness_key, lambda opts, params: False, lambda opts, params: -1, top=lambda params: params["k"])
@tempered("strength", lambda params, opts: (-1, 0))
def topk_core(xp: Any, x: Any, opts: Any, *, k: Any, mask: Any = None, order: Any = None) -> Any:
    """The sparse top-k mask: the projection of ``x / strength`` onto the top-k polytope (l2 or p-norm regularized);
    ``mask``: the top k of the valid entries (a row with fewer than k is NaN)."""
    spec = _TopK(opts.strength, None if is_array(k) else k, pnorm.exponent_of(opts), mask is not None, order is not None)
    ordered = () if order is None else (order,)
    arrays = (x, *((k,) if is_array(k) else ()), *ordered)
    names = ("x", *(("k",) if is_array(k) else ()), *("order",) * len(ordered))
    (value,), back = masked.backward(xp, spec.fwd, spec.bwd, arrays, names, mask, residuals=rebuilt(spec.fwd))
    return (value if mask is None else masked.short_rows(xp, value, mask, k),), back
