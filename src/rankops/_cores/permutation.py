r"""SoftSort and NeuralSort operators over the row kernels of :mod:`.rows`.

With ``P`` the relaxed permutation matrix (row i: the item at position i):

- matrix: ``P`` itself (``rankops.softsort`` / ``rankops.neuralsort``);
- sort:   ``y = P @ x``          (position i gets a weighted mean of items);
- rank:   ``r = P^T @ (1..n)``   (item j gets its expected 1-based position).

The sort needs row i of ``P`` for output i only, and the ranks are a sum
over rows, so both are computed ``block`` rows at a time (every column at
once): memory O(B n block) instead of the O(B n^2) of the full matrix (the
papers' own code runs out of memory near n = 3700 on CPU, Prillo &
Eisenschlos 2020, A.4.6). The backward pass recomputes each block's rows and
applies the closed-form pullbacks of the softmax (``dz = P * (dP - sum_j dP P)``):

- sort, cotangent g:  ``dx += P^T g``, ``dz_ij = g_i P_ij (d_ij - sum_k P_ik d_ik)`` with ``d_ij = x_j - c_i``
  about row i's own sorted score ``c_i`` (``x_j - y_i`` itself, exactly 0 on the row's tie group);
- rank, cotangent h:  ``dz_ij = i P_ij (h_j - (P h)_i)``;

then the row kernel's pullback of the logits. That rule is registered with
torch and JAX through ``custom_backward`` (the backend keeps ``x``,
``tau`` and O(n) vectors between the passes) and is the rule ``rankops.vjp``
applies on the other backends. ``block=None`` forms the whole matrix as one
block and lets torch / JAX differentiate it themselves (JAX forward mode, a
learnable ``power``); ``rankops.vjp`` then applies the same rule with the
matrix kept. ``hard=True`` returns the exact permutation, sort or ranks with
the gradient of the relaxed ones (straight-through).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._lib._adapters import core, get_adapter, same_shape, square_matrix
from .._lib._compat import is_array, device as _device
from .._lib._numerics import matvec
from . import masked
from .finite import finite_rows
from .rows import ROWS, exact, permutation_matrix, weights
from .softness import output_is_sort, softened

__all__ = [
    "matrix_core", "dense_core", "stream_core", "auto_block", "BLOCK_BYTES",
]

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


def straight_through(xp: Any, hard: Any, soft: Any) -> Any:
    """The value of ``hard`` with the gradient of ``soft``: ``stop(hard) + (soft - stop(soft))``."""
    stop = get_adapter(xp).stop_gradient
    return stop(xp, hard) + (soft - stop(xp, soft))


def _rows(
    xp: Any, s: Any, tau: Any, method: str, block: int, descending: bool, power: Any, aux: tuple[Any, ...] | None = None, mask: Any = None
) -> Any:
    cls = ROWS[method]
    # aux from s here: under the caller's autodiff (traced), unlike the residuals of a rule's forward
    aux = cls.aux(xp, s, block=block, descending=descending, mask=mask, traced=True) if aux is None else aux
    return cls(xp, s, tau, aux, block=block, descending=descending, power=power, mask=mask)


def _about_own_score(xp: Any, rows: Any, keys: tuple[Any, ...], p: Any) -> tuple[Any, Any, Any]:
    """``(c, d, m)`` for the rows ``keys``: each row's own sorted score ``c_i``, ``d_ij = s_j - c_i`` and ``m_i =
    sum_j p_ij d_ij`` (``y_i - c_i``). The sort's ``s_j - y_i`` is ``d - m``: exactly 0 where ``s_j`` ties with
    ``c_i``, where ``y_i`` itself is rounded by a unit of ``s``'s last place, which the logits' slopes (of size
    n) then multiply."""
    c = rows.centre(keys)[..., :, None]
    d = rows.s[..., None, :] - c
    return c[..., 0], d, xp.sum(p * d, axis=-1, keepdims=True)


def _softmax_back(xp: Any, p: Any, dp: Any) -> Any:
    """Pullback of a row softmax with output ``p``."""
    return p * (dp - xp.sum(dp * p, axis=-1, keepdims=True))


def relaxation_key(method: str, power: Any) -> str:
    """The softness calibration of SoftSort (for its power) or NeuralSort."""
    return f"softsort-{power:g}" if method == "softsort" else method


def _softness_key(opts: Any, params: dict[str, Any]) -> str:
    return relaxation_key(params["method"], opts.power)


@core(output_shapes=square_matrix, batched={"mask": (0,)})
@masked.zeros_masked_input
@finite_rows
@softened(_softness_key, lambda opts, params: False)
def matrix_core(xp: Any, s: Any, opts: Any, *, method: str, descending: bool, mask: Any = None, log: bool = False) -> Any:
    """The relaxed permutation matrix (..., n, n) and its pullback (that of the relaxed matrix when ``hard``).

    ``mask``: the matrix of each row's n_v valid entries alone, in its first
    n_v rows and the valid entries' columns (:func:`.masked.square`).
    ``log``: ``log P`` instead, the log-softmax of the logits, ``z - LSE(z)``
    (pullback ``dz = dl - P sum dl``): a probability that underflows (below
    1e-38 in float32) keeps its log and its gradient, which ``log(P + tiny)``
    would flatten to ``log(tiny)`` and 0.
    """
    if log and opts.hard:
        raise ValueError("the log of a hard permutation matrix is -inf off its ones: take the log of the relaxed one")
    adapter = get_adapter(xp)
    rows = _rows(xp, s, opts.tau, method, s.shape[-1], descending, opts.power, mask=mask)
    z, cache = rows.logits(rows.keys)
    p = adapter.softmax(xp, z, -1)
    if log:  # LSE(z) = max z - log max P: a row's largest probability is at least 1 / n, never underflows
        value = (z - xp.max(z, axis=-1, keepdims=True)) + xp.log(xp.max(p, axis=-1, keepdims=True))
    else:
        value = straight_through(xp, permutation_matrix(xp, s, descending, mask), p) if opts.hard else p

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        dz = cts[0] - p * xp.sum(cts[0], axis=-1, keepdims=True) if log else _softmax_back(xp, p, cts[0])
        cols, extras = rows.back(rows.keys, dz, z, cache)
        return {"x": rows.finish(cols), **extras}
    if mask is None:
        return (value,), pullback
    return masked.squared(xp, (value,), pullback, mask)


# -- sorts and ranks, a block of rows at a time -----------------------------------------------


def _read(xp: Any, output: str, p: Any, s: Any, w: Any) -> Any:
    """One block's contribution: its sorted outputs, or its rows' share of the ranks (``w``: their weights)."""
    if output == "sort":
        return matvec(xp, p, s)
    return xp.matmul(w, p) if w.ndim == 1 else xp.matmul(w[..., None, :], p)[..., 0, :]  # w per row: a mask's


def _forward(xp: Any, rows: Any, output: str, block: int) -> Any:
    """The relaxed value, one block of rows at a time."""
    softmax, scan = get_adapter(xp).softmax, get_adapter(xp).scan_blocks
    s = rows.s
    if output == "sort":

        def sort_body(carry: Any, keys: tuple[Any, ...]) -> Any:
            return carry, (_read(xp, output, softmax(xp, rows.logits(keys)[0], -1), s, None),)

        return scan(xp, sort_body, (), rows.keys, block)[1][0]

    def rank_body(acc: Any, blk: tuple[Any, ...]) -> Any:
        *keys, w = blk
        return acc + _read(xp, output, softmax(xp, rows.logits(tuple(keys))[0], -1), s, w), ()

    return scan(xp, rank_body, xp.zeros_like(s), (*rows.keys, weights(xp, s, rows.mask)), block)[0]


def _backward(xp: Any, rows: Any, output: str, block: int, ct: Any, p_kept: Any = None) -> tuple[Any, dict[str, Any]]:
    """``(ds, {"tau": ..., "power": ...})`` for the cotangent ``ct`` of the relaxed value (``p_kept``: the one-block matrix)."""
    softmax = get_adapter(xp).softmax
    s = rows.s
    n_keys = len(rows.keys)

    def body(acc: tuple[Any, ...], blk: tuple[Any, ...]) -> Any:
        cols_acc, extras_acc = acc
        keys, extra = blk[:n_keys], blk[n_keys:]
        # with the matrix kept, the logits are recomputed only where the pullback needs them
        z, cache = rows.logits(keys) if p_kept is None else (None, None)
        p = softmax(xp, z, -1) if p_kept is None else p_kept
        if output == "sort":
            (g,) = extra
            _, d, m = _about_own_score(xp, rows, keys, p)
            dz = g[..., :, None] * p * (d - m)
        else:
            (w,) = extra
            dz = w[..., :, None] * p * (ct[..., None, :] - matvec(xp, p, ct)[..., :, None])
        cols, extras = rows.back(keys, dz, z, cache)
        if output == "sort":
            cols = (cols[0] + xp.matmul(g[..., None, :], p)[..., 0, :], *cols[1:])
        return (tuple(a + c for a, c in zip(cols_acc, cols)), {k: extras_acc[k] + extras[k] for k in extras_acc}), ()

    extra = (ct,) if output == "sort" else (weights(xp, s, rows.mask),)
    zero = xp.zeros((), dtype=s.dtype, device=_device(s))
    init_extras = {k: zero for k, v in (("tau", rows.tau), ("power", getattr(rows, "power", None))) if is_array(v)}
    init = (tuple(xp.zeros_like(s) for _ in range(rows.n_cols)), init_extras)
    (cols, extras), _ = get_adapter(xp).scan_blocks(xp, body, init, (*rows.keys, *extra), block)
    return rows.finish(cols), extras


@core(output_shapes=same_shape, batched={"mask": (0,)})
@masked.zeros_masked_input
@finite_rows
@softened(_softness_key, output_is_sort)
def dense_core(xp: Any, x: Any, opts: Any, *, method: str, output: str, descending: bool, mask: Any = None) -> Any:
    """The whole matrix as one block, differentiated by the backend's autodiff (the rule keeps the matrix).

    ``mask``: each row's valid entries alone (see :mod:`.rows`).
    """
    n = x.shape[-1]
    rows = _rows(xp, x, opts.tau, method, n, descending, opts.power, mask=mask)
    p = get_adapter(xp).softmax(xp, rows.logits(rows.keys)[0], -1)
    if output == "sort":
        # y = c + m: the backend differentiates this itself, and P s's derivative would take s_j - y_i uncentred
        c, _, m = _about_own_score(xp, rows, rows.keys, p)
        soft = c + m[..., 0]
    else:
        soft = _read(xp, output, p, x, weights(xp, x, mask))

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ds, extras = _backward(xp, rows, output, n, cts[0], p_kept=p)
        return {"x": ds, **extras}

    value = straight_through(xp, exact(xp, x, output, descending, mask), soft) if opts.hard else soft
    if mask is None:
        return (value,), pullback
    return masked.as_masked_operator(xp, (value,), pullback, mask, masked.prefix(xp, mask) if output == "sort" else mask)


@dataclasses.dataclass(frozen=True)
class _Streamed:
    """The streamed computation's static part; ``tau`` is None when an array tau travels with the inputs."""

    method: str
    output: str
    block: int
    descending: bool
    power: Any
    tau: Any
    hard: bool
    keep: bool  # the matrix fits in one block: keep it (no larger than a block) instead of recomputing it
    masked: bool = False  # a mask is the last argument (and the residual after the aux)

    def rows(self, xp: Any, res: tuple[Any, ...]) -> Any:
        has_tau = self.tau is None
        s = res[0]
        tau = xp.astype(res[1], s.dtype) if has_tau else self.tau
        end = 1 + has_tau + ROWS[self.method].n_aux
        mask = res[end] if self.masked else None
        return _rows(xp, s, tau, self.method, self.block, self.descending, self.power, res[1 + has_tau : end], mask)

    def residuals(self, xp: Any, s: Any, *rest: Any) -> tuple[Any, ...]:
        """What the backward pass keeps: ``s``, an array ``tau``, O(n) vectors (the sort order, or the sorted row and R's steps summed), the mask."""
        tau_array, mask = (rest[:-1], rest[-1:]) if self.masked else (rest, ())
        aux = ROWS[self.method].aux(xp, s, block=self.block, descending=self.descending, mask=mask[0] if mask else None)
        res = (s, *tau_array, *aux, *mask)
        if not self.keep:
            return res
        rows = self.rows(xp, res)
        return (*res, get_adapter(xp).softmax(xp, rows.logits(rows.keys)[0], -1))

    def fwd(self, xp: Any, s: Any, *rest: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        res = self.residuals(xp, s, *rest)
        mask = rest[-1] if self.masked else None
        if self.hard:
            value = exact(xp, s, self.output, self.descending, mask)
        elif self.keep:
            value = _read(xp, self.output, res[-1], s, weights(xp, s, mask))
        else:
            value = _forward(xp, self.rows(xp, res), self.output, self.block)
        return (value,), res

    def bwd(self, xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        has_tau = self.tau is None
        (ct,) = cts
        none = (None,) * self.masked  # the mask has no gradient
        if ct is None:  # torch: the output was not used
            return (None,) * (1 + has_tau) + none
        rows = self.rows(xp, res)
        ds, extras = _backward(xp, rows, self.output, self.block, xp.astype(ct, rows.s.dtype), res[-1] if self.keep else None)
        return ((ds, xp.astype(extras["tau"], res[1].dtype)) if has_tau else (ds,)) + none


@core(output_shapes=same_shape, batched={"mask": (0,)})
@masked.zeros_masked_input
@finite_rows
@softened(_softness_key, output_is_sort)
def stream_core(xp: Any, x: Any, opts: Any, *, method: str, output: str, descending: bool, mask: Any = None) -> Any:
    """``block`` rows of ``P`` at a time, in the forward and in the backward pass (a number ``power`` only)."""
    n = x.shape[-1]
    block = opts.block
    if block == "auto":  # sized on the array the core receives (one Dask block, say)
        block = auto_block(tuple(x.shape[:-1]), n, xp.finfo(x.dtype).bits // 8)
    block = min(block, n)
    tau = opts.tau
    spec = _Streamed(method, output, block, descending, opts.power, None if is_array(tau) else tau, opts.hard,
                     keep=not opts.hard and block >= n, masked=mask is not None)
    # An array tau travels with the differentiated arrays, a number as a constant.
    arrays = (x, tau) if is_array(tau) else (x,)
    names = ("x", "tau")[: len(arrays)]
    return masked.backward(xp, spec.fwd, spec.bwd, arrays, names, mask, positional=output == "sort", residuals=spec.residuals)
