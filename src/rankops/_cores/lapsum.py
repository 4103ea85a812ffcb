r"""Soft rank, sort and top-k from sums of Laplace CDFs (after Struski et al. 2025, "LapSum").

With ``F`` the standard Laplace CDF (``F(u) = exp(u)/2`` for ``u < 0``,
``1 - exp(-u)/2`` for ``u >= 0``), its density ``f(u) = exp(-|u|)/2`` and the
scale ``alpha``, each row defines the increasing function

    R(t) = sum_j F((t - x_j) / alpha),   from 0 (t -> -inf) to n (t -> inf),

and:

- soft rank ``r_i = 1/2 + R(x_i)`` (hard limit: ``rankdata``, ties averaged);
- soft sort: the i-th value is the ``t`` with ``R(t) = i - 1/2``;
- top-k mask ``m_i = F((x_i - b) / alpha)`` with ``R(b) = n - k``, so that
  ``sum_i m_i = k`` for any real k in (0, n).

After one sort, ``R`` at every point is two sums of exponentials of sorted
gaps, written as the scans ``P_k = 1 + a_(k-1) P_(k-1)`` and
``Q_k = a_k (1 + Q_(k+1))`` with ``a_k = exp(-(x_(k+1) - x_k) / alpha)
<= 1``: no overflow at any scale, no cancellation. On the segment
``[x_k, x_(k+1)]`` that brackets a level c, ``R(t) = c`` is a quadratic in
``z = exp((t - x_k) / alpha)``, ``(Q/2) z^2 + (k - c) z - P/2 = 0``, solved
in the form that does not cancel. Gradients are closed-form and O(n):

- rank: ``dx_k = (g_k D_k - K_k) / alpha`` with ``D``, ``K`` kernel sums
  ``sum_j f((x_k - x_j)/alpha)`` of 1 and of the cotangent;
- sort (implicit function): row i of the Jacobian is ``f((t_i - x_j)/alpha)``
  normalised over j; the transpose is one more pair of scans, over the
  sorted outputs;
- top-k: ``dx_j = f_j (g_j - sum_i g_i f_i / sum_i f_i) / alpha`` with
  ``f_i = f((x_i - b)/alpha)``, and ``dk = sum_i g_i f_i / sum_i f_i``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._lib._adapters import core, get_adapter, rebuilt, same_shape
from .._lib._compat import index_dtype, is_array, device as _device
from .._lib._numerics import logaddexp, safe_divide
from . import masked
from .finite import finite_rows
from .softness import softened
from .tempered import tempered

__all__ = ["rank_core", "sort_core", "topk_core"]


def _decay(xp: Any, s: Any, alpha: float) -> Any:
    """``a_k = exp(-(s_(k+1) - s_k) / alpha)`` for an increasing row: the link between neighbours (n - 1 of them)."""
    return xp.exp((s[..., :-1] - s[..., 1:]) / alpha)


def _links(xp: Any, a: Any) -> Any:
    """The links of :func:`_both_ways`' two scans: ``a``, and ``a`` reversed for the scan from the end."""
    return xp.stack([a, xp.flip(a, axis=-1)])


def _both_ways(xp: Any, adapter: Any, links: Any, c: Any, *, stacked: bool = False) -> tuple[Any, Any]:
    """``(sum_(j<=k) c_j e^-(s_k - s_j)/alpha, sum_(j>=k) c_j e^-(s_j - s_k)/alpha)`` for each k, from :func:`_links`.

    Both directions are one scan of two stacked rows, the second one reversed
    (half the steps); ``stacked``: ``c`` is that pair already (all ones: ``(P, 1 + Q)``).
    """
    # the stacked pair is new here (or the caller's own ones): the scan may run in it
    h = adapter.linear_scan(xp, links, c if stacked else xp.stack([c, xp.flip(c, axis=-1)]), overwrite_b=True)
    return h[0, ...], xp.flip(h[1, ...], axis=-1)


@dataclasses.dataclass(frozen=True)
class _Sorted:
    """A row sorted ascending, with what every LapSum quantity is built from."""

    s: Any  # sorted entries
    order: Any  # s = x[order]
    inverse: Any  # x = s[inverse]
    links: Any  # between neighbours, for both directions (_links; readied by scan_links when rescanned)
    p: Any  # P_k = sum_(j<=k) e^-(s_k - s_j)/alpha, in [1, k]
    q1: Any  # 1 + Q_k = sum_(j>=k) e^-(s_j - s_k)/alpha, in [1, n - k]
    count: Any = None  # with a mask: the row's n_v valid entries, sorted first (masked.valid_first)

    @classmethod
    def of(cls, xp: Any, x: Any, alpha: float, *, rescanned: bool = False, mask: Any = None, order: Any = None) -> "_Sorted":
        """``rescanned``: the backward scans the same links again (the rank), so the backend may ready them for that.

        ``mask``: the sums run over the valid entries only, which sort first;
        the masked tail carries weight 0 (and ``R`` there stays at the last
        valid entry's level, so the levels still increase). ``order``: the
        row's sorting order, known already (:mod:`.softness` sorted the row).
        """
        adapter = get_adapter(xp)
        if mask is None:
            (s, order), count = masked.sorted_rows(xp, adapter, x, order), None
            weight = xp.ones((2,) + s.shape, dtype=s.dtype, device=_device(s))
        else:
            row = masked.valid_first(xp, adapter, x, mask, order=order)
            s, order, count = row.s, row.order, row.count
            weight = xp.astype(row.valid, s.dtype)
            weight = xp.stack([weight, xp.flip(weight, axis=-1)])
        links = _links(xp, _decay(xp, s, alpha))
        if rescanned:
            links = adapter.scan_links(xp, links)
        p, q1 = _both_ways(xp, adapter, links, weight, stacked=True)
        return cls(s, order, adapter.invert_permutation(xp, order), links, p, q1, count)

    def levels(self, xp: Any, shift: float = 0.0) -> Any:
        """``R`` at the sorted entries plus ``shift``: ``R(s_k) = (k + 1) - P_k/2 + Q_k/2`` (k 0-based; k + 1/2 in the hard limit).

        With a mask, ``k + 1/2`` is the count of valid entries below plus half
        the own weight: ``min(k + 1/2, n_v)``.
        """
        k = xp.arange(0.5 + shift, self.s.shape[-1] + shift, dtype=self.s.dtype, device=_device(self.s))
        if self.count is not None:
            k = xp.minimum(k, xp.astype(self.count, k.dtype) + shift)
        return k + 0.5 * (self.q1 - self.p)

    def below(self, xp: Any, count: Any) -> Any:
        """``count`` (#levels at most c) capped at the valid entries: the masked tail shares the last valid level."""
        return count if self.count is None else xp.minimum(count, self.count)

    def solve(self, xp: Any, c: Any, count: Any, alpha: float) -> tuple[Any, Any, Any]:
        """``(anchor, lam, D)``: ``t = anchor + alpha lam`` solves ``R(t) = c``, and ``D = sum_j e^-|t - s_j|/alpha``.

        ``count`` = #{k: R(s_k) <= c}, so ``t`` lies in the gap ``[s_lo,
        s_hi]`` of width ``g`` between entries ``count - 1`` and ``count``
        (a half-line at either end), where ``R(t) = count - (A h / 2) / zeta
        + (B h / 2) zeta`` with ``A = P_lo`` the kernel sum at and below
        ``s_lo``, ``B = 1 + Q_hi`` at and above ``s_hi``, ``h = exp(-g /
        (2 alpha))`` and ``zeta = exp((t - mid) / alpha)`` about the gap's
        midpoint. With ``b = count - c``, the root is solved in logs (``log h
        = -g / (2 alpha)`` never underflows) and in the form that does not
        cancel: ``zeta = A h / (b + r)`` for ``b >= 0``, ``(|b| + r) / (B h)``
        otherwise, ``r = sqrt(b^2 + A B h^2)``. The root is returned from the
        gap's end it lies in the half of (``s_lo`` for ``b >= 0``): there
        ``lam = log A - log(b + r)`` (``log(|b| + r) - log B`` from ``s_hi``)
        is moderate, where an offset from the midpoint, ``g / (2 alpha)``,
        would cancel in float32 once the gap is 1e7 alphas wide.
        """
        n = self.s.shape[-1]
        take, clip = get_adapter(xp).take, get_adapter(xp).clip
        lo, hi = clip(xp, count - 1, 0, n - 1), clip(xp, count, 0, n - 1)
        s_lo, s_hi = take(xp, self.s, lo), take(xp, self.s, hi)
        zero = xp.zeros_like(s_lo)
        big_a = xp.where(count >= 1, take(xp, self.p, lo), zero)
        big_b = xp.where(count <= n - 1, take(xp, self.q1, hi), zero)
        log_h = -(s_hi - s_lo) / (2.0 * alpha)  # 0 at the ends, where lo == hi
        b = xp.astype(count, c.dtype) - c
        log_a, log_b, log_abs_b = _log(xp, big_a), _log(xp, big_b), _log(xp, xp.abs(b))
        log_r = 0.5 * logaddexp(xp, 2.0 * log_abs_b, log_a + log_b + 2.0 * log_h)
        log_sum = logaddexp(xp, log_abs_b, log_r)  # log(|b| + r)
        if self.count is not None:
            # -inf only where c = count with nothing on one side, no root: a row without valid entries (no -inf - -inf)
            log_sum = xp.where(log_sum == -math.inf, xp.zeros_like(log_sum), log_sum)
        left = b >= 0
        lam = xp.where(left, log_a - log_sum, log_sum - log_b)
        # distances from t to s_lo and s_hi, in alphas: (lam, 2 g - lam) or (2 g + lam, -lam), g = -log h
        to_lo = xp.where(left, lam, lam - 2.0 * log_h)
        to_hi = xp.where(left, -2.0 * log_h - lam, -lam)
        dens = _weighted_exp(xp, big_a, log_a, to_lo) + _weighted_exp(xp, big_b, log_b, to_hi)
        return xp.where(left, s_lo, s_hi), lam, dens


def _weighted_exp(xp: Any, weight: Any, log_weight: Any, distance: Any) -> Any:
    """``weight * exp(-distance)``, 0 for a zero weight whatever the distance (no -inf + inf)."""
    some = weight > 0
    zero = xp.zeros_like(weight)
    return xp.where(some, xp.exp(xp.where(some, log_weight, zero) - xp.where(some, distance, zero)), zero)


def _log(xp: Any, a: Any) -> Any:
    """``log(a)`` for ``a >= 0``, -inf at 0 without NumPy's divide-by-zero warning (NaN stays NaN)."""
    zero = a == 0
    return xp.where(zero, xp.full_like(a, -math.inf), xp.log(xp.where(zero, xp.ones_like(a), a)))


@dataclasses.dataclass(frozen=True)
class _Directed:
    """A rank or sort by Laplace sums: the CDFs' scale and the direction."""

    alpha: float
    descending: bool
    masked: bool = False  # a mask is the forward's last argument; the sort count its last residual
    ordered: bool = False  # the row's order (ascending, of -x when descending) comes before the mask (masked.trailing)

    def sorted(self, xp: Any, x: Any, rest: tuple[Any, ...], *, rescanned: bool = False) -> _Sorted:
        _, order, mask = masked.trailing(rest, self.ordered, self.masked)
        return _Sorted.of(xp, -x if self.descending else x, self.alpha, rescanned=rescanned, mask=mask, order=order)

    def bwd(self, xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        (ct,) = cts
        if self.masked:
            res = res[:-1]
        dx = None if ct is None else self.pull(xp, get_adapter(xp), res, ct)  # None: torch, the output unused
        return (dx,) + masked.trailing_grads(self.ordered, self.masked)

    def pull(self, xp: Any, adapter: Any, res: tuple[Any, ...], ct: Any) -> Any:
        """``dx`` from the forward's residuals and the output's cotangent."""
        raise NotImplementedError


class _Rank(_Directed):
    def fwd(self, xp: Any, x: Any, *rest: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        srt = self.sorted(xp, x, rest, rescanned=True)
        # the backward's kernel sums of 1 are the forward's P + 1 + Q: kept, not rescanned
        value = get_adapter(xp).take(xp, srt.levels(xp, 0.5), srt.inverse)
        return (value,), (srt.order, srt.inverse, srt.links, srt.p + srt.q1, *(srt.count,) * self.masked)

    def pull(self, xp: Any, adapter: Any, res: tuple[Any, ...], ct: Any) -> Any:
        order, inverse, links, ones = res
        # with a mask: ones holds the kernel sums of the valid entries, and ct is 0 on the masked ones
        g = adapter.take(xp, xp.astype(ct, ones.dtype, copy=False), order)
        pg, qg = _both_ways(xp, adapter, links, g)
        # sum_j f(s_k - s_j) (g_k - g_j) / alpha, with f = e^-|u|/2: both sums hold the own-index term, which cancels
        dx = adapter.take(xp, (g * ones - (pg + qg)) / (2.0 * self.alpha), inverse)
        return -dx if self.descending else dx


class _Sort(_Directed):
    def fwd(self, xp: Any, x: Any, *rest: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        srt = self.sorted(xp, x, rest)
        n = x.shape[-1]
        c = xp.arange(n, dtype=x.dtype, device=_device(x)) + 0.5
        c = xp.broadcast_to(c, x.shape)
        adapter = get_adapter(xp)
        count = srt.below(xp, adapter.searchsorted(xp, srt.levels(xp), c, side="right"))
        anchor, lam, dens = srt.solve(xp, c, count, self.alpha)
        t = anchor + self.alpha * lam
        if srt.count is not None:
            # positions past the valid entries have no level to reach (t = inf there): they repeat
            # the last valid value, so that the backward's links stay finite (their cotangent is 0)
            valid = c < xp.astype(srt.count, c.dtype)
            t = xp.where(valid, t, masked.held_last(xp, adapter, t, srt.count))
        return ((-t if self.descending else t),), (srt.s, srt.inverse, t, dens, *(srt.count,) * self.masked)

    def pull(self, xp: Any, adapter: Any, res: tuple[Any, ...], ct: Any) -> Any:
        s, inverse, t, dens = res
        g = xp.astype(ct, s.dtype, copy=False)
        if self.descending:
            g = -g
        w = safe_divide(xp, g, dens)  # row i of the Jacobian, normalised: its weight on the kernel
        # sum_i w_i e^-|t_i - s_j|/alpha for every sorted entry s_j, by scans over the (increasing) t
        up, down = _both_ways(xp, adapter, _links(xp, _decay(xp, t, self.alpha)), w)
        n = t.shape[-1]
        m = adapter.searchsorted(xp, t, s, side="right")  # t[:m] <= s_j < t[m:]
        below, above = xp.clip(m - 1, 0, None), adapter.clip(xp, m, None, n - 1)
        zero = xp.zeros_like(s)
        take = adapter.take
        from_below = xp.where(m >= 1, xp.exp(-(s - take(xp, t, below)) / self.alpha) * take(xp, up, below), zero)
        from_above = xp.where(m < n, xp.exp(-(take(xp, t, above) - s) / self.alpha) * take(xp, down, above), zero)
        dx = take(xp, from_below + from_above, inverse)
        return -dx if self.descending else dx


@dataclasses.dataclass(frozen=True)
class _TopK:
    alpha: float
    k: Any  # a Python number, or None when k is an array argument
    masked: bool = False  # a mask is the last argument
    ordered: bool = False  # the row's ascending order comes before the mask (masked.trailing)

    def fwd(self, xp: Any, x: Any, *rest: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        k_array, order, mask = masked.trailing(rest, self.ordered, self.masked)
        srt = _Sorted.of(xp, x, self.alpha, mask=mask, order=order)
        if k_array:
            k = xp.astype(k_array[0], x.dtype)[..., None]
        else:
            k = xp.full(x.shape[:-1] + (1,), self.k, dtype=x.dtype, device=_device(x))
        n = x.shape[-1] if mask is None else xp.astype(srt.count, x.dtype)
        # k outside (0, n) (an array k, or n_v <= k with a mask): a NaN row, computed quietly at k = n/2
        outside = (k <= 0) | (k >= n)
        c = n - xp.where(outside, 0.5 * n, k)
        idx = index_dtype(xp, _device(x))
        count = srt.below(xp, xp.sum(xp.astype(srt.levels(xp) <= c, idx), axis=-1, keepdims=True))
        anchor, lam, _ = srt.solve(xp, c, count, self.alpha)
        # (x - b) / alpha from the anchor: b itself would round alpha lam away at |x| >> alpha
        u = (x - anchor) / self.alpha - lam
        e = 0.5 * xp.exp(-xp.abs(u))
        value = xp.where(outside, math.nan, xp.where(u < 0, e, 1.0 - e))
        f = xp.where(outside, math.nan, e / self.alpha)
        return (value,), ((f,) if mask is None else (xp.where(mask, f, xp.zeros_like(f)),))

    def bwd(self, xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        (ct,) = cts
        none = masked.trailing_grads(self.ordered, self.masked)
        if ct is None:  # torch: the output unused
            return (None,) * (1 + (self.k is None)) + none
        (f,) = res  # 0 on masked entries: the threshold sees the valid ones only
        g = xp.astype(ct, f.dtype, copy=False)
        mean = safe_divide(xp, xp.sum(g * f, axis=-1, keepdims=True), xp.sum(f, axis=-1, keepdims=True))
        dx = f * (g - mean)
        return ((dx, mean[..., 0]) if self.k is None else (dx,)) + none  # the k array's gradient too


def _run(xp: Any, spec: Any, x: Any, extra: tuple[Any, ...], order: Any, mask: Any, *, positional: bool = False) -> Any:
    """The spec through ``custom_backward``; with a mask, on the valid entries (``positional``: the sort's first n_v)."""
    ordered = () if order is None else (order,)
    names = ("x", "k")[: 1 + len(extra)] + ("order",) * len(ordered)
    return masked.backward(xp, spec.fwd, spec.bwd, (x, *extra, *ordered), names, mask, positional=positional,
                           residuals=rebuilt(spec.fwd))


def _softness_key(opts: Any, params: dict[str, Any]) -> str:
    return "lapsum"


def _sorts(opts: Any, params: dict[str, Any]) -> int:
    """How the rank and sort cores sort the row (:func:`.softness.softened`): ``-x`` ascending when descending."""
    return -1 if params["descending"] else 1


@core(output_shapes=same_shape, batched={"mask": (0,)})
@masked.zeros_masked_input
@finite_rows
@softened(_softness_key, lambda opts, params: False, _sorts)
@tempered("alpha", lambda params, opts: (-1, 0))
def rank_core(xp: Any, x: Any, opts: Any, *, descending: bool, mask: Any = None, order: Any = None) -> Any:
    """``1/2 + R(x_i)``; ``mask``: R sums over the valid entries; ``order``: the row's, from :mod:`.softness`."""
    return _run(xp, _Rank(opts.alpha, descending, mask is not None, order is not None), x, (), order, mask)


@core(output_shapes=same_shape, batched={"mask": (0,)})
@masked.zeros_masked_input
@finite_rows
@softened(_softness_key, lambda opts, params: True, _sorts)
@tempered("alpha", lambda params, opts: (-1, 1))
def sort_core(xp: Any, x: Any, opts: Any, *, descending: bool, mask: Any = None, order: Any = None) -> Any:
    """The solutions of ``R(t) = i - 1/2``; ``mask``: for i up to n_v, R over the valid entries."""
    return _run(xp, _Sort(opts.alpha, descending, mask is not None, order is not None), x, (), order, mask, positional=True)


@core(output_shapes=same_shape, batched={"k": (), "mask": (0,)})
@masked.zeros_masked_input
@finite_rows
@softened(_softness_key, lambda opts, params: False, lambda opts, params: 1, top=lambda params: params["k"])
@tempered("alpha", lambda params, opts: (-1, 0))
def topk_core(xp: Any, x: Any, opts: Any, *, k: Any, mask: Any = None, order: Any = None) -> Any:
    """``F((x_i - b)/alpha)`` with ``R(b) = n - k``; ``mask``: ``R(b) = n_v - k``, R over the valid entries
    (a row with n_v <= k is NaN throughout, masked entries included, as Sinkhorn's)."""
    spec = _TopK(opts.alpha, None if is_array(k) else k, mask is not None, order is not None)
    (value,), back = _run(xp, spec, x, (k,) if is_array(k) else (), order, mask)
    if mask is None:
        return (value,), back
    count = masked.valid_count(xp, x, mask)
    short = count <= (k[..., None] if is_array(k) else k)
    return (xp.where(short, math.nan, value),), back
