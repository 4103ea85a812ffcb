"""Traced arrays: what the recording namespace (:mod:`._tape`) computes with.

A :class:`Traced` array wraps one of the backend's arrays and the step that
made it (a :class:`Node`): the traced arrays it was computed from and the
pullback to each. It behaves as an array of its namespace (operators,
indexing, ``shape`` / ``dtype`` / ``device``); comparisons and other
operations without a derivative give the backend's own arrays.
"""

from __future__ import annotations

from typing import Any, Callable

from .._compat import device as _device


def raw(a: Any) -> Any:
    """The backend's array under ``a`` (``a`` itself when it is not traced; tuples and lists element-wise)."""
    if type(a) is Traced:
        return a.value
    if type(a) in (tuple, list):
        return type(a)(raw(b) for b in a)
    return a


def any_live(args: Any, kwargs: Any = None) -> bool:
    """Whether a live traced array (one computed from a leaf) is among ``args`` / ``kwargs``' values (tuples and lists
    looked into)."""
    values = list(args) + list((kwargs or {}).values())
    return any((type(a) is Traced and a.live) or (type(a) in (tuple, list) and any_live(a)) for a in values)


class Node:
    """What one recorded call leaves: the traced arrays it read (``parents``) and ``pull(g)``, one cotangent each."""

    __slots__ = ("parents", "pull")

    def __init__(self, parents: tuple[Any, ...], pull: Callable[[Any], tuple[Any, ...]] | None) -> None:
        self.parents, self.pull = parents, pull


class Group(Node):
    """The node of a call with several differentiable outputs: its cotangent is a tuple, one slot per output."""

    __slots__ = ("templates",)

    def __init__(self, parents: tuple[Any, ...], pull: Callable[[Any], tuple[Any, ...]], templates: tuple[Any, ...]) -> None:
        super().__init__(parents, pull)
        self.templates = templates


class Traced(Node):
    """A backend array recorded on a tape (see the module docstring): use it as any array of its namespace."""

    __slots__ = ("value", "ns", "live")
    __array_ufunc__ = None  # NumPy scalars defer to the reflected operator instead of converting
    records_gradients = True  # read by ``_compat.namespace``

    def __init__(self, ns: Any, value: Any, parents: tuple[Any, ...] = (), pull: Any = None, *, leaf: bool = False) -> None:
        super().__init__(parents, pull)
        # live: a leaf, or computed from one (a constant is neither: the tape records nothing from it)
        self.ns, self.value, self.live = ns, value, leaf or bool(parents)

    def __array_namespace__(self, api_version: str | None = None) -> Any:
        return self.ns

    shape = property(lambda self: tuple(self.value.shape))
    dtype = property(lambda self: self.value.dtype)
    ndim = property(lambda self: self.value.ndim)
    size = property(lambda self: self.value.size)
    device = property(lambda self: _device(self.value))
    mT = property(lambda self: self.ns.matrix_transpose(self))

    def __repr__(self) -> str:
        return f"Traced({self.value!r})"

    def __len__(self) -> int:
        return int(self.shape[0])

    # reading values (the eager loops' exit tests): no gradient
    def __bool__(self) -> bool:
        return bool(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("a traced array is immutable (rankops.vjp records the loss's operations): build a new one with xp.where")

    def to_device(self, device: Any, /, **kwargs: Any) -> Any:
        return self.ns.record(self.value.to_device(device, **kwargs), (self, lambda g: g.to_device(self.device)))

    def __getitem__(self, key: Any) -> Any:
        return self.ns.getitem(self, key)

    def __neg__(self) -> Any:
        return self.ns.negative(self)

    def __pos__(self) -> Any:
        return self

    def __abs__(self) -> Any:
        return self.ns.abs(self)

    def __add__(self, o: Any) -> Any:
        return self.ns.add(self, o)

    def __radd__(self, o: Any) -> Any:
        return self.ns.add(o, self)

    def __sub__(self, o: Any) -> Any:
        return self.ns.subtract(self, o)

    def __rsub__(self, o: Any) -> Any:
        return self.ns.subtract(o, self)

    def __mul__(self, o: Any) -> Any:
        return self.ns.multiply(self, o)

    def __rmul__(self, o: Any) -> Any:
        return self.ns.multiply(o, self)

    def __truediv__(self, o: Any) -> Any:
        return self.ns.divide(self, o)

    def __rtruediv__(self, o: Any) -> Any:
        return self.ns.divide(o, self)

    def __pow__(self, o: Any) -> Any:
        return self.ns.pow(self, o)

    def __rpow__(self, o: Any) -> Any:
        return self.ns.pow(o, self)

    def __matmul__(self, o: Any) -> Any:
        return self.ns.matmul(self, o)

    def __rmatmul__(self, o: Any) -> Any:
        return self.ns.matmul(o, self)

    # comparisons: values without gradient
    def __lt__(self, o: Any) -> Any:
        return self.value < raw(o)

    def __le__(self, o: Any) -> Any:
        return self.value <= raw(o)

    def __gt__(self, o: Any) -> Any:
        return self.value > raw(o)

    def __ge__(self, o: Any) -> Any:
        return self.value >= raw(o)

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        return self.value == raw(o)

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        return self.value != raw(o)

    __hash__ = None  # type: ignore[assignment]


def floating(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and hasattr(value, "shape") and "float" in str(dtype)


