"""The binding machinery: a validated call, its input layout, and the public operator that runs it.

A core (:class:`~._adapters.Core`) is run on a :class:`Call`: the core,
the prepared input, the frozen options and the parameters.
:func:`prepare` validates the operator's input (namespace, device, dtype,
axis) once and moves the operator axis last (a tuple of axes: moved last
and merged into one). The call's :class:`Layout` is the one map between
the caller's layout and the core's, both ways; a readout (:class:`ValueReadout`
for array values) turns the core's outputs into the public value through
it and maps the public value's cotangent back, and :meth:`Call.gradients`
lays the input's gradient out as the caller's input.

A public operator is written as a function that validates its arguments and
returns a :class:`~._calls.Call`; the :func:`operator` decorator builds from
it an :class:`Operator`, an object with

- ``__call__``: bind the arguments, run the call's core through the adapter
  of its namespace, read the outputs out (the public value);
- ``vjp``: the same value and a function mapping its cotangent to one
  gradient per array argument, by the backend's reverse mode on torch and JAX,
  by the core's own backward rule elsewhere (NumPy, CuPy, Dask,
  array-api-strict).

and returns a plain function that calls it (tools expect functions:
``inspect``, documentation generators, ``torch.compile``, pickling by name),
the :class:`Operator` being its ``operator`` attribute. ``rankops.vjp(fun,
...)`` is ``fun.operator.vjp(...)``.

Nothing here depends on state outside the call: the rule used by ``vjp`` is
the very core the call runs.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from typing import Any, Callable, Generic, Mapping, ParamSpec, TypeVar, overload

from ._adapters import Core, get_adapter
from ._adapters._tape import traced_call
from ._adapters._traced import Traced
from ._arguments import as_argument, call_with, differentiable_arguments, float_leaf, positional_names
from ._compat import is_array, namespace, normalize_axes, normalize_axis, real_float_dtypes, device as _device
from ._options import Options

__all__ = ["INPUT", "LIKE_INPUT", "VALUE", "LEVELS", "REDUCED", "Layout", "Prepared", "prepare", "Call", "ValueReadout", "Operator", "operator", "ArrayValue", "check_cotangent_shapes"]

P = ParamSpec("P")
R = TypeVar("R")  # the public value a call reads out: an array, a (value, info) pair, a SinkhornResult


# Roles of the arrays that cross a call, for :class:`Layout`. The input and
# the parameters laid out like it (input-shaped weights, soft_kendall_tau's y,
# sort_with's criterion) and their gradients are ``INPUT`` / ``LIKE_INPUT``; an
# output is ``VALUE`` (along the operator axis), ``LEVELS`` (a trailing axis
# of quantile levels) or ``REDUCED`` (no operator axis left).
INPUT, LIKE_INPUT, VALUE, LEVELS, REDUCED = "input", "like_input", "value", "levels", "reduced"
_OUTPUT_ROLES = (VALUE, LEVELS, REDUCED)


@dataclasses.dataclass(frozen=True)
class Layout:
    """The one map between the caller's layout and the core's, both ways: ``to_core`` and ``to_caller`` are inverse.

    ``axes`` are the caller's operator axes, normalized and increasing (one
    for an int ``axis``; None: the core axes were already last, as the
    solver's cost). In the core's layout they are moved last in that order
    and flattened in C order into one axis of length n (the product of
    their lengths); the other (batch) axes keep their order in front.
    Positions are counted from the end, so arrays with extra leading axes
    (samples) are handled alike. By role:

    - ``INPUT``, ``LIKE_INPUT``: shaped like the input, mapped whole;
    - ``VALUE``: an output as long as n is mapped whole; one of another
      length (``num_targets``, ``topk``) is one axis at the first operator
      axis' place, the other operator axes dropped;
    - ``LEVELS``: the trailing axis at the first operator axis' place,
      whatever its length;
    - ``REDUCED``: no operator axis to move.

    Outputs also change dtype: the core's compute dtype, the caller's
    ``out_dtype`` (float16 in, float16 out).
    """

    xp: Any
    axes: tuple[int, ...] | None
    shape: tuple[int, ...]  # the caller's input shape
    compute_dtype: Any
    out_dtype: Any

    def to_core(self, a: Any, role: str = INPUT) -> Any:
        """An array in the caller's layout (an input, or the cotangent of an output) in the core's."""
        if role in _OUTPUT_ROLES and a.dtype != self.compute_dtype:
            a = self.xp.astype(a, self.compute_dtype)
        if self.axes is None or role == REDUCED:
            return a
        if role in (INPUT, LIKE_INPUT) or (role == VALUE and a.ndim == len(self.shape)):
            return self._merge(a)
        pos = self._one_axis()
        return a if pos == -1 else self.xp.moveaxis(a, pos, -1)

    def to_caller(self, a: Any, role: str = INPUT, *, cast: bool = True) -> Any:
        """An array in the core's layout (an output, or the gradient of an input) in the caller's.

        ``cast=False``: placed as an output of ``role`` but left in its own
        dtype (a report beside the value, such as Sinkhorn's error).
        """
        if self.axes is not None and role != REDUCED:
            if role in (INPUT, LIKE_INPUT) or (role == VALUE and a.shape[-1] == math.prod(self._places()[2])):
                a = self._split(a)
            elif (pos := self._one_axis()) != -1:
                a = self.xp.moveaxis(a, -1, pos)
        if cast and role in _OUTPUT_ROLES and a.dtype != self.out_dtype:
            a = self.xp.astype(a, self.out_dtype)
        return a

    def _places(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """``(axes, trailing, sizes)``: the operator axes and their places once moved last (both from the end), their lengths."""
        axes, ndim = self.axes or (), len(self.shape)
        return tuple(a - ndim for a in axes), tuple(range(-len(axes), 0)), tuple(self.shape[a] for a in axes)

    def _merge(self, a: Any) -> Any:
        axes, trailing, sizes = self._places()
        if axes != trailing:
            a = self.xp.moveaxis(a, axes, trailing)
        if len(sizes) > 1:
            a = self.xp.reshape(a, tuple(a.shape[: -len(sizes)]) + (math.prod(sizes),))
        return a

    def _split(self, a: Any) -> Any:
        axes, trailing, sizes = self._places()
        if len(sizes) > 1:
            a = self.xp.reshape(a, tuple(a.shape[:-1]) + sizes)
        return a if axes == trailing else self.xp.moveaxis(a, trailing, axes)

    def _one_axis(self) -> int:
        """Where an output's one trailing axis goes, counted from the end of an array with the batch axes before it."""
        assert self.axes is not None
        return self.axes[0] - (len(self.shape) - len(self.axes) + 1)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """An operator's input after validation: ``x`` in the compute dtype and the core's :class:`Layout`."""

    x: Any
    layout: Layout
    name: str  # the input's name in the signature (x, s, cost)
    adapter: Any  # the namespace's adapter, fetched once per call

    @property
    def xp(self) -> Any:
        return self.layout.xp

    @property
    def n(self) -> int:
        return self.x.shape[-1]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout.shape

    @property
    def axis(self) -> int | None:
        """The first operator axis: where an output's one new axis goes (quantile levels, ``num_targets``)."""
        return None if self.layout.axes is None else self.layout.axes[0]

    @property
    def out_dtype(self) -> Any:
        return self.layout.out_dtype

    @property
    def device(self) -> Any:
        return _device(self.x)

    def lay_out(self, weights: Any, name: str = "weights") -> Any:
        """Per-entry ``weights`` (real; shaped like the input, or 1-D of length n) in the core's layout and compute dtype."""
        xp = self.xp
        if not xp.isdtype(weights.dtype, ("real floating", "integral")):
            raise TypeError(f"{name} must be a real array, got dtype {weights.dtype}")
        if tuple(weights.shape) == self.shape and weights.ndim > 1:
            weights = self.layout.to_core(weights, LIKE_INPUT)
        elif tuple(weights.shape) != (self.n,):
            raise ValueError(f"{name} must have the shape of {self.name} {self.shape} or ({self.n},), got {tuple(weights.shape)}")
        return xp.astype(weights, self.x.dtype)


def prepare(
    x: Any,
    *,
    axis: Any = -1,
    name: str = "x",
    opts: Options | None = None,
    arrays: Mapping[str, Any] | None = None,
    core_ndim: int = 1,
    one_axis_for: str | None = None,
) -> Prepared:
    """Validate ``x`` and move its operator axis (or axes, merged into one) last.

    ``axis`` is an int or a tuple of ints (see :class:`Prepared`); an
    operator that works along one axis only names itself in ``one_axis_for``,
    and a tuple then raises ``TypeError`` naming it. An operator with several core axes
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
        axes = (normalize_axis(axis, ndim, where=one_axis_for),) if one_axis_for else normalize_axes(axis, ndim)
        for a in axes:
            if x.shape[a] == 0:
                raise ValueError(f"{name} has an empty axis {a} (length 0): there are no entries to sort, rank or compare")
    if x.dtype != compute_dtype:
        # astype copies; inputs are never written to, so no defensive copy otherwise.
        x = xp.astype(x, compute_dtype)
    layout = Layout(xp, axes, tuple(x.shape), compute_dtype, out_dtype)
    return Prepared(layout.to_core(x), layout, name, adapter)


class ValueReadout:
    """Readout of one array value: the core's first output in the caller's layout as ``role`` (:class:`Layout`)."""

    outputs: tuple[str, ...] = ("value",)

    def __init__(self, role: str = VALUE) -> None:
        self.role = role

    def finish(self, p: Prepared, outs: tuple[Any, ...]) -> Any:
        return p.layout.to_caller(outs[0], self.role)

    def pull(self, p: Prepared, cts: tuple[Any, ...]) -> tuple[Any, ...]:
        """Cotangents of the public value -> those of ``self.outputs`` (None: zero)."""
        return (p.layout.to_core(cts[0], self.role),) + (None,) * (len(self.outputs) - 1)


_VALUE_READOUT = ValueReadout()


@dataclasses.dataclass(frozen=True)
class Call(Generic[R]):
    """One validated operator call: run it with ``adapter.run(call)``, read it with ``finish`` (a value of type ``R``)."""

    core: Core
    prepared: Prepared
    opts: Options
    params: Mapping[str, Any]  # parameter arrays and Python-valued arguments, by name
    readout: Any = None  # None: the value along the operator axis (ValueReadout(VALUE)); a default instance here is one torch.compile cannot trace
    input_shaped: tuple[str, ...] = ()  # parameters laid out like the input (operator axis last): their gradients are moved back too
    chain: Mapping[str, tuple[str, Any]] = dataclasses.field(default_factory=dict)  # argument -> (its option, d option/d argument)

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
    def _readout(self) -> Any:
        return _VALUE_READOUT if self.readout is None else self.readout

    @property
    def outputs(self) -> tuple[str, ...]:
        return self._readout.outputs  # type: ignore[no-any-return]

    def finish(self, outs: tuple[Any, ...]) -> R:
        return self._readout.finish(self.prepared, outs)  # type: ignore[no-any-return]

    def pull(self, cts: tuple[Any, ...]) -> tuple[Any, ...]:
        return self._readout.pull(self.prepared, cts)  # type: ignore[no-any-return]

    def gradients(self, grads: Mapping[str, Any]) -> dict[str, Any]:
        """The core's gradients by argument name, the input's in the caller's layout."""
        layout, out = self.prepared.layout, dict(grads)
        out[self.prepared.name] = layout.to_caller(out.pop("x"), INPUT)
        out.update({name: layout.to_caller(out[name], LIKE_INPUT) for name in self.input_shaped if out.get(name) is not None})
        out.update({name: out.pop(option) * slope for name, (option, slope) in self.chain.items() if out.get(option) is not None})
        return out


# -- the public operator ----------------------------------------------------------------------------


def check_cotangent_shapes(cts: tuple[Any, ...], outs: tuple[Any, ...]) -> tuple[Any, ...]:
    for c, o in zip(cts, outs):
        if c is not None and tuple(c.shape) != tuple(o.shape):
            raise ValueError(f"cotangent for the output has shape {tuple(c.shape)}, expected {tuple(o.shape)}")
    return cts


class ArrayValue:
    """The public value is one array: its cotangent is an array of the same shape."""

    @staticmethod
    def differentiable(value: Any) -> tuple[Any, ...]:
        return (value,)

    @staticmethod
    def cotangents(ct: Any, outs: tuple[Any, ...]) -> tuple[Any, ...]:
        if not is_array(ct):
            raise TypeError(f"the cotangent must be an array shaped like the value, got {type(ct).__name__}")
        return check_cotangent_shapes((ct,), outs)


class Operator:
    """A public rankops operator: call it, or differentiate it with :meth:`vjp`."""

    def __init__(self, bind: Callable[..., Any], value: Any = ArrayValue, methods: tuple[str, ...] = ()) -> None:
        functools.update_wrapper(self, bind)
        self._bind = bind
        self._value = value
        self.methods = tuple(methods)
        self.positional = positional_names(bind)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # inside rankops.vjp of a loss: recorded whole, by this operator's own rule
        if any(type(a) is Traced for a in (*args, *kwargs.values())):
            return traced_call(self.vjp, self._value.differentiable, args, kwargs,
                               functools.partial(differentiable_arguments, self.__name__, self.positional))
        call = self._bind(*args, **kwargs)
        return call.finish(call.adapter.run(call))

    def __repr__(self) -> str:
        return f"<rankops operator {self.__name__}>"

    def vjp(self, x: Any, /, *args: Any, **options: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
        """``(value, vjp_fn)``: ``vjp_fn(ct)`` is one gradient per array argument, in call order."""
        if "return_info" in options:
            raise TypeError(
                "rankops.vjp does not take return_info: the value it returns is the one being differentiated; "
                "call the operator with return_info=True to read the convergence info"
            )
        diff = differentiable_arguments(self.__name__, self.positional, (x, *args), options)
        xp = namespace(x, names=(self.positional[0],))
        adapter = get_adapter(xp)
        if adapter.autodiff:
            return self._autodiff_vjp(adapter, x, args, options, diff)
        return self._rule_vjp(xp, x, args, options, diff)

    def _autodiff_vjp(self, adapter: Any, x: Any, args: Any, options: Any, diff: list[tuple[str, Any]]) -> Any:
        names = [name for name, _ in diff]

        def f(*arrays: Any) -> Any:
            return call_with(self, self.positional, (x, *args), options, dict(zip(names, arrays)))

        value, outs, pull = adapter.autodiff_vjp(f, [float_leaf(v, name) for name, v in diff], self._value.differentiable)
        return value, lambda ct: pull(self._value.cotangents(ct, outs))

    def _rule_vjp(self, xp: Any, x: Any, args: Any, options: Any, diff: list[tuple[str, Any]]) -> Any:
        call = self._bind(x, *args, **options)
        outs, pullback = call.adapter.rule_vjp(call)
        value = call.finish(outs)
        differentiable = self._value.differentiable(value)

        def vjp_fn(ct: Any) -> tuple[Any, ...]:
            grads = call.gradients(pullback(call.pull(self._value.cotangents(ct, differentiable))))
            return tuple(as_argument(xp, grads.get(name), arg, name) for name, arg in diff)

        return value, vjp_fn


@overload
def operator(bind: Callable[P, Call[R]], /) -> Callable[P, R]: ...


@overload
def operator(*, value: Any = ArrayValue, methods: tuple[str, ...] = ()) -> Callable[[Callable[P, Call[R]]], Callable[P, R]]: ...


def operator(bind: Callable[P, Call[R]] | None = None, /, *, value: Any = ArrayValue, methods: tuple[str, ...] = ()) -> Any:
    """Decorator: a binding function (it validates its arguments and returns a ``Call[R]``) as a public operator returning ``R``.

    ``methods``: the values of the operator's ``method`` option (the one
    method it is, for an operator without the option); ``rankops._registry``
    and the suites read them from ``fun.operator.methods``. The public
    function's signature is the binding's with the return annotation of the
    value (``R``), as type checkers see it.
    """
    if bind is None:
        return functools.partial(operator, value=value, methods=methods)
    op = Operator(bind, value, methods)

    @functools.wraps(bind)
    def public(*args: Any, **kwargs: Any) -> Any:
        return op(*args, **kwargs)

    returns = bind.__annotations__.get("return")
    if isinstance(returns, str) and returns.startswith("Call[") and returns.endswith("]"):
        public.__annotations__ = {**bind.__annotations__, "return": returns[len("Call[") : -1]}
        public.__signature__ = inspect.signature(bind).replace(return_annotation=public.__annotations__["return"])  # type: ignore[attr-defined]
    public.operator = op  # type: ignore[attr-defined]
    return public
