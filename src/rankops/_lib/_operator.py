"""Public operators: validation once, then a core run through the backend's adapter, with ``vjp``.

A public operator is written as a function that validates its arguments and
returns a :class:`~._calls.Call`; the :func:`operator` decorator builds from
it an :class:`Operator`, an object with

- ``__call__``: bind the arguments, run the call's core through the adapter
  of its namespace, read the outputs out (the public value);
- ``vjp``: the same value and a function mapping its cotangent to one
  gradient per array argument, by the host's reverse mode on torch and JAX,
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

import functools
import inspect
from typing import Any, Callable

import array_api_compat

from ._adapters import get_adapter
from ._compat import is_array, namespace, real_float_dtypes
from ._numerics import unbroadcast

__all__ = ["Operator", "operator", "ArrayValue", "check_cotangent_shapes"]


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

    def __init__(self, bind: Callable[..., Any], value: Any = ArrayValue) -> None:
        functools.update_wrapper(self, bind)
        self._bind = bind
        self._value = value
        params = inspect.signature(bind).parameters.values()
        # the array arguments that may come by position (``q`` and ``k`` may also come by keyword)
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.positional = tuple(p.name for p in params if p.kind in kinds)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
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
        positional = self.positional
        if len(args) > len(positional) - 1:
            raise TypeError(f"{self.__name__} takes at most {len(positional)} positional arguments, got {1 + len(args)}")
        # (name, value) of every array argument, in call order
        named = [(positional[0], x)] + list(zip(positional[1:], args)) + list(options.items())
        diff = [(name, value) for name, value in named if is_array(value)]
        xp = namespace(x, names=(positional[0],))
        adapter = get_adapter(xp)
        if adapter.autodiff:
            return self._autodiff_vjp(adapter, x, args, options, diff)
        return self._rule_vjp(xp, x, args, options, diff)

    def _with_leaves(self, x: Any, args: tuple[Any, ...], options: dict[str, Any], leaves: dict[str, Any]) -> Any:
        """The operator with its array arguments replaced by ``leaves`` (by name)."""
        names = self.positional
        x = leaves.get(names[0], x)
        args = tuple(leaves.get(name, a) for name, a in zip(names[1:], args))
        return self(x, *args, **{k: leaves.get(k, v) for k, v in options.items()})

    def _autodiff_vjp(self, adapter: Any, x: Any, args: Any, options: Any, diff: list[tuple[str, Any]]) -> Any:
        names = [name for name, _ in diff]

        def f(*arrays: Any) -> Any:
            return self._with_leaves(x, args, options, dict(zip(names, arrays)))

        value, outs, pull = adapter.autodiff_vjp(f, [_float_leaf(v, name) for name, v in diff], self._value.differentiable)
        return value, lambda ct: pull(self._value.cotangents(ct, outs))

    def _rule_vjp(self, xp: Any, x: Any, args: Any, options: Any, diff: list[tuple[str, Any]]) -> Any:
        call = self._bind(x, *args, **options)
        outs, pullback = call.adapter.rule_vjp(call)
        value = call.finish(outs)
        differentiable = self._value.differentiable(value)

        def vjp_fn(ct: Any) -> tuple[Any, ...]:
            grads = call.gradients(pullback(call.pull(self._value.cotangents(ct, differentiable))))
            return tuple(_as_argument(xp, grads.get(name), arg, name) for name, arg in diff)

        return value, vjp_fn


def operator(bind: Callable[..., Any] | None = None, *, value: Any = ArrayValue) -> Any:
    """Decorator: a binding function (it validates its arguments and returns a Call) as a public operator."""
    if bind is None:
        return functools.partial(operator, value=value)
    op = Operator(bind, value)

    @functools.wraps(bind)
    def public(*args: Any, **kwargs: Any) -> Any:
        return op(*args, **kwargs)

    public.operator = op  # type: ignore[attr-defined]
    return public


def _float_dtype(xp: Any, value: Any, name: str) -> Any:
    """The floating dtype of ``value``, or the one the operators promote it to (integers, bool)."""
    return value.dtype if xp.isdtype(value.dtype, "real floating") else real_float_dtypes(xp, value, name)[0]


def _float_leaf(value: Any, name: str) -> Any:
    """The value as the floating array the operator computes with (integers are promoted)."""
    xp = array_api_compat.array_namespace(value)
    dtype = _float_dtype(xp, value, name)
    return value if value.dtype == dtype else xp.astype(value, dtype)


def _as_argument(xp: Any, g: Any, arg: Any, name: str) -> Any:
    """A gradient in the shape and floating dtype of its argument (zeros if nothing flowed)."""
    dtype = _float_dtype(xp, arg, name)
    if g is None:
        return xp.zeros(arg.shape, dtype=dtype, device=array_api_compat.device(arg))
    g = unbroadcast(xp, g, tuple(arg.shape))  # sample axes of a stochastic operator
    return xp.astype(g, dtype) if g.dtype != dtype else g
