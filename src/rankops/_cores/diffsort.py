r"""Differentiable sorting networks (Petersen, Borgelt, Kuehne & Deussen, ICML 2021 and ICLR 2022).

A sorting network (:mod:`.networks`) whose comparators are relaxed
(:mod:`.comparators`): in layer k each wire i takes the share ``c_i =
f(tau_i d_i)`` of its partner ``p(i)``'s value, ``d_i = x_p(i) - x_i``:

    y_i = (1 - c_i) x_i + c_i x_p(i),

so a layer is a gather of the partners and a blend, O(n), and the network
is ``P = L_K ... L_1`` with ``L_k`` symmetric (``c_i = c_p(i)``). An idle
wire is its own partner with ``tau = 0``: it blends half and half with
itself, which keeps its value. Nothing
here forms ``P`` except :func:`matrix_core`:

- soft sort: the wires after the last layer, ``P x``;
- soft rank: ``P^T (1..n) = L_1 ... L_K (1..n)``, the positions carried back
  through the network with the forward's shares (item i's expected
  1-based position, ``sum_j P_ij (j + 1)`` in the package's orientation);
- matrix: the layers applied to the rows of the identity.

Backward, per layer: with ``h = u f'(u)`` and ``q = tau f'(u)`` (``u = tau
d``), a wire's cotangent ``G`` and the cotangent ``g_c`` of its share (from
the rank or the matrix) give ``a = G (c + h) + g_c q`` and ``G <- G - a +
a_p``. The shares and their arguments are kept per layer (O(K n) per row);
the rank also keeps the positions it carried (``g_c = gamma (z_p - z)``
with ``gamma`` its cotangent carried forward through the same layers). The
matrix keeps no layer's matrix: its backward carries the identity's columns
through the layers again, a block of columns at a time (about 8 n^2 + K n
memory per row, not K n^2).

With a ``mask`` each row runs the network of its n_v valid entries alone:
they move, in their order, to the first n_v wires, and a per-row ``gate``
keeps only that network's comparators (both wires below n_v; odd-even's
first n_v layers, bitonic's merge stages b with ``2^b < n_v``). A gated
comparator has share 0 and argument 0, so it keeps both wires exactly and
passes no gradient.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._lib._adapters import core, custom_backward, get_adapter, rebuilt, same_shape, square_matrix
from .._lib._compat import index_dtype, device as _device
from . import comparators, masked
from .finite import finite_rows
from .networks import Wiring, stage_sizes, wiring
from .softness import softened
from .tempered import tempered

__all__ = ["rank_core", "sort_core", "matrix_core"]


def _column(xp: Any, table: Any, k: Any) -> Any:
    """Layer ``k``'s column of a wiring table (``k`` a 1-element index array)."""
    return get_adapter(xp).select(xp, table, k, 1)[:, 0]


def _partners(xp: Any, v: Any, partner: Any, axis: int = -1) -> Any:
    """Each wire's partner's value (``axis``: the wires' axis)."""
    return get_adapter(xp).select(xp, v, partner, v.ndim + axis if axis < 0 else axis)


# The matrix's backward (_Network.rows_back) carries its columns in K / _LAYERS_PER_BLOCK blocks: memory of about
# _LAYERS_PER_BLOCK times the matrix per row, for that many times fewer steps (each of them a kernel launch on a GPU)
# than one block per K layers; and at least _COLUMNS columns a block, or the loop over blocks is all steps.
_LAYERS_PER_BLOCK = 8
_COLUMNS = 16


def _blend_rows(xp: Any, c: Any, m: Any, partner: Any) -> Any:
    """One layer on the matrix: row i becomes ``(1 - c_i) m_i + c_i m_p(i)``."""
    return (1.0 - c)[..., None] * m + c[..., None] * _partners(xp, m, partner, -2)


def _flip(xp: Any, arrays: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(xp.flip(a, axis=-1) for a in arrays)


@dataclasses.dataclass(frozen=True)
class _Network:
    network: str
    distribution: str
    steepness: float
    art_lambda: float
    descending: bool

    def wiring(self, xp: Any, like: Any, n: int) -> Wiring:
        """The network on n wires (rebuilt by the backward: residuals are arrays only), tables on ``like``'s device."""
        return wiring(xp, self.kind(n), n, like)

    def kind(self, n: int) -> str:
        return "odd_even" if n == 1 else self.network  # one wire: one idle layer

    def gate(self, xp: Any, w: Wiring, valid: Any) -> Any:
        """Per row and layer (``(..., n, K)``), the comparators of the network on the row's n_v valid wires (the first)."""
        n = valid.shape[-1]
        dev = _device(valid)
        idx = index_dtype(xp, dev)
        count = xp.sum(xp.astype(valid, idx), axis=-1, keepdims=True)[..., None]  # (..., 1, 1)
        partner = get_adapter(xp).select(xp, w.partner, w.schedule, 1)  # (n, K)
        wire = xp.arange(n, dtype=idx, device=dev)[:, None]
        k = w.schedule.shape[0]
        if self.kind(n) == "odd_even":
            layer = xp.arange(k, dtype=idx, device=dev)  # n_v layers sort n_v wires
        else:
            layer = xp.asarray(stage_sizes(n), dtype=idx, device=dev)  # a merge stage of blocks 2^(b+1): 2^b < n_v
        return (wire < count) & (partner < count) & (layer < count)

    def layers(self, xp: Any, w: Wiring, x: Any, p: Any = None, gate: Any = None) -> tuple[Any, ...]:
        """``(y, c, u[, P])``: the wires (and the matrix ``p``) after every layer, each layer's shares and arguments (``(..., n, K)``).

        The matrix is carried, not kept per layer: its backward recomputes
        what entered each layer (:meth:`rows_back`), so a call without one
        holds O(n^2 + K n) per row, not O(K n^2).
        """
        adapter = get_adapter(xp)

        tau = self.steepness * w.side  # 0 on idle wires: they blend half and half with themselves, exact

        def body(carry: tuple[Any, ...], cols: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
            k = cols[0]
            v = carry[0]
            partner = _column(xp, w.partner, k)
            other = _partners(xp, v, partner)
            tau_k = _column(xp, tau, k)
            if gate is not None:  # a gated comparator: argument and share 0, both wires kept
                tau_k = xp.where(cols[1][..., 0], tau_k, xp.zeros_like(tau_k))
            u = comparators.clamp_argument(xp, tau_k * (other - v))
            keep, c = comparators.shares(xp, adapter, self.distribution, u, self.steepness, self.art_lambda)
            if gate is not None:
                keep, c = xp.where(cols[1][..., 0], keep, xp.ones_like(keep)), xp.where(cols[1][..., 0], c, xp.zeros_like(c))
            # the convex form: v + c (other - v) would overflow where the two are of opposite signs near the range
            out = (keep * v + c * other,)
            kept = (c[..., None], u[..., None])
            if len(carry) > 1:  # the matrix: the same blend of whole rows
                out += (_blend_rows(xp, c, carry[1], partner),)
            return out, kept

        xs = (w.schedule,) if gate is None else (w.schedule, gate)
        carry, kept = adapter.scan_blocks(xp, body, (x,) if p is None else (x, p), xs, 1, looped=True)
        return (carry[0], *kept) if p is None else (carry[0], *kept, carry[1])

    def back(self, xp: Any, w: Wiring, c: Any, u: Any, g: Any, gc: Any = None, gate: Any = None) -> Any:
        """The input's cotangent from the wires' ``g`` after the last layer and the shares' ``gc`` (``(..., n, K)``; None: 0)."""
        adapter = get_adapter(xp)
        s, lam, dist = self.steepness, self.art_lambda, self.distribution

        tau = s * w.side

        def body(carry: Any, cols: tuple[Any, ...]) -> tuple[Any, tuple[()]]:
            k, ck, uk = cols[0], cols[1][..., 0], cols[2][..., 0]
            partner = _column(xp, w.partner, k)
            f1 = comparators.slope(xp, dist, uk, s, lam)
            a = carry * (ck + uk * f1)  # 0 on a gated comparator (share and argument 0)
            if gc is not None:
                tau_k = _column(xp, tau, k)
                if gate is not None:
                    tau_k = xp.where(cols[-1][..., 0], tau_k, xp.zeros_like(tau_k))
                a = a + cols[3][..., 0] * (tau_k * f1)
            return carry - a + _partners(xp, a, partner), ()

        xs = (w.schedule, c, u) if gc is None else (w.schedule, c, u, gc)
        if gate is not None:
            xs += (gate,)
        return adapter.scan_blocks(xp, body, g, _flip(xp, xs), 1)[0]

    def carry_back(self, xp: Any, w: Wiring, c: Any, z: Any) -> tuple[Any, Any]:
        """``(L_1 ... L_K z, the vector entering each layer)``: ``z`` carried back through the network (forward)."""

        def body(carry: Any, cols: tuple[Any, ...]) -> tuple[Any, tuple[Any]]:
            k, ck = cols[0], cols[1][..., 0]
            partner = _column(xp, w.partner, k)
            # positions (or the top-k weights) are moderate: the difference form, which idle wires keep exactly
            return carry + ck * (_partners(xp, carry, partner) - carry), (carry[..., None],)

        z, (entering,) = get_adapter(xp).scan_blocks(xp, body, z, _flip(xp, (w.schedule, c)), 1, looped=True)
        return z, xp.flip(entering, axis=-1)

    def chain_back(self, xp: Any, w: Wiring, c: Any, entering: Any, ct: Any, *, rows: bool) -> Any:
        """Each share's cotangent (``(..., n, K)``) for a linear chain ``z <- (1 - c) z + c z_p`` through the layers.

        ``entering``: what entered each layer; ``ct``: the cotangent of the
        chain's result, carried back through the layers (each its own
        transpose). ``rows=False``: the positions' chain, a vector that ran
        from the last layer (its cotangent comes back from the first);
        ``rows=True``: the matrix's, rows that ran from the first layer. The
        share of wire i meets ``z_p(i) - z_i`` of what entered its layer.
        """
        reverse = rows
        axis = -2 if rows else -1

        def body(carry: Any, cols: tuple[Any, ...]) -> tuple[Any, tuple[Any]]:
            k, ck, zk = cols[0], cols[1][..., 0], cols[2][..., 0]
            partner = _column(xp, w.partner, k)
            gc = carry * (_partners(xp, zk, partner, axis) - zk)
            share = ck[..., None] if rows else ck
            back = (1.0 - share) * carry + _partners(xp, share * carry, partner, axis)
            return back, ((xp.sum(gc, axis=-1) if rows else gc)[..., None],)

        xs = (w.schedule, c, entering)
        _, (gc,) = get_adapter(xp).scan_blocks(xp, body, ct, _flip(xp, xs) if reverse else xs, 1)
        return xp.flip(gc, axis=-1) if reverse else gc

    def rows_back(self, xp: Any, w: Wiring, c: Any, ct: Any) -> Any:
        """Each share's cotangent (``(..., n, K)``) for the matrix's chain, from the matrix's cotangent ``ct``.

        The chain acts on every column alike, so the columns go in blocks of
        ``b``: each block's identity columns are carried through the layers
        again (keeping what entered each layer, ``(..., n, b, K)``) and
        :meth:`chain_back` takes the block's share of the cotangents. About
        ``K / 8`` blocks of ``b = 8 n / K`` columns hold ``8 n^2`` per row,
        where keeping every layer's matrix would hold ``K n^2``: the work is
        the forward's once more, in ``K / 8`` times its steps (launches).
        """
        adapter = get_adapter(xp)
        n, k = c.shape[-2], c.shape[-1]
        b = min(n, max(-(-n // -(-k // _LAYERS_PER_BLOCK)), _COLUMNS))
        dev = _device(c)
        idx = index_dtype(xp, dev)
        wire = xp.arange(n, dtype=idx, device=dev)[:, None]
        offsets = xp.arange(b, dtype=idx, device=dev)

        def forward(carry: Any, cols: tuple[Any, ...]) -> tuple[Any, tuple[Any]]:
            return _blend_rows(xp, cols[1][..., 0], carry, _column(xp, w.partner, cols[0])), (carry[..., None],)

        def block(total: Any, cols: tuple[Any, ...]) -> tuple[Any, tuple[()]]:
            j = cols[0] * b + offsets  # this block's columns; those past n are zero in both chains
            inside = j < n
            eye = xp.broadcast_to(xp.astype(wire == j, c.dtype), c.shape[:-2] + (n, b))
            ct_j = _partners(xp, ct, xp.where(inside, j, xp.zeros_like(j)))
            ct_j = xp.where(inside, ct_j, xp.zeros_like(ct_j))
            _, (entering,) = adapter.scan_blocks(xp, forward, eye, (w.schedule, c), 1)
            return total + self.chain_back(xp, w, c, entering, ct_j, rows=True), ()

        blocks = xp.arange(-(-n // b), dtype=idx, device=dev)
        return adapter.scan_blocks(xp, block, xp.zeros_like(c), (blocks,), 1)[0]

    def signed(self, xp: Any, v: Any) -> Any:
        return -v if self.descending else v

    kept = 0  # residuals after the shares and arguments, before the valid wires (see :meth:`gradient`)

    def bwd(self, xp: Any, res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        """The input's cotangent (the valid wires get none), from :meth:`gradient` called by name with literal
        options: a compiled torch graph runs it as one op, eagerly (:meth:`~.._lib._adapters.Torch.eagerly`),
        so its loops over the layers stay out of the backward graph, where inductor would miscompile a loop op."""
        (ct,) = cts
        valid = res[2 + self.kept:]
        if ct is None:  # torch: the output was not used
            return (None,) * (1 + len(valid))
        c = res[0]
        arrays = (*res, xp.astype(ct, c.dtype, copy=False), c[..., 0])  # the last: dx's shape and dtype
        (dx,) = get_adapter(xp).eagerly(xp, _gradient, arrays, like=(len(arrays) - 1,), output=type(self).__name__,
                                        literals=self.literals())
        return (dx, *(None,) * len(valid))

    def literals(self) -> tuple[Any, ...]:
        """The fields as Python literals (a NumPy scalar's ``repr`` is not one), in their order: ``cls(*literals)``."""
        return (self.network, self.distribution, float(self.steepness), float(self.art_lambda), bool(self.descending))


class _Sort(_Network):
    """The forward takes, after x, the valid wires (a mask's prefix), if any: a residual too, for the gate."""

    def fwd(self, xp: Any, x: Any, *valid: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        w = self.wiring(xp, x, x.shape[-1])
        gate = self.gate(xp, w, valid[0]) if valid else None
        y, c, u = self.layers(xp, w, self.signed(xp, x), gate=gate)
        return (self.signed(xp, y),), (c, u, *valid)

    def gradient(self, xp: Any, res: tuple[Any, ...], ct: Any) -> Any:
        c, u = res[:2]
        valid = res[2:]
        w = self.wiring(xp, c, c.shape[-2])
        gate = self.gate(xp, w, valid[0]) if valid else None
        return self.back(xp, w, c, u, ct, gate=gate)  # the two sign flips cancel


class _Chained(_Network):
    """An output carried through the layers by a linear chain (residuals: shares, arguments, then :attr:`kept` more)."""

    kept = 1  # the rank keeps what entered each layer; the matrix none (its backward recomputes them)

    def share_cotangents(self, xp: Any, w: Wiring, c: Any, kept: tuple[Any, ...], ct: Any) -> Any:
        return self.chain_back(xp, w, c, kept[0], ct, rows=False)

    def gradient(self, xp: Any, res: tuple[Any, ...], ct: Any) -> Any:
        c, u = res[:2]
        valid = res[2 + self.kept:]
        w = self.wiring(xp, c, c.shape[-2])
        gc = self.share_cotangents(xp, w, c, res[2:2 + self.kept], ct)
        zero = xp.zeros(c.shape[:-1], dtype=c.dtype, device=_device(c))
        gate = self.gate(xp, w, valid[0]) if valid else None
        return self.signed(xp, self.back(xp, w, c, u, zero, gc, gate))


@dataclasses.dataclass(frozen=True)
class _Rank(_Chained):
    levels: tuple[float, ...] | None = None  # the value of each position carried back (None: 1..n, the ranks)

    def positions(self, xp: Any, x: Any) -> Any:
        n = x.shape[-1]
        device = _device(x)
        if self.levels is None:
            return xp.broadcast_to(xp.arange(1, n + 1, dtype=x.dtype, device=device), x.shape)
        return xp.broadcast_to(xp.asarray(self.levels, dtype=x.dtype, device=device), x.shape)

    def literals(self) -> tuple[Any, ...]:
        return (*super().literals(), None if self.levels is None else tuple(float(v) for v in self.levels))

    def fwd(self, xp: Any, x: Any, *valid: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        w = self.wiring(xp, x, x.shape[-1])
        gate = self.gate(xp, w, valid[0]) if valid else None
        _, c, u = self.layers(xp, w, self.signed(xp, x), gate=gate)
        ranks, entering = self.carry_back(xp, w, c, self.positions(xp, x))
        return (ranks,), (c, u, entering, *valid)



class _Matrix(_Chained):
    kept = 0

    def share_cotangents(self, xp: Any, w: Wiring, c: Any, kept: tuple[Any, ...], ct: Any) -> Any:
        return self.rows_back(xp, w, c, ct)

    def fwd(self, xp: Any, x: Any, *valid: Any) -> tuple[tuple[Any], tuple[Any, ...]]:
        w = self.wiring(xp, x, x.shape[-1])
        n = x.shape[-1]
        eye = xp.broadcast_to(xp.eye(n, dtype=x.dtype, device=_device(x)), x.shape + (n,))
        gate = self.gate(xp, w, valid[0]) if valid else None
        _, c, u, p = self.layers(xp, w, self.signed(xp, x), eye, gate=gate)
        return (p,), (c, u, *valid)


def _gradient(xp: Any, *arrays: Any, output: str, literals: tuple[Any, ...]) -> tuple[Any]:
    """``(dx,)`` of the network ``output`` (a class name here) with options ``literals``, from its residuals and the
    cotangent (``arrays``: those, then an array shaped like dx)."""
    spec = {"_Sort": _Sort, "_Rank": _Rank, "_Matrix": _Matrix}[output](*literals)
    return (spec.gradient(xp, arrays[:-2], arrays[-2]),)


def _spec(cls: type, opts: Any, descending: bool, **extra: Any) -> Any:
    return cls(opts.network, opts.distribution, opts.steepness, opts.art_lambda, descending, **extra)


def _run(xp: Any, spec: Any, x: Any, mask: Any, output: str) -> Any:
    """``spec`` through ``custom_backward``; with a mask, on each row's valid entries moved (in order) to the first wires."""
    if mask is None:
        return custom_backward(xp, spec.fwd, spec.bwd, (x,), residuals=rebuilt(spec.fwd))
    adapter = get_adapter(xp)
    order = adapter.sort_order(xp, xp.astype(~mask, x.dtype))[1]  # stable: the valid entries first, in their order
    inverse = adapter.invert_permutation(xp, order)
    valid = masked.prefix(xp, mask)
    (value,), back = custom_backward(xp, spec.fwd, spec.bwd, (adapter.take(xp, x, order), valid), names=("x", "mask"),
                                     residuals=rebuilt(spec.fwd))

    def items(a: Any, index: Any) -> Any:  # a's items (its last axis) by index: the ranks', or each matrix row's
        return adapter.take(xp, a, index if a.ndim == index.ndim else xp.broadcast_to(index[..., None, :], a.shape))

    if output != "sort":  # the items back in their own order
        value = items(value, inverse)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        ct = cts[0]
        if ct is not None and output != "sort":
            ct = items(ct, order)
        dx = back((ct,))["x"]
        return {"x": None if dx is None else adapter.take(xp, dx, inverse)}

    if output == "matrix":
        return masked.squared(xp, (value,), pullback, mask)
    return masked.as_masked_operator(xp, (value,), pullback, mask, valid if output == "sort" else mask)


def _softness_key(opts: Any, params: dict[str, Any]) -> str:
    """The softness calibration of a sorting network: its comparators' distribution decides its blur."""
    return f"diffsort-{opts.distribution}"


@core(output_shapes=same_shape, batched={"mask": (0,)})
@masked.zeros_masked_input
@finite_rows
@softened(_softness_key, lambda opts, params: True)
@tempered("steepness", lambda params, opts: (1, -1))
def sort_core(xp: Any, x: Any, opts: Any, *, descending: bool, mask: Any = None) -> Any:
    """The wires after the last layer: ``P x``; ``mask``: the network of the valid entries, their n_v values first."""
    return _run(xp, _spec(_Sort, opts, descending), x, mask, "sort")


@core(output_shapes=same_shape, batched={"mask": (0,)})
@masked.zeros_masked_input
@finite_rows
@softened(_softness_key, lambda opts, params: False)
@tempered("steepness", lambda params, opts: (1, 0))
def rank_core(xp: Any, x: Any, opts: Any, *, descending: bool, levels: tuple[float, ...] | None = None, mask: Any = None) -> Any:
    """The positions carried back through the network: ``P^T (1..n)``, or ``P^T levels`` (the top-k cross-entropy's weights).

    ``mask``: the network of each row's valid entries alone (their ranks 1..n_v).
    """
    return _run(xp, _spec(_Rank, opts, descending, levels=levels), x, mask, "rank")


@core(output_shapes=square_matrix, batched={"mask": (0,)})
@masked.zeros_masked_input
@finite_rows
@softened(_softness_key, lambda opts, params: False)
@tempered("steepness", lambda params, opts: (1, 0))
def matrix_core(xp: Any, x: Any, opts: Any, *, descending: bool, mask: Any = None) -> Any:
    """``P`` itself, rows the positions: ``P @ x`` is the soft sort; ``mask``: the network of the valid entries."""
    return _run(xp, _spec(_Matrix, opts, descending), x, mask, "matrix")
