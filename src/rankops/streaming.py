r"""SoftSort and NeuralSort soft sorts and ranks without the n x n matrix.

The soft sort ``y = P @ x`` needs row i of ``P`` for output i only, and the
soft rank ``r = P^T @ (1..n)`` is a sum over the rows of ``P``. Both are
therefore computed over blocks of ``block`` rows (every column at once), so
memory is O(B n block) instead of the O(B n^2) of the full matrix; the
papers' own code runs out of memory near n = 3700 on CPU (Prillo &
Eisenschlos 2020, appendix A.4.6) for this reason.

Row i of ``P`` is ``softmax_j(z_ij)`` with logits (see
:mod:`rankops.permutations`)

- SoftSort: ``z_ij = -|s_[i] - s_j| ** p / tau``, ``s_[i]`` the i-th entry in
  sorted order;
- NeuralSort: ``z_ij = (c_i s_j - R_j) / tau``, ``c_i = +-(n + 1 - 2 i)``,
  ``R_j = sum_k |s_j - s_k|`` (the row sums are themselves computed in blocks).

The backward pass recomputes each block's rows and applies the closed-form
pullbacks of the softmax (``dz = P * (dP - sum_j dP P)``):

- sort, cotangent g:  ``dx += P^T g``, ``dz_ij = g_i P_ij (x_j - y_i)``;
- rank, cotangent h:  ``dz_ij = i P_ij (h_j - (P h)_i)``;

then the logits' pullback. It is registered with torch and JAX through the
adapters' ``custom_vjp`` (the host keeps only ``x``, ``tau`` and O(n)
vectors between the passes), and it is the rule ``rankops.vjp`` applies on
the other backends. ``hard=True`` returns the exact sort or ranks in
O(n log n) with the gradient of the relaxed ones.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import array_api_compat

from ._lib._adapters import get_adapter
from ._lib._compat import is_array
from ._lib._numerics import abs_power, abs_power_slope, matvec

__all__ = ["stream_vjp", "auto_block", "BLOCK_BYTES"]

# Bytes of one block of logits over the whole batch. glibc serves allocations
# above 32 MiB with mmap and returns them on free; smaller ones come from the
# heap, where thousands of same-sized block temporaries fragment it (RSS grew
# to 1.9 GiB for a 16 MiB block at n = 20000, B = 1). A block step keeps about
# ten such temporaries alive.
BLOCK_BYTES = 36 * 2**20


def auto_block(batch_shape: tuple[int, ...], n: int, itemsize: int) -> int:
    """Rows per block so that one block of logits takes about ``BLOCK_BYTES``."""
    size = max(1, math.prod(batch_shape)) * n * itemsize
    return max(1, min(n, BLOCK_BYTES // size))


def _order(xp: Any, s: Any, descending: bool) -> tuple[Any, Any]:
    """``(sorted s, order)``: position i holds item ``order[i]``."""
    order = xp.argsort(s, axis=-1, descending=descending, stable=True)
    return xp.take_along_axis(s, order, axis=-1), order


class _SoftSort:
    """Rows keyed by the sorted scores ``s_[i]``."""

    n_aux = 2  # sorted scores, the sorting permutation
    n_cols = 1  # column accumulators of the backward pass: ds

    def __init__(self, xp: Any, s: Any, tau: Any, aux: tuple[Any, ...], *, power: Any, **_: Any) -> None:
        self.xp, self.s, self.tau, self.power = xp, s, tau, power
        self.keys = aux  # row i: s_[i] and the item sorted there

    @staticmethod
    def aux(xp: Any, s: Any, *, descending: bool, **_: Any) -> tuple[Any, ...]:
        return _order(xp, s, descending)

    def _distance(self, s_block: Any) -> tuple[Any, Any, Any]:
        diff = s_block[..., :, None] - self.s[..., None, :]
        d = self.xp.abs(diff)
        return diff, d, abs_power(self.xp, d, self.power)

    def logits(self, keys: tuple[Any, ...]) -> tuple[Any, Any]:
        """The block's logits, and what their pullback reuses."""
        cache = self._distance(keys[0])
        return cache[2] * (-1.0 / self.tau), cache

    def back(self, keys: tuple[Any, ...], dz: Any, z: Any, cache: Any) -> tuple[tuple[Any, ...], Any]:
        """``dz -> ((ds,), dtau)``."""
        xp, tau, power = self.xp, self.tau, self.power
        if cache is None:  # the matrix was kept: only what this pullback needs
            diff = keys[0][..., :, None] - self.s[..., None, :]
            cache = self._distance(keys[0]) if power != 1.0 or is_array(tau) else (diff, None, None)
        diff, d, dp = cache
        d_d = dz * (-1.0 / tau)
        if power != 1.0:
            d_d = d_d * abs_power_slope(xp, d, power)
        d_diff = d_d * xp.sign(diff)
        d_tau = xp.sum(dz * dp) / (tau * tau) if is_array(tau) else None
        # s_[i] = s[order[i]]: row i's cotangent goes back to the item sorted there. Added
        # here through the block's 0/1 rows rather than kept per block and gathered at the
        # end: a list of small per-block arrays fragments glibc's heap (6.1 GiB peak RSS at
        # n = 100 000 on torch, against 0.33 GiB without it).
        d_rows = xp.sum(d_diff, axis=-1)
        n = self.s.shape[-1]
        if keys[1].shape[-1] == n:  # one block: a gather by the inverse permutation
            to_items = xp.take_along_axis(d_rows, xp.argsort(keys[1], axis=-1), axis=-1)
        else:
            items = xp.arange(n, dtype=keys[1].dtype, device=array_api_compat.device(keys[1]))
            to_items = xp.matmul(d_rows[..., None, :], xp.astype(keys[1][..., :, None] == items, dz.dtype))[..., 0, :]
        return (to_items - xp.sum(d_diff, axis=-2),), d_tau

    def finish(self, cols: tuple[Any, ...]) -> Any:
        return cols[0]


class _NeuralSort:
    """Rows keyed by the scaling ``c_i``; the columns share ``R_j = sum_k |s_j - s_k|``."""

    n_aux = 1  # row sums R
    n_cols = 2  # column accumulators of the backward pass: ds, dR

    def __init__(self, xp: Any, s: Any, tau: Any, aux: tuple[Any, ...], *, block: int, descending: bool, **_: Any) -> None:
        self.xp, self.s, self.tau, self.block = xp, s, tau, block
        (self.row_sums,) = aux
        n = s.shape[-1]
        c = (n + 1) - 2 * xp.arange(1, n + 1, dtype=s.dtype, device=array_api_compat.device(s))
        self.keys = (c if descending else -c,)

    @staticmethod
    def aux(xp: Any, s: Any, *, block: int, **_: Any) -> tuple[Any, ...]:
        def body(carry: Any, cols: tuple[Any, ...]) -> Any:
            return carry, (xp.sum(xp.abs(cols[0][..., :, None] - s[..., None, :]), axis=-1),)

        return get_adapter(xp).scan_blocks(xp, body, (), (s,), block)[1]

    def logits(self, keys: tuple[Any, ...]) -> tuple[Any, Any]:
        # Dividing the two vectors by tau before broadcasting saves a full pass.
        tau = self.tau
        return (keys[0] / tau)[:, None] * self.s[..., None, :] - (self.row_sums / tau)[..., None, :], None

    def back(self, keys: tuple[Any, ...], dz: Any, z: Any, cache: Any) -> tuple[tuple[Any, ...], Any]:
        """``dz -> ((ds over columns, dR), dtau)``."""
        xp, tau = self.xp, self.tau
        ds = xp.matmul(keys[0] / tau, dz)
        d_rows = -xp.sum(dz, axis=-2) / tau
        d_tau = -xp.sum(dz * (self.logits(keys)[0] if z is None else z)) / tau if is_array(tau) else None
        return (ds, d_rows), d_tau

    def finish(self, cols: tuple[Any, ...]) -> Any:
        # R_m = sum_k |s_m - s_k|:  ds_m += dR_m sum_k sign(s_m - s_k) - sum_j dR_j sign(s_j - s_m)
        xp, s = self.xp, self.s
        ds, d_rows = cols

        def body(carry: Any, blk: tuple[Any, ...]) -> Any:
            s_blk, d_blk = blk
            sign = xp.sign(s_blk[..., :, None] - s[..., None, :])
            return carry, (d_blk * xp.sum(sign, axis=-1) + matvec(xp, sign, d_rows),)

        return ds + get_adapter(xp).scan_blocks(xp, body, (), (s, d_rows), self.block)[1][0]


_METHODS = {"softsort": _SoftSort, "neuralsort": _NeuralSort}


def _positions(xp: Any, s: Any) -> Any:
    return xp.arange(1, s.shape[-1] + 1, dtype=s.dtype, device=array_api_compat.device(s))


def _forward(xp: Any, rows: Any, output: str, block: int) -> Any:
    """The relaxed value, one block of rows at a time."""
    softmax = get_adapter(xp).softmax
    s = rows.s
    if output == "sort":

        def sort_body(carry: Any, keys: tuple[Any, ...]) -> Any:
            return carry, (matvec(xp, softmax(xp, rows.logits(keys)[0], -1), s),)

        return get_adapter(xp).scan_blocks(xp, sort_body, (), rows.keys, block)[1][0]

    def rank_body(acc: Any, blk: tuple[Any, ...]) -> Any:
        *keys, w = blk
        return acc + xp.matmul(w, softmax(xp, rows.logits(tuple(keys))[0], -1)), ()

    return get_adapter(xp).scan_blocks(xp, rank_body, xp.zeros_like(s), (*rows.keys, _positions(xp, s)), block)[0]


def _backward(xp: Any, rows: Any, output: str, block: int, ct: Any, p_kept: Any = None) -> tuple[Any, Any]:
    """``(ds, dtau)`` for the cotangent ``ct`` of the relaxed value (``p_kept``: the one-block matrix, if kept)."""
    softmax = get_adapter(xp).softmax
    s = rows.s
    n_keys = len(rows.keys)

    def body(acc: tuple[Any, ...], blk: tuple[Any, ...]) -> Any:
        cols_acc, tau_acc = acc
        keys, extra = blk[:n_keys], blk[n_keys:]
        # with the matrix kept, the logits are recomputed only where the pullback needs them
        z, cache = rows.logits(keys) if p_kept is None else (None, None)
        p = softmax(xp, z, -1) if p_kept is None else p_kept
        if output == "sort":
            (g,) = extra
            y = matvec(xp, p, s)
            dz = g[..., :, None] * p * (s[..., None, :] - y[..., :, None])
            direct = xp.matmul(g[..., None, :], p)[..., 0, :]
        else:
            (w,) = extra
            dz = w[:, None] * p * (ct[..., None, :] - matvec(xp, p, ct)[..., :, None])
        cols, d_tau = rows.back(keys, dz, z, cache)
        if output == "sort":
            cols = (cols[0] + direct, *cols[1:])
        new_acc = tuple(a + c for a, c in zip(cols_acc, cols))
        return (new_acc, tau_acc if d_tau is None else tau_acc + d_tau), ()

    extra = (ct,) if output == "sort" else (_positions(xp, s),)
    zero_tau = xp.zeros((), dtype=s.dtype, device=array_api_compat.device(s))
    init = (tuple(xp.zeros_like(s) for _ in range(rows.n_cols)), zero_tau)
    (cols, d_tau), _ = get_adapter(xp).scan_blocks(xp, body, init, (*rows.keys, *extra), block)
    return rows.finish(cols), d_tau


def _hard(xp: Any, s: Any, output: str, descending: bool) -> Any:
    """The exact sort, or the exact 1-based ranks, in O(n log n)."""
    s_sorted, order = _order(xp, s, descending)
    return s_sorted if output == "sort" else xp.astype(xp.argsort(order, axis=-1), s.dtype) + 1


def _residuals(
    xp: Any, s: Any, tau_array: tuple[Any, ...], method: str, block: int, tau: Any, params: dict[str, Any], keep: bool
) -> tuple[Any, ...]:
    """What the backward pass keeps: ``s``, an array ``tau``, O(n) vectors (sort order or row sums).

    ``keep``: the matrix fits in one block, so it is kept too (no larger than
    one block) and the backward pass skips recomputing its softmax.
    """
    res = (s, *tau_array, *_METHODS[method].aux(xp, s, block=block, **params))
    if not keep:
        return res
    rows = _rows(xp, res, bool(tau_array), method, block, tau, params)
    return (*res, get_adapter(xp).softmax(xp, rows.logits(rows.keys)[0], -1))


def _rows(xp: Any, res: tuple[Any, ...], has_tau: bool, method: str, block: int, tau: Any, params: dict[str, Any]) -> Any:
    s, cls = res[0], _METHODS[method]
    if has_tau:
        tau = xp.astype(res[1], s.dtype)
    return cls(xp, s, tau, res[1 + has_tau : 1 + has_tau + cls.n_aux], block=block, **params)


def _fwd(
    xp: Any, s: Any, *tau_array: Any, method: str, output: str, block: int, hard: bool, keep: bool, tau: Any, params: dict[str, Any]
) -> Any:
    res = _residuals(xp, s, tau_array, method, block, tau, params, keep)
    if hard:
        value = _hard(xp, s, output, params["descending"])
    elif keep:
        p = res[-1]
        value = matvec(xp, p, s) if output == "sort" else xp.matmul(_positions(xp, s), p)
    else:
        value = _forward(xp, _rows(xp, res, bool(tau_array), method, block, tau, params), output, block)
    return (value,), res


def _bwd(
    xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...], *, method: str, output: str, block: int, keep: bool, tau: Any, params: dict[str, Any]
) -> tuple[Any, ...]:
    has_tau = tau is None
    (ct,) = cts
    if ct is None:  # torch: the output was not used
        return (None,) * (1 + has_tau)
    rows = _rows(xp, res, has_tau, method, block, tau, params)
    ds, d_tau = _backward(xp, rows, output, block, xp.astype(ct, rows.s.dtype), res[-1] if keep else None)
    return (ds, xp.astype(d_tau, res[1].dtype)) if has_tau else (ds,)


def stream_vjp(
    xp: Any, x: Any, *, method: str, output: str, block: int, descending: bool, hard: bool, tau: Any, power: float = 1.0
) -> tuple[Any, Any]:
    """Soft sort (``output="sort"``) or soft rank (``"rank"``) of ``x`` along its last axis, with its pullback.

    ``block`` rows of ``P`` are formed at a time, in the forward and in the
    backward pass. The pullback maps the output's cotangent to
    ``{"x": dx}`` (and ``"tau"`` for an array ``tau``). ``power`` is a Python
    number: the backward treats it as a constant, so an array power takes the
    full-matrix path (:mod:`rankops.sorting`).
    """
    params: dict[str, Any] = {"descending": descending}
    if method == "softsort":
        params["power"] = power
    # An array tau travels with the differentiated arrays (tau=None here), a number as a constant.
    arrays = (x, tau) if is_array(tau) else (x,)
    keep = not hard and block >= x.shape[-1]
    static = {"method": method, "output": output, "block": block, "keep": keep, "tau": None if is_array(tau) else tau, "params": params}
    fwd = functools.partial(_fwd, hard=hard, **static)
    bwd = functools.partial(_bwd, **static)

    def residuals(xp: Any, s: Any, *tau_array: Any) -> tuple[Any, ...]:
        return _residuals(xp, s, tau_array, method, block, static["tau"], params, keep)

    (value,) = get_adapter(xp).custom_vjp(xp, fwd, bwd, arrays, n_diff=1, residuals=residuals)

    def pullback(ct: Any) -> dict[str, Any]:
        return dict(zip(("x", "tau"), bwd(xp, residuals(xp, *arrays), (ct,))))

    return value, pullback
