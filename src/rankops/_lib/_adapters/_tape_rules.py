"""The recording namespace's functions: each computes on the backend and records its pullback (:mod:`._tape`).

Each rule is the transposed Jacobian of its function applied to a cotangent
``g`` shaped like the function's value; a binary function's cotangents are
summed back over broadcast axes by :func:`._tape.backward`. Ties of
``maximum`` / ``minimum`` / ``max`` / ``min`` share the gradient equally (as
torch does), ``clip`` passes it where the input lies inside its bounds, ends
included, and ``abs`` gives 0 at 0.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable

from .._compat import device as _device, is_array
from .._numerics import unbroadcast
from ._traced import Traced, raw


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted(a % ndim for a in ((axis,) if isinstance(axis, int) else axis)))


class Rules:
    """The differentiable functions of the array API, recorded (mixed into :class:`._tape.Namespace`)."""

    xp: Any
    record: Callable[..., Any]
    adapter: Any

    # -- element-wise ----------------------------------------------------------------------

    def _unary(self, fn: Callable[[Any], Any], x: Any, slope: Callable[[Any, Any], Any]) -> Any:
        u = raw(x)
        out = fn(u)
        return self.record(out, (x, lambda g: g * slope(u, out)))

    def negative(self, x: Any) -> Any:
        return self.record(-raw(x), (x, lambda g: -g))

    def abs(self, x: Any) -> Any:
        return self._unary(self.xp.abs, x, lambda u, out: self.xp.sign(u))

    def exp(self, x: Any) -> Any:
        return self._unary(self.xp.exp, x, lambda u, out: out)

    def expm1(self, x: Any) -> Any:
        return self._unary(self.xp.expm1, x, lambda u, out: out + 1)

    def log(self, x: Any) -> Any:
        return self._unary(self.xp.log, x, lambda u, out: 1 / u)

    def log1p(self, x: Any) -> Any:
        return self._unary(self.xp.log1p, x, lambda u, out: 1 / (1 + u))

    def log2(self, x: Any) -> Any:
        return self._unary(self.xp.log2, x, lambda u, out: 1 / (u * math.log(2.0)))

    def sqrt(self, x: Any) -> Any:
        return self._unary(self.xp.sqrt, x, lambda u, out: 0.5 / out)

    def square(self, x: Any) -> Any:
        return self._unary(self.xp.square, x, lambda u, out: 2 * u)

    def tanh(self, x: Any) -> Any:
        return self._unary(self.xp.tanh, x, lambda u, out: 1 - out * out)

    def atan(self, x: Any) -> Any:
        return self._unary(self.xp.atan, x, lambda u, out: 1 / (1 + u * u))

    def add(self, a: Any, b: Any) -> Any:
        return self.record(raw(a) + raw(b), (a, lambda g: g), (b, lambda g: g))

    def subtract(self, a: Any, b: Any) -> Any:
        return self.record(raw(a) - raw(b), (a, lambda g: g), (b, lambda g: -g))

    def multiply(self, a: Any, b: Any) -> Any:
        ra, rb = raw(a), raw(b)
        return self.record(ra * rb, (a, lambda g: g * rb), (b, lambda g: g * ra))

    def divide(self, a: Any, b: Any) -> Any:
        ra, rb = raw(a), raw(b)
        out = ra / rb
        return self.record(out, (a, lambda g: g / rb), (b, lambda g: -g * out / rb))

    def pow(self, a: Any, b: Any) -> Any:
        xp, ra, rb = self.xp, raw(a), raw(b)
        out = ra**rb

        def exponent(g: Any) -> Any:  # d(a^b)/db = a^b log a, taken as 0 where a <= 0 (as a^b's limit from a > 0)
            if not is_array(ra):
                return g * out * math.log(ra) if ra > 0 else g * 0.0
            safe = xp.where(ra > 0, ra, xp.ones_like(ra))
            return xp.where(ra > 0, g * out * xp.log(safe), xp.zeros_like(g * out))

        return self.record(out, (a, lambda g: g * rb * ra ** (rb - 1)), (b, exponent))

    def _extremum(self, fn: Callable[[Any, Any], Any], wins: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
        xp, ra, rb = self.xp, raw(a), raw(b)
        out = fn(ra, rb)

        def share(first: Any, second: Any) -> Callable[[Any], Any]:
            return lambda g: xp.where(wins(first, second), g, xp.where(first == second, g / 2, xp.zeros_like(g)))

        return self.record(out, (a, share(ra, rb)), (b, share(rb, ra)))

    def maximum(self, a: Any, b: Any) -> Any:
        return self._extremum(self.xp.maximum, operator.gt, a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        return self._extremum(self.xp.minimum, operator.lt, a, b)

    def where(self, condition: Any, a: Any, b: Any) -> Any:
        xp, c = self.xp, raw(condition)
        out = xp.where(c, raw(a), raw(b))
        return self.record(out, (a, lambda g: xp.where(c, g, xp.zeros_like(g))), (b, lambda g: xp.where(c, xp.zeros_like(g), g)))

    def clip(self, x: Any, /, min: Any = None, max: Any = None) -> Any:
        xp, u, lo, hi = self.xp, raw(x), raw(min), raw(max)
        out = xp.clip(u, lo, hi)
        inside = xp.ones_like(u, dtype=xp.bool)
        if lo is not None:
            inside = inside & (u >= lo)
        if hi is not None:
            inside = inside & (u <= hi)
        pulls = [(x, lambda g: xp.where(inside, g, xp.zeros_like(g)))]
        if lo is not None:
            pulls.append((min, lambda g: xp.where(u < lo, g, xp.zeros_like(g))))
        if hi is not None:
            pulls.append((max, lambda g: xp.where(u > hi, g, xp.zeros_like(g))))
        return self.record(out, *pulls)

    # -- reductions --------------------------------------------------------------------------

    def _spread(self, g: Any, shape: tuple[int, ...], axis: Any, keepdims: bool) -> Any:
        """A reduction's cotangent broadcast back over the reduced axes of an array of ``shape``."""
        if not keepdims:
            for a in _axes(axis, len(shape)):
                g = self.xp.expand_dims(g, axis=a)
        return self.xp.broadcast_to(g, shape)

    def sum(self, x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        u = raw(x)
        out = self.xp.sum(u, axis=axis, dtype=dtype, keepdims=keepdims)
        return self.record(out, (x, lambda g: self._spread(g, tuple(u.shape), axis, keepdims)))

    def mean(self, x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
        u = raw(x)
        count = math.prod(u.shape[a] for a in _axes(axis, u.ndim))
        out = self.xp.mean(u, axis=axis, keepdims=keepdims)
        return self.record(out, (x, lambda g: self._spread(g / count, tuple(u.shape), axis, keepdims)))

    def _reduce_extremum(self, fn: Callable[..., Any], x: Any, axis: Any, keepdims: bool) -> Any:
        xp, u = self.xp, raw(x)
        out = fn(u, axis=axis, keepdims=keepdims)

        def pull(g: Any) -> Any:
            hit = u == self._spread(out, tuple(u.shape), axis, keepdims)
            ties = xp.sum(xp.astype(hit, u.dtype), axis=axis, keepdims=True)
            return xp.where(hit, self._spread(g, tuple(u.shape), axis, keepdims) / ties, xp.zeros_like(u))

        return self.record(out, (x, pull))

    def max(self, x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
        return self._reduce_extremum(self.xp.max, x, axis, keepdims)

    def min(self, x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
        return self._reduce_extremum(self.xp.min, x, axis, keepdims)

    def cumulative_sum(self, x: Any, /, *, axis: Any = None, dtype: Any = None, include_initial: bool = False) -> Any:
        xp, u = self.xp, raw(x)
        axis = -1 if axis is None else axis
        out = xp.cumulative_sum(u, axis=axis, dtype=dtype, include_initial=include_initial)

        def pull(g: Any) -> Any:
            if include_initial:
                g = xp.take(g, xp.arange(1, g.shape[axis], device=_device(u)), axis=axis)
            return xp.flip(xp.cumulative_sum(xp.flip(g, axis=axis), axis=axis), axis=axis)

        return self.record(out, (x, pull))

    # -- shapes ------------------------------------------------------------------------------

    def _reshaped(self, out: Any, x: Any) -> Any:
        shape = tuple(raw(x).shape)
        return self.record(out, (x, lambda g: self.xp.reshape(g, shape)))

    def reshape(self, x: Any, /, shape: tuple[int, ...], **kwargs: Any) -> Any:
        return self._reshaped(self.xp.reshape(raw(x), shape, **kwargs), x)

    def expand_dims(self, x: Any, /, *, axis: int = 0) -> Any:
        return self._reshaped(self.xp.expand_dims(raw(x), axis=axis), x)

    def squeeze(self, x: Any, /, axis: Any) -> Any:
        return self._reshaped(self.xp.squeeze(raw(x), axis=axis), x)

    def broadcast_to(self, x: Any, /, shape: tuple[int, ...]) -> Any:
        return self.record(self.xp.broadcast_to(raw(x), shape), (x, lambda g: g))  # summed back by the tape

    def broadcast_arrays(self, *arrays: Any) -> list[Any]:
        shape = tuple(self.xp.broadcast_arrays(*[raw(a) for a in arrays])[0].shape)
        return [self.broadcast_to(a, shape) for a in arrays]

    def moveaxis(self, x: Any, source: Any, destination: Any, /) -> Any:
        out = self.xp.moveaxis(raw(x), source, destination)
        return self.record(out, (x, lambda g: self.xp.moveaxis(g, destination, source)))

    def matrix_transpose(self, x: Any, /) -> Any:
        return self.record(self.xp.matrix_transpose(raw(x)), (x, lambda g: self.xp.matrix_transpose(g)))

    def permute_dims(self, x: Any, /, axes: tuple[int, ...]) -> Any:
        back = tuple(sorted(range(len(axes)), key=lambda i: axes[i]))
        return self.record(self.xp.permute_dims(raw(x), axes), (x, lambda g: self.xp.permute_dims(g, back)))

    def flip(self, x: Any, /, *, axis: Any = None) -> Any:
        return self.record(self.xp.flip(raw(x), axis=axis), (x, lambda g: self.xp.flip(g, axis=axis)))

    def concat(self, arrays: Any, /, *, axis: int = 0) -> Any:
        xp = self.xp
        out = xp.concat([raw(a) for a in arrays], axis=axis)
        bounds = [0]
        for a in arrays:
            bounds.append(bounds[-1] + a.shape[axis])

        def part(i: int) -> Callable[[Any], Any]:
            return lambda g: xp.take(g, xp.arange(bounds[i], bounds[i + 1], device=_device(out)), axis=axis)

        return self.record(out, *[(a, part(i)) for i, a in enumerate(arrays)])

    def stack(self, arrays: Any, /, *, axis: int = 0) -> Any:
        xp = self.xp
        out = xp.stack([raw(a) for a in arrays], axis=axis)

        def part(i: int) -> Callable[[Any], Any]:
            return lambda g: xp.moveaxis(g, axis, 0)[i, ...]

        return self.record(out, *[(a, part(i)) for i, a in enumerate(arrays)])

    def getitem(self, x: Any, key: Any) -> Any:
        xp, u = self.xp, raw(x)
        key = raw(key)
        out = u[key]
        keys = key if isinstance(key, tuple) else (key,)
        if any(is_array(k) for k in keys):
            return self.record(out, (x, _no_rule("indexing with an array (use xp.take)")))
        plain = tuple(k for k in keys if k is not None)  # the new axes of None are dropped from the cotangent

        def pull(g: Any) -> Any:
            grad = xp.zeros_like(u)
            grad[plain] = xp.reshape(g, tuple(u[plain].shape))
            return grad

        return self.record(out, (x, pull))

    # -- gathers and sorts -------------------------------------------------------------------

    def scatter_rows(self, index: Any, g: Any, n: int) -> Any:
        """The pullback of a row-wise gather ``a[..., index]``: each row's ``g`` summed into ``n`` slots by index.

        Sorting the indices makes each slot's entries one segment; each slot then
        reads its segment's total (:func:`.._loops.segment_sum`, exact, no difference
        of prefix sums), 0 where no index points.
        """
        xp, base = self.xp, self.adapter.base
        index = xp.broadcast_to(index, tuple(g.shape))
        g = xp.broadcast_to(g, tuple(index.shape))
        slots, order = base.sort_order(xp, index)
        totals = base.segment_sum(xp, xp.concat([xp.ones_like(slots[..., :1], dtype=xp.bool),
                                                 slots[..., 1:] != slots[..., :-1]], axis=-1), base.take(xp, g, order))
        want = xp.broadcast_to(xp.arange(n, dtype=slots.dtype, device=_device(slots)), tuple(slots.shape[:-1]) + (n,))
        first = base.searchsorted(xp, slots, want, side="left")
        hit = first < slots.shape[-1]
        first = xp.where(hit, first, xp.zeros_like(first))
        found = hit & (base.take(xp, slots, first) == want)
        summed = base.take(xp, totals, first)
        return xp.where(found, summed, xp.zeros_like(summed))

    def _gather_last(self, x: Any, index: Any, axis: int, whole: Callable[[Any, Any], Any]) -> Any:
        xp, u, i = self.xp, raw(x), raw(index)
        out = whole(u, i)
        n = u.shape[axis]

        def pull(g: Any) -> Any:
            rows = xp.moveaxis(i, axis, -1) if i.ndim == g.ndim else i  # take's one index: every row's
            return xp.moveaxis(self.scatter_rows(rows, xp.moveaxis(g, axis, -1), n), -1, axis)

        return self.record(out, (x, pull))

    def take(self, x: Any, indices: Any, /, *, axis: Any = None) -> Any:
        axis = 0 if axis is None else axis
        return self._gather_last(x, indices, axis, lambda u, i: self.xp.take(u, i, axis=axis))

    def take_along_axis(self, x: Any, indices: Any, /, *, axis: int = -1) -> Any:
        return self._gather_last(x, indices, axis, lambda u, i: self.xp.take_along_axis(u, i, axis=axis))

    def sort(self, x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Any:
        xp, base = self.xp, self.adapter.base
        u = xp.moveaxis(raw(x), axis, -1)
        values, order = base.sort_order(xp, u, descending=descending)
        back = base.invert_permutation(xp, order)
        out = xp.moveaxis(values, -1, axis)
        return self.record(out, (x, lambda g: xp.moveaxis(base.take(xp, xp.moveaxis(g, axis, -1), back), -1, axis)))

    # -- types and products --------------------------------------------------------------------

    def astype(self, x: Any, dtype: Any, /, **kwargs: Any) -> Any:
        u = raw(x)
        return self.record(self.xp.astype(u, dtype, **kwargs), (x, lambda g: self.xp.astype(g, u.dtype)))

    def asarray(self, obj: Any, /, *, dtype: Any = None, device: Any = None, copy: Any = None) -> Any:
        if type(obj) is not Traced:
            return self.xp.asarray(obj, dtype=dtype, device=device, copy=copy)
        return obj if dtype is None or dtype == obj.dtype else self.astype(obj, dtype)

    def matmul(self, a: Any, b: Any, /) -> Any:
        xp, ra, rb = self.xp, raw(a), raw(b)
        out = xp.matmul(ra, rb)
        # a 1-D operand is a row (left) or a column (right); its cotangent is reshaped back at the end
        am = ra if ra.ndim > 1 else ra[None, :]
        bm = rb if rb.ndim > 1 else rb[:, None]

        def full(g: Any) -> Any:
            if ra.ndim == 1:
                g = xp.expand_dims(g, axis=-2)
            return xp.expand_dims(g, axis=-1) if rb.ndim == 1 else g

        def to_a(g: Any) -> Any:
            ga = xp.matmul(full(g), xp.matrix_transpose(bm))
            return xp.reshape(unbroadcast(xp, ga, tuple(am.shape)), tuple(ra.shape))

        def to_b(g: Any) -> Any:
            gb = xp.matmul(xp.matrix_transpose(am), full(g))
            return xp.reshape(unbroadcast(xp, gb, tuple(bm.shape)), tuple(rb.shape))

        return self.record(out, (a, to_a), (b, to_b))


def _no_rule(what: str) -> Callable[[Any], Any]:
    def pull(g: Any) -> Any:
        raise NotImplementedError(f"rankops.vjp records no derivative of {what}")

    return pull
