"""Cores and calls: what an operator runs, on what, and how its outputs become the public value.

A :class:`Core` is a kernel written once against the array API for
trailing core axes: ``rule(xp, x, opts, **params) -> (outputs, pullback)``,
``outputs`` a tuple named by ``Core.outputs`` and ``pullback`` the core's
own backward rule, mapping their cotangents (None: zero) to a dict of
cotangents by input name (``"x"``, then parameter names, then array-valued
options such as ``"tau"``). Calling a core gives the outputs, which hosts
with autodiff differentiate themselves; :meth:`Core.vjp` gives the pair.

:func:`prepare` validates the operator's input (namespace, device, dtype,
axis) once and moves the operator axis last (a tuple of axes: moved last
and merged into one); a :class:`Call` bundles the
core, the prepared input, the frozen options and the parameters with a
readout (:class:`Along` for array values) that turns the core's outputs
into the public value and maps the public value's cotangent back.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

import array_api_compat

from ._adapters import get_adapter
from ._compat import namespace, normalize_axes, normalize_axis, real_float_dtypes
from ._options import Options

__all__ = ["Core", "core", "same_shape", "hand_written", "Prepared", "prepare", "Call", "Along"]


class Core:
    """A kernel with its own backward rule; see the module docstring.

    ``tails(core_shape, opts, params)`` gives each output's trailing shape
    (None: one count per call), which lazy backends need before running;
    ``core_ndim`` is the number of trailing core axes of ``x``; ``batched``
    names the parameters that share ``x``'s batch axes, with the core axes
    of ``x`` they span (the marginals of the transport solver).
    """

    def __init__(
        self,
        rule: Callable[..., tuple[tuple[Any, ...], Callable[..., dict[str, Any]]]],
        *,
        tails: Callable[..., dict[str, Any]],
        outputs: tuple[str, ...] = ("value",),
        core_ndim: int = 1,
        batched: Mapping[str, tuple[int, ...]] | None = None,
    ) -> None:
        self.rule, self.tails, self.outputs, self.core_ndim = rule, tails, outputs, core_ndim
        self.batched = dict(batched or {})
        self.__name__ = rule.__name__
        self.__doc__ = rule.__doc__

    def __call__(self, xp: Any, x: Any, opts: Options, **params: Any) -> tuple[Any, ...]:
        return self.rule(xp, x, opts, **params)[0]

    def vjp(self, xp: Any, x: Any, opts: Options, **params: Any) -> tuple[tuple[Any, ...], Callable[..., dict[str, Any]]]:
        return self.rule(xp, x, opts, **params)

    def select(self, outs: tuple[Any, ...], wanted: tuple[str, ...]) -> tuple[Any, ...]:
        return tuple(outs[self.outputs.index(w)] for w in wanted)

    def __repr__(self) -> str:
        return f"<rankops core {self.__name__}>"


def core(*, tails: Callable[..., dict[str, Any]], **kwargs: Any) -> Callable[[Callable[..., Any]], Core]:
    """Decorator: a rule function as a :class:`Core`."""
    return lambda rule: Core(rule, tails=tails, **kwargs)


def same_shape(shape: tuple[int, ...], opts: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """``tails`` of a core whose one output is shaped like its input."""
    return {"value": tuple(shape)}


def hand_written(
    xp: Any, fwd: Callable[..., Any], bwd: Callable[..., Any], arrays: tuple[Any, ...], names: tuple[str, ...] = ("x",)
) -> tuple[tuple[Any, ...], Callable[..., dict[str, Any]]]:
    """A core's ``(outputs, pullback)`` from a forward and its hand-written backward.

    ``fwd(xp, *arrays) -> (outputs, residuals)``, ``bwd(xp, residuals,
    cotangents) -> one gradient per array`` (named by ``names``). Hosts with
    autodiff register the pair (``custom_vjp``) and the pullback recomputes
    the residuals when ``rankops.vjp`` asks for it; elsewhere the forward's
    residuals are kept for the pullback.
    """
    adapter = get_adapter(xp)
    if adapter.autodiff:
        outs, res = adapter.custom_vjp(xp, fwd, bwd, arrays, n_diff=1), None
    else:
        outs, res = fwd(xp, *arrays)

    def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
        grads = bwd(xp, fwd(xp, *arrays)[1] if res is None else res, cts)
        return dict(zip(names, grads))

    return tuple(outs), pullback


@dataclasses.dataclass(frozen=True)
class Prepared:
    """An operator's input after validation: compute dtype, operator axes last and merged into one.

    ``axes`` are the caller's operator axes, normalized and increasing (one
    for an int ``axis``; None: the core axes were already last, as the
    solver's cost). They are moved last in that order and flattened in C
    order into one axis of length n (the product of their lengths); the
    other (batch) axes keep their order in front. :meth:`arrange` does this
    to any array laid out like the input, :meth:`restore` undoes it, and
    :meth:`place` puts an output's trailing axis where the caller expects it.
    Positions are counted from the end, so arrays with extra leading axes
    (samples) are handled alike.
    """

    xp: Any
    x: Any
    axes: tuple[int, ...] | None
    shape: tuple[int, ...]  # the caller's shape
    out_dtype: Any
    name: str  # the input's name in the signature (x, s, cost)

    @property
    def adapter(self) -> Any:
        return get_adapter(self.xp)

    @property
    def n(self) -> int:
        return self.x.shape[-1]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def axis(self) -> int | None:
        """The first operator axis: where an output's one new axis goes (quantile levels, ``num_targets``)."""
        return None if self.axes is None else self.axes[0]

    @property
    def device(self) -> Any:
        return array_api_compat.device(self.x)

    def _layout(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None:
        """``(axes, trailing, sizes)``: the operator axes and their places once moved last (both from the end), their lengths."""
        if self.axes is None:
            return None
        k = len(self.axes)
        return tuple(a - self.ndim for a in self.axes), tuple(range(-k, 0)), tuple(self.shape[a] for a in self.axes)

    def arrange(self, a: Any) -> Any:
        """An array laid out like the caller's input, in the prepared layout (operator axes last, merged)."""
        layout = self._layout()
        if layout is None:
            return a
        axes, trailing, sizes = layout
        if axes != trailing:
            a = self.xp.moveaxis(a, axes, trailing)
        if len(sizes) > 1:
            a = self.xp.reshape(a, tuple(a.shape[: -len(sizes)]) + (math.prod(sizes),))
        return a

    def restore(self, a: Any) -> Any:
        """An array in the prepared layout (a gradient of the input) in the caller's layout: the inverse of :meth:`arrange`."""
        layout = self._layout()
        if layout is None:
            return a
        axes, trailing, sizes = layout
        if len(sizes) > 1:
            a = self.xp.reshape(a, tuple(a.shape[:-1]) + sizes)
        return a if axes == trailing else self.xp.moveaxis(a, trailing, axes)

    def _one_axis(self) -> int:
        """Where an output's one trailing axis goes, counted from the end of an array with the batch axes before it."""
        return self.axes[0] - (self.ndim - len(self.axes) + 1)

    def place(self, out: Any, *, levels: bool = False) -> Any:
        """A core output with a trailing operator axis in the caller's layout.

        An output as long as the input's operator axis is restored whole (the
        caller's shape); one of another length (``num_targets``, ``topk``), or
        any output along quantile ``levels``, becomes one axis at the first
        operator axis' position, the other operator axes dropped.
        """
        if self.axes is None:
            return out
        if not levels and out.shape[-1] == self.n:
            return self.restore(out)
        pos = self._one_axis()
        return out if pos == -1 else self.xp.moveaxis(out, -1, pos)

    def finish(self, out: Any, *, axis_kept: bool = True, levels: bool = False) -> Any:
        """The operator axis back where the caller had it (when the output keeps one, see :meth:`place`), in the caller's dtype."""
        if axis_kept:
            out = self.place(out, levels=levels)
        return out if out.dtype == self.out_dtype else self.xp.astype(out, self.out_dtype)

    def unfinish(self, ct: Any, *, axis_kept: bool = True, levels: bool = False) -> Any:
        """The inverse of :meth:`finish` on a cotangent: compute dtype, operator axis last."""
        ct = self.xp.astype(ct, self.x.dtype)
        if not axis_kept or self.axes is None:
            return ct
        if not levels and ct.ndim == self.ndim:  # restored whole (for one axis, either way is one move)
            return self.arrange(ct)
        pos = self._one_axis()
        return ct if pos == -1 else self.xp.moveaxis(ct, pos, -1)


def prepare(
    x: Any,
    *,
    axis: Any = -1,
    name: str = "x",
    opts: Options | None = None,
    arrays: Mapping[str, Any] | None = None,
    core_ndim: int = 1,
    single: str | None = None,
) -> Prepared:
    """Validate ``x`` and move its operator axis (or axes, merged into one) last.

    ``axis`` is an int or a tuple of ints (see :class:`Prepared`); an
    operator that works along one axis only names itself in ``single``, and
    a tuple then raises ``TypeError``. An operator with several core axes
    (``core_ndim > 1``: the solver's ``(n, m)`` costs) takes them last as
    given, and ``axis`` is not used.

    Array-valued options (a learnable ``tau``) and parameter arrays (levels,
    targets, weights) must share ``x``'s namespace and device; lazy backends
    (Dask) take hyper-parameters as Python numbers only.
    """
    scalars = {} if opts is None else opts.arrays()
    given = {name: x, **scalars, **(arrays or {})}
    xp = namespace(*given.values(), names=tuple(given))
    adapter = get_adapter(xp)
    if scalars and adapter.lazy:
        raise TypeError(f"{', '.join(scalars)} must be Python numbers for Dask inputs, not arrays")
    if len(given) > 1:
        adapter.check_devices(tuple(given.values()), tuple(given))
    compute_dtype, out_dtype = real_float_dtypes(xp, x, name)
    ndim = x.ndim
    axes = None
    if core_ndim == 1:
        if ndim == 0:
            raise ValueError(f"{name} must have at least one dimension to sort along, got a 0-d array")
        axes = (normalize_axis(axis, ndim, where=single),) if single else normalize_axes(axis, ndim)
        for a in axes:
            if x.shape[a] == 0:
                raise ValueError(f"{name} has an empty axis {a} (length 0): there is nothing to sort or rank")
    if x.dtype != compute_dtype:
        # astype copies; inputs are never written to, so no defensive copy otherwise.
        x = xp.astype(x, compute_dtype)
    p = Prepared(xp, x, axes, tuple(x.shape), out_dtype, name)
    return dataclasses.replace(p, x=p.arrange(x))


class Along:
    """Readout of an array value along the operator axis (kept, or dropped as by a scalar quantile level).

    ``levels``: the kept axis is one of quantile levels, which takes the
    first operator axis' place whatever its length (:meth:`Prepared.place`).
    """

    outputs: tuple[str, ...] = ("value",)

    def __init__(self, *, axis_kept: bool = True, levels: bool = False) -> None:
        self.axis_kept, self.levels = axis_kept, levels

    def finish(self, p: Prepared, outs: tuple[Any, ...]) -> Any:
        return p.finish(outs[0], axis_kept=self.axis_kept, levels=self.levels)

    def pull(self, p: Prepared, cts: tuple[Any, ...]) -> tuple[Any, ...]:
        """Cotangents of the public value -> those of ``self.outputs`` (None: zero)."""
        return (p.unfinish(cts[0], axis_kept=self.axis_kept, levels=self.levels),) + (None,) * (len(self.outputs) - 1)


@dataclasses.dataclass(frozen=True)
class Call:
    """One validated operator call: run it with ``adapter.run(call)``, read it with ``finish``."""

    core: Core
    prepared: Prepared
    opts: Options
    params: Mapping[str, Any]  # parameter arrays and Python-valued arguments, by name
    readout: Any = Along()
    along: tuple[str, ...] = ()  # parameters laid out like the input (operator axis last): their gradients are moved back too

    @property
    def xp(self) -> Any:
        return self.prepared.xp

    @property
    def x(self) -> Any:
        return self.prepared.x

    @property
    def adapter(self) -> Any:
        return self.prepared.adapter

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.readout.outputs

    def finish(self, outs: tuple[Any, ...]) -> Any:
        return self.readout.finish(self.prepared, outs)

    def pull(self, cts: tuple[Any, ...]) -> tuple[Any, ...]:
        return self.readout.pull(self.prepared, cts)

    def gradients(self, grads: Mapping[str, Any]) -> dict[str, Any]:
        """The core's gradients by argument name, the input's in the caller's layout."""
        out = dict(grads)
        out[self.prepared.name] = self.prepared.restore(out.pop("x"))
        for name in self.along:
            if out.get(name) is not None:
                out[name] = self.prepared.restore(out[name])
        return out
