r"""Row-block kernels of SoftSort and NeuralSort: the logits of a block of rows of ``P``, and their backward.

Both relaxations map a score vector ``s`` of length n to an n x n unimodal
row-stochastic matrix ``P``, row i a softmax over the items for the i-th
position of the sorted order (Prillo & Eisenschlos 2020, Theorem 1). Row i
needs only its key and the whole of ``s``:

- SoftSort (Prillo & Eisenschlos 2020, Eq. 4): ``z_ij = -|s_[i] - s_j| ** p / tau``,
  keyed by ``s_[i]``, the i-th entry in sorted order (descending: largest
  first, the paper's convention);
- NeuralSort (Grover et al. 2019; Prillo & Eisenschlos 2020, Eq. 3):
  ``z_ij = (c_i s_j - R_j) / tau``, keyed by ``c_i = (n + 1 - 2 i)`` (negated
  for ascending order, which reverses the rows), with the row sums
  ``R_j = sum_k |s_j - s_k|`` formed once in O(n) memory instead of the
  O(n^3) product of the original code (SoftSort appendix A.4.5), and each
  row's logits relative to those of its own item (:class:`NeuralSortRows`).

A kernel gives the logits of any block of rows and, for a cotangent ``dz``
of those logits, the cotangents of the columns (``s``) and of an array
``tau`` / ``power``. The full matrix is one block of n rows; the streamed
sorts and ranks of :mod:`.permutation` walk the rows a block at a time.

With a ``mask`` (ragged rows), each row's matrix is that of its n_v valid
entries alone: the valid entries sort first (their rows are the first
n_v), the masked columns' logits are -inf (probability exactly 0; an array
tau's gradient reads them as 0), NeuralSort's ``c_i = n_v + 1 - 2 i`` and
``R_j`` sum over the valid entries, and the rows past n_v count for
nothing (``weights``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from .._lib._adapters import get_adapter
from .._lib._compat import is_array, device as _device
from .._lib._numerics import abs_power, abs_power_slope, matvec
from . import masked

__all__ = ["ROWS", "positions", "weights", "sort_order", "permutation_matrix", "exact"]


def positions(xp: Any, s: Any) -> Any:
    """``[1, 2, ..., n]`` in the dtype and on the device of ``s``."""
    return xp.arange(1, s.shape[-1] + 1, dtype=s.dtype, device=_device(s))


def sort_order(xp: Any, s: Any, descending: bool, mask: Any = None) -> tuple[Any, Any]:
    """``(sorted s, order)``: position i holds item ``order[i]`` (a stable sort); ``mask``: the valid entries first.
    The sorted values are the sort's own output (:func:`read_back` says why)."""
    if mask is not None:
        row = masked.valid_first(xp, get_adapter(xp), s, mask, descending=descending)
        return row.s, row.order
    return get_adapter(xp).sort_order(xp, s, descending=descending)


def read_back(xp: Any, srt: Any, inverse: Any, s: Any, mask: Any) -> Any:
    """``s`` itself, each entry read from its place in the sorted row ``srt`` (``inverse``: each item's place, the
    inverse of the sorting permutation); ``s`` as given with a ``mask``.

    The pullbacks take exact zeros from ``s_j - s_[i]`` where item j ties with the row's own item. Within one
    compiled program the two need not be the same rounding of one value: XLA (JAX) rewrites the softness's ``x / t``
    as ``x * (1 / t)`` and recomputes that product wherever ``s`` is read, fused with the subtraction into one
    multiply-add (own-item differences of 0.1 at ``|s| = 1e6`` in float32; NeuralSort's float32 sort gradient 0.4 of
    its size off at n = 2000, tied ranks 2.0). A sort's output is computed once, and a gather copies it."""
    return s if mask is not None else get_adapter(xp).take(xp, srt, inverse)


def _one_hot(xp: Any, order: Any, n: int, dtype: Any) -> Any:
    """Rows of 0/1 over n items: ``[i, j] = 1`` iff ``order[i] == j`` (for any block of rows)."""
    items = xp.arange(n, dtype=order.dtype, device=_device(order))
    return xp.astype(order[..., :, None] == items, dtype)


def permutation_matrix(xp: Any, s: Any, descending: bool, mask: Any = None) -> Any:
    """Exact permutation matrix: ``P[i, j] = 1`` iff item j is i-th in order (``mask``: the valid items first)."""
    return _one_hot(xp, sort_order(xp, s, descending, mask)[1], s.shape[-1], s.dtype)


def exact(xp: Any, s: Any, output: str, descending: bool, mask: Any = None) -> Any:
    """The exact sort, or the exact 1-based ranks, in O(n log n) (``mask``: of the valid entries, which sort first)."""
    s_sorted, order = sort_order(xp, s, descending, mask)
    return s_sorted if output == "sort" else xp.astype(get_adapter(xp).invert_permutation(xp, order), s.dtype) + 1


def weights(xp: Any, s: Any, mask: Any) -> Any:
    """Each row's weight in the ranks ``P^T w``: its 1-based position, 0 past a masked row's n_v valid entries."""
    w = positions(xp, s)
    return w if mask is None else xp.where(masked.prefix(xp, mask), w, xp.zeros_like(w))


def _lowest(xp: Any, z: Any, mask: Any) -> Any:
    """The logits with the masked columns at -inf: softmax weight exactly 0 (the lowest float would overflow
    in the softmax's ``z - max`` beside valid logits of 1e32). A row without a valid entry (NaN in the end)
    keeps its logits: a softmax of -inf alone would be 0/0."""
    if mask is None:
        return z
    kept = mask | ~xp.any(mask, axis=-1, keepdims=True)
    return xp.where(kept[..., None, :], z, -math.inf)


def _array_extras(**terms: tuple[Any, Callable[[], Any]]) -> dict[str, Any]:
    """Gradients of the array-valued hyper-parameters among ``terms`` (name: (value, its gradient)); numbers get none."""
    return {name: grad() for name, (value, grad) in terms.items() if is_array(value)}


def _two_part_cumsum(xp: Any, steps: Any) -> tuple[Any, Any]:
    """``H = [0, cumsum(steps)]`` along the last axis as ``high + low``: ``high`` the backend's cumulative sum,
    ``low`` the cumulative sum of each step's part that ``high`` rounded away, ``steps - diff(high)`` (two
    subtractions of nearby numbers, exact as a rule): ``high_b - high_a + (low_b - low_a)`` is then ``H_b - H_a`` to
    within a rounding of the difference itself, however large H is."""
    cumsum = get_adapter(xp).cumulative_sum
    zero = xp.zeros(steps.shape[:-1] + (1,), dtype=steps.dtype, device=_device(steps))
    high = xp.concat([zero, cumsum(xp, steps)], axis=-1)
    lost = steps - (high[..., 1:] - high[..., :-1])
    return high, xp.concat([zero, cumsum(xp, lost)], axis=-1)


class SoftSortRows:
    """Rows keyed by the sorted scores ``s_[i]``."""

    n_aux = 3  # sorted scores, the sorting permutation, the scores read back
    n_cols = 1  # column accumulators of the backward pass: ds

    def __init__(self, xp: Any, s: Any, tau: Any, aux: tuple[Any, ...], *, power: Any = 1.0, mask: Any = None, **_: Any) -> None:
        self.xp, self.tau, self.power, self.mask = xp, tau, power, mask
        self.keys, self.s = aux[:2], aux[2]  # row i: s_[i] and the item sorted there

    @staticmethod
    def aux(xp: Any, s: Any, *, descending: bool, mask: Any = None, **_: Any) -> tuple[Any, ...]:
        srt, order = sort_order(xp, s, descending, mask)
        return srt, order, read_back(xp, srt, get_adapter(xp).invert_permutation(xp, order), s, mask)

    @staticmethod
    def centre(keys: tuple[Any, ...]) -> Any:
        """Each row's own sorted score ``s_[i]``."""
        return keys[0]

    def _distance(self, s_block: Any) -> tuple[Any, Any, Any]:
        diff = s_block[..., :, None] - self.s[..., None, :]
        d = self.xp.abs(diff)
        return diff, d, abs_power(self.xp, d, self.power)

    def logits(self, keys: tuple[Any, ...]) -> tuple[Any, Any]:
        """The block's logits, and what their pullback reuses."""
        cache = self._distance(keys[0])
        return _lowest(self.xp, cache[2] * (-1.0 / self.tau), self.mask), cache

    def back(self, keys: tuple[Any, ...], dz: Any, z: Any, cache: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``dz -> ((ds,), {"tau": dtau, "power": dpower})`` (array hyper-parameters only)."""
        xp, tau, power = self.xp, self.tau, self.power
        unit_power = not is_array(power) and power == 1.0
        if cache is None:  # the matrix was kept: only what this pullback needs
            diff = keys[0][..., :, None] - self.s[..., None, :]
            cache = self._distance(keys[0]) if not unit_power or is_array(tau) else (diff, None, None)
        diff, d, dp = cache
        d_d = dz * (-1.0 / tau)
        if not unit_power:
            d_d = d_d * abs_power_slope(xp, d, power)
        d_diff = d_d * get_adapter(xp).sign(xp, diff)

        def d_power() -> Any:  # d(d ** p)/dp = d ** p log d, 0 at d = 0
            return -xp.sum(dz * dp * xp.log(xp.where(d == 0, xp.ones_like(d), d))) / tau

        extras = _array_extras(tau=(tau, lambda: xp.sum(dz * dp) / (tau * tau)), power=(power, d_power))
        # s_[i] = s[order[i]]: row i's cotangent goes back to the item sorted there. Added
        # here through the block's 0/1 rows rather than kept per block and gathered at the
        # end: a list of small per-block arrays fragments glibc's heap (6.1 GiB peak RSS at
        # n = 100 000 on torch, against 0.33 GiB without it).
        d_rows = xp.sum(d_diff, axis=-1)
        if keys[1].shape[-1] == self.s.shape[-1]:  # one block: a gather by the inverse permutation
            adapter = get_adapter(xp)
            to_items = adapter.take(xp, d_rows, adapter.invert_permutation(xp, keys[1]))
        else:
            to_items = xp.matmul(d_rows[..., None, :], _one_hot(xp, keys[1], self.s.shape[-1], dz.dtype))[..., 0, :]
        return (to_items - xp.sum(d_diff, axis=-2),), extras

    def finish(self, cols: tuple[Any, ...]) -> Any:
        return cols[0]


class NeuralSortRows:
    """Rows keyed by the scaling ``c_i`` and the item sorted i-th; the columns share ``R_j = sum_k |s_j - s_k|``.

    The logits are written relative to each row's own item ``t_i`` (a row's
    softmax does not see a constant added to the row): ``(k_i (s_j - t_i) -
    (R_j - R(t_i))) / tau``, ``k_i = +-c_i``. ``R_j`` itself is of the size of
    n times the spread of ``s``, and a row's competing logits differ by far
    less near its own item: formed from ``R_j``, float32 rounding moved whole
    rows to a neighbour's item at the default softness from n = 200 on (ranks
    off by up to 600 positions at n = 1000). Along the sorted order ``R``
    steps by ``|t_(q+1) - t_q| (2 q - n)``, so the differences come from the
    cumulative sum ``H`` of those steps, kept as two floats (its rounding
    recovered step by step: :func:`_two_part_cumsum`), whose difference is
    exact where the one float's would not be.
    """

    n_aux = 5  # the sorted scores, H's high part in sorted order, H (two parts) at each item, the scores read back
    n_cols = 2  # column accumulators of the backward pass: ds, dR

    def __init__(self, xp: Any, s: Any, tau: Any, aux: tuple[Any, ...], *, block: int, descending: bool, mask: Any = None, **_: Any) -> None:
        self.xp, self.tau, self.block, self.mask = xp, tau, block, mask
        t, high, self.high, self.low, self.s = aux
        n = masked.valid_count(xp, s, mask)
        c = (n + 1) - 2 * positions(xp, s)  # (..., n) with a mask: each row's own n_v
        self.keys = (c if descending else -c, t, high)

    @staticmethod
    def aux(xp: Any, s: Any, *, block: int, descending: bool, mask: Any = None, traced: bool = False, **_: Any) -> tuple[Any, ...]:
        """``traced``: the backend's autodiff differentiates the logits, and through them these. Their derivative is
        then R's own, ``sum_k sign(s_j - s_k)`` (sign(0) = 0, as :meth:`finish`): a zero-valued ``R - stop(R)`` joins
        the low parts, R summed as before (O(n^2): the matrix's own cost). Through the sort, a tie's derivative
        would follow the order the sort gave its items."""
        adapter = get_adapter(xp)
        if traced and adapter.autodiff:
            t, high, high_at, low_at, read = (adapter.stop_gradient(xp, a) for a in NeuralSortRows.aux(
                xp, s, block=block, descending=descending, mask=mask))
            r = NeuralSortRows._row_sums(xp, s, block, mask)
            # the scores read back, with s's derivative: s - stop(s) is one value less itself, exactly 0
            return t, high, high_at, low_at + (r - adapter.stop_gradient(xp, r)), read + (s - adapter.stop_gradient(xp, s))
        # the rows' own order (a mask's valid entries first); R's steps between the valid entries only
        t, order = sort_order(xp, s, descending, mask)
        n = masked.valid_count(xp, s, mask)
        q = positions(xp, s)[:-1]
        steps = xp.abs(t[..., 1:] - t[..., :-1]) * (2.0 * q - n)
        if mask is not None:
            steps = xp.where(q < n, steps, xp.zeros_like(steps))
        high, low = (a[..., : s.shape[-1]] for a in _two_part_cumsum(xp, steps))  # an empty row has no step either
        inverse = adapter.invert_permutation(xp, order)
        at = (adapter.take(xp, a, inverse) for a in (high, low))
        return t, high, *at, read_back(xp, t, inverse, s, mask)

    @staticmethod
    def centre(keys: tuple[Any, ...]) -> Any:
        """Each row's own sorted score ``t_i``."""
        return keys[1]

    @staticmethod
    def _row_sums(xp: Any, s: Any, block: int, mask: Any) -> Any:
        """``R_j = sum_k |s_j - s_k|`` over the valid entries k, ``block`` rows of differences at a time."""
        valid = None if mask is None else xp.astype(mask, s.dtype)[..., None, :]

        def body(carry: Any, cols: tuple[Any, ...]) -> Any:
            d = xp.abs(cols[0][..., :, None] - s[..., None, :])
            return carry, (xp.sum(d if valid is None else d * valid, axis=-1),)

        return get_adapter(xp).scan_blocks(xp, body, (), (s,), block)[1][0]

    def logits(self, keys: tuple[Any, ...]) -> tuple[Any, Any]:
        # the rows' own low parts are a constant per row (left out); the items' are small: no rounding to speak of
        k, t, high = (a[..., :, None] for a in keys[:3])
        z = k * (self.s[..., None, :] - t) - (self.high[..., None, :] - high) - self.low[..., None, :]
        return _lowest(self.xp, z / self.tau, self.mask), None

    def back(self, keys: tuple[Any, ...], dz: Any, z: Any, cache: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``dz -> ((ds over columns, dR), {"tau": dtau})`` (an array tau only)."""
        xp, tau = self.xp, self.tau
        ds = xp.matmul((keys[0] / tau)[..., None, :], dz)[..., 0, :]
        d_rows = -xp.sum(dz, axis=-2) / tau
        extras = _array_extras(tau=(tau, lambda: -xp.sum(dz * self._finite(self.logits(keys)[0] if z is None else z)) / tau))
        return (ds, d_rows), extras

    def _finite(self, z: Any) -> Any:
        """The logits with a mask's -inf columns (cotangent 0 there) read as 0."""
        return z if self.mask is None else self.xp.where(self.xp.isfinite(z), z, self.xp.zeros_like(z))

    def finish(self, cols: tuple[Any, ...]) -> Any:
        # R_m = sum_k |s_m - s_k|:  ds_m += dR_m sum_k sign(s_m - s_k) - sum_j dR_j sign(s_j - s_m)
        # (with a mask, k runs over the valid entries; dR_j is 0 on the masked columns)
        # The self-difference s_m - s_m is 0 and its sign 0 by position, not by value: a compiler that
        # recomputes s (XLA fusing s's producer into both operands, with another rounding) would
        # otherwise read +-1 there, an error of the size of the cotangent.
        xp, s = self.xp, self.s
        ds, d_rows = cols
        valid = None if self.mask is None else xp.astype(self.mask, s.dtype)[..., None, :]
        pos = positions(xp, s)

        def body(carry: Any, blk: tuple[Any, ...]) -> Any:
            s_blk, d_blk, pos_blk = blk
            sign = get_adapter(xp).sign(xp, s_blk[..., :, None] - s[..., None, :])
            sign = xp.where(pos_blk[..., :, None] == pos, xp.zeros_like(sign), sign)
            counted = sign if valid is None else sign * valid
            return carry, (d_blk * xp.sum(counted, axis=-1) + matvec(xp, sign, d_rows),)

        pos_rows = xp.broadcast_to(pos, s.shape)
        return ds + get_adapter(xp).scan_blocks(xp, body, (), (s, d_rows, pos_rows), self.block)[1][0]


ROWS = {"softsort": SoftSortRows, "neuralsort": NeuralSortRows}
