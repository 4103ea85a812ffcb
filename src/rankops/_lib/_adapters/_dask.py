"""Dask adapter: an operator's core mapped over blocks of the batch axes.

The core axes are rechunked into one chunk (sorting needs whole rows, the
solver whole cost matrices), batch axes keep the caller's chunking, so the
task graph grows with the number of chunks and never with the work done
inside a block (Sinkhorn iterations included). Each block runs the core in
the namespace of the chunks themselves (NumPy, or CuPy for a Dask array of
CuPy chunks: the array's ``meta`` says which). Parameter arrays reach every
block whole (quantile levels, targets, weights), or blocked like the input
when they share its batch axes (the marginals of ``rankops.sinkhorn``).
"""

from __future__ import annotations

import math
import string
from typing import Any, Callable

import array_api_compat
import dask.array as da

from .._numerics import unbroadcast
from ._generic import PortableAdapter, scatter

__all__ = ["Dask", "ADAPTER"]


class _Blocks:
    """One call laid out for ``da.blockwise``: index letters, rechunked arrays, the chunks' namespace."""

    def __init__(self, call: Any) -> None:
        core = call.core
        self.call = call
        k = core.core_ndim
        nb = call.x.ndim - k
        self.nb = nb
        self.x = call.x.rechunk({i: -1 for i in range(nb, call.x.ndim)})
        self.batch_shape = tuple(self.x.shape[:nb])
        self.batch_chunks = self.x.chunks[:nb]
        self.bxp = array_api_compat.array_namespace(self.x._meta)
        letters = iter(string.ascii_uppercase)
        self.batch = string.ascii_lowercase[:nb]
        core_idx = "".join(next(letters) for _ in range(k))
        self.x_index = self.batch + core_idx
        self.args: list[Any] = [self.x, self.x_index]
        self.names: list[str] = []  # parameter arrays, in the order of self.args
        self.index: dict[str, str] = {}
        self.static = {name: v for name, v in call.params.items() if not isinstance(v, da.Array)}
        for name, a in call.params.items():
            if name in self.static:
                continue
            if name in core.batched:  # shares x's batch axes, spans some of its core axes
                spans = core.batched[name]
                shape = tuple(call.x.shape[nb + i] for i in spans)
                a = da.broadcast_to(a, self.batch_shape + shape).rechunk(self.batch_chunks + tuple((s,) for s in shape))
                idx = self.batch + "".join(core_idx[i] for i in spans)
            else:
                a = a.rechunk(-1)
                idx = "".join(next(letters) for _ in range(a.ndim))
            self.names.append(name)
            self.index[name] = idx
            self.args += [a, idx]
        self.letters = letters  # fresh letters for output and cotangent axes

    def params(self, blocks: tuple[Any, ...]) -> dict[str, Any]:
        return {**self.static, **dict(zip(self.names, blocks))}

    def meta(self, ndim: int, dtype: Any) -> Any:
        return self.bxp.empty((0,) * ndim, dtype=dtype)

    def forward(self, shapes: dict[str, Any]) -> tuple[Any, ...]:
        """The outputs ``call.outputs``: one blockwise task per block; several outputs are packed in one."""
        call, bxp, nb = self.call, self.bxp, self.nb
        core, wanted, dtype = call.core, call.outputs, self.x.dtype

        def outputs(xb: Any, *blocks: Any) -> tuple[Any, ...]:
            return core.select(core(bxp, xb, call.opts, **self.params(blocks)), wanted)

        if len(wanted) == 1 and shapes[wanted[0]] is not None:
            shape = shapes[wanted[0]]
            idx = "".join(next(self.letters) for _ in shape)
            out = da.blockwise(
                lambda *b: outputs(*b)[0], self.batch + idx, *self.args, new_axes=dict(zip(idx, shape)), concatenate=True,
                dtype=dtype, meta=self.meta(nb + len(shape), dtype),
            )
            return (out,)
        # (None: one count per call, the largest over blocks, e.g. the iterations run)
        sizes = [1 if shapes[w] is None else math.prod(shapes[w]) for w in wanted]

        def packed(xb: Any, *blocks: Any) -> Any:
            lead = tuple(xb.shape[:nb])
            flat = [
                bxp.full(lead + (1,), o, dtype=dtype) if shapes[w] is None else bxp.reshape(bxp.astype(o, dtype), lead + (size,))
                for o, w, size in zip(outputs(xb, *blocks), wanted, sizes)
            ]
            return bxp.concat(flat, axis=-1)

        z = next(self.letters)
        pack = da.blockwise(
            packed, self.batch + z, *self.args, new_axes={z: sum(sizes)}, concatenate=True, dtype=dtype,
            meta=self.meta(nb + 1, dtype),
        )
        outs, start = [], 0
        for w, size in zip(wanted, sizes):
            part = pack[..., start : start + size]
            start += size
            if shapes[w] is None:  # an empty batch ran nothing (and max has no identity)
                count = part.max() if math.prod(self.batch_shape) else da.zeros((), dtype=dtype)
                outs.append(count.astype("int64"))
            else:
                outs.append(part.reshape(self.batch_shape + tuple(shapes[w])))
        return tuple(outs)

    def pullback(self, cts: tuple[Any, ...]) -> dict[str, Any]:
        """Gradients by input name; each task recomputes its block's forward, then pulls back."""
        call, bxp, nb = self.call, self.bxp, self.nb
        core = call.core
        given = [(w, c) for w, c in zip(call.outputs, cts) if c is not None]
        ct_args: list[Any] = []
        for _, c in given:
            c = c.rechunk(self.batch_chunks + tuple((s,) for s in c.shape[nb:]))
            ct_args += [c, self.batch + "".join(next(self.letters) for _ in c.shape[nb:])]
        n_ct = len(given)

        def grads(*blocks: Any) -> dict[str, Any]:
            ct_blocks, (xb, *param_blocks) = blocks[:n_ct], blocks[n_ct:]
            pull = core.vjp(bxp, xb, call.opts, **self.params(tuple(param_blocks)))[1]
            return pull(scatter(ct_blocks, tuple(w for w, _ in given), core.outputs))

        args = ct_args + self.args
        position = {name: n_ct + 1 + i for i, name in enumerate(self.names)}
        out = {"x": self._grad(grads, "x", n_ct, self.x_index, args)}
        for name in self.names:
            if name in core.batched:
                g = self._grad(grads, name, position[name], self.index[name], args)
                out[name] = unbroadcast(da, g, tuple(call.params[name].shape))
            else:  # one partial sum per block of rows, then a Dask reduction
                g = self._grad(grads, name, position[name], self.batch + self.index[name], args, partial=True)
                out[name] = g.sum(axis=tuple(range(nb)))
        return out

    def _grad(self, grads: Callable[..., Any], name: str, position: int, index: str, args: list[Any], partial: bool = False) -> Any:
        """The gradient of one input, blockwise; ``position``: where that input's block is among the task's blocks."""
        bxp, dtype = self.bxp, self.x.dtype
        lead = (1,) * self.nb if partial else ()

        def block(*blocks: Any) -> Any:
            g = grads(*blocks).get(name)
            if g is None:  # nothing flowed to this input
                g = bxp.zeros(tuple(blocks[position].shape), dtype=dtype)
            return bxp.reshape(g, lead + tuple(g.shape)) if partial else g

        adjust = dict.fromkeys(self.batch, 1) if partial else None
        return da.blockwise(
            block, index, *args, concatenate=True, dtype=dtype, adjust_chunks=adjust, meta=self.meta(len(index), dtype)
        )


class Dask(PortableAdapter):
    name = "dask"
    lazy = True

    @staticmethod
    def _forward(blocks: _Blocks) -> tuple[Any, ...]:
        call = blocks.call
        return blocks.forward(call.core.output_shapes(call.x.shape[blocks.nb :], call.opts, call.params))

    def run(self, call: Any) -> tuple[Any, ...]:
        return self._forward(_Blocks(call))

    def rule_vjp(self, call: Any) -> tuple[tuple[Any, ...], Callable[[tuple[Any, ...]], dict[str, Any]]]:
        blocks = _Blocks(call)  # one layout (rechunked arrays, index letters) for both passes
        return self._forward(blocks), blocks.pullback

    def rows(self, xp: Any, fn: Callable[..., Any], *arrays: Any, dtype: Any) -> Any:
        first = arrays[0].rechunk({arrays[0].ndim - 1: -1})
        # the others in the first's blocks (same shape): map_blocks pairs blocks by position, not by content
        whole = [first] + [a.rechunk(first.chunks) for a in arrays[1:]]
        bxp = array_api_compat.array_namespace(whole[0]._meta)
        return da.map_blocks(lambda *b: fn(bxp, *b), *whole, dtype=dtype, meta=bxp.empty((0,) * whole[0].ndim, dtype=dtype))


ADAPTER = Dask()
