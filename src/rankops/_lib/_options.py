"""Frozen option sets: a method's hyper-parameters, validated once, and the checks of their values.

Each method declares its options as a frozen dataclass whose fields carry
their check (``option(default, check)``). :meth:`Options.parse` turns the
caller's keyword options into one instance, rejecting unknown names, so a
kernel reads ``opts.epsilon`` knowing it is valid. Instances are hashable
(they key JAX's compile cache), except that a field may hold a 0-d array (a
learnable ``tau``, a traced ``epsilon``): :meth:`Options.split` separates
those, so that they travel as traced arguments and the rest stays static.

The checks (``positive_scalar``, ``choice``, ...) read Python values only,
never array data: a check that read data would sync the device and break
``jax.jit``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import Any, Callable, Iterable, Mapping, TypeVar

from ._compat import concrete_number, is_array

__all__ = [
    "Options", "option", "positive_scalar", "within_positive_reals", "python_number", "choice", "boolean", "positive_count", "optional_count", "known_options",
]

T = TypeVar("T", bound="Options")


def option(default: Any, check: Callable[[Any, str], Any] | None = None) -> Any:
    """A field of an :class:`Options` dataclass; ``check(value, name)`` validates and normalizes a given value."""
    return dataclasses.field(default=default, metadata={"check": check})


@dataclasses.dataclass(frozen=True)
class Options:
    """Base of every method's frozen option set (subclasses are frozen dataclasses).

    A method with a temperature names it (:meth:`temperature`) and has a
    ``softness`` field (:mod:`rankops._cores.softness`): the caller gives one
    of the two, or neither (the caller's default softness, else the
    temperature's default).
    """

    @classmethod
    def temperature(cls) -> str | None:
        """The name of the method's own temperature, which ``softness`` replaces (None: it has none)."""
        return None

    @classmethod
    def parse(
        cls: type[T], given: Mapping[str, Any], where: str, *, names: Iterable[str] | None = None, arrays: Iterable[str] = (),
        softness: float | None = None,
    ) -> tuple[T, dict[str, Any]]:
        """``(options, parameter arrays)`` from the caller's keyword options.

        ``names``: the fields this caller accepts (default: all); ``arrays``:
        further accepted names that are parameter arrays (``target_weights``),
        returned as they are, None left out. Anything else raises ``TypeError``.
        ``softness``: the default softness when neither it nor the
        temperature is given (None: the temperature's default).
        """
        fields = cls.__dataclass_fields__  # not dataclasses.fields(cls): torch.compile traces the mapping, not that call on a class
        names = tuple(fields) if names is None else tuple(names)
        arrays = tuple(arrays)
        known_options(given, names + arrays, where)
        values = {}
        for name in names:
            # a temperature or softness of None is not given (the matrices' signatures default to None)
            if name in given and not (given[name] is None and name in ("softness", cls.temperature())):
                check = fields[name].metadata.get("check")
                value = concrete_number(given[name])
                values[name] = value if check is None else check(value, name)
        temperature = cls.temperature()
        if temperature is not None and "softness" in names:
            if "softness" in values and given.get(temperature) is not None:
                raise ValueError(
                    f"{where}: pass softness= or {temperature}=, not both (softness={given['softness']!r}, "
                    f"{temperature}={given[temperature]!r}): softness sets the {temperature} from each row's scale and length"
                )
            if "softness" not in values and given.get(temperature) is None and softness is not None:
                values["softness"] = softness
        return cls(**values), {k: given[k] for k in arrays if given.get(k) is not None}

    def split(self: T) -> tuple[T, dict[str, Any]]:
        """``(static, arrays)``: the options with their array fields set to None, and those arrays."""
        arrays = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if is_array(getattr(self, f.name))}
        return (dataclasses.replace(self, **dict.fromkeys(arrays)) if arrays else self), arrays

    def merge(self: T, arrays: Mapping[str, Any]) -> T:
        """The inverse of :meth:`split`."""
        return dataclasses.replace(self, **arrays) if arrays else self

    def arrays(self) -> dict[str, Any]:
        """The array-valued fields (hyper-parameters that receive gradients)."""
        return self.split()[1]


# -- checks of one value: check(value, name) -> the normalized value -----------------------------------


def positive_scalar(value: Any, name: str) -> Any:
    """A strictly positive finite real (``tau``, ``epsilon``, ``power``).

    A 0-d array (a learnable temperature, say) is accepted unread: reading
    its value would sync the device and break ``jax.jit``; a value outside
    makes the operator's outputs NaN (:func:`within_positive_reals`).
    """
    if is_array(value):
        if getattr(value, "ndim", None) != 0:
            raise ValueError(f"{name} must be a scalar or a 0-d array, got shape {tuple(value.shape)}")
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive real number, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def within_positive_reals(xp: Any, opts: Any) -> tuple[Any, Any]:
    """``(opts, outside)``: ``outside`` a 0-d boolean array, True where one of ``opts``' array fields checked by
    :func:`positive_scalar` (a learnable temperature) is not a finite number > 0, the values that raise
    ``ValueError`` as Python numbers, and each such field set to 1 there, so that the method computes on a valid
    value (no division by 0, no log of a negative) and the caller makes its outputs NaN; ``outside`` None where no
    such field holds an array. Computed on the arrays, never reading their values."""
    if not isinstance(opts, Options):
        return opts, None
    # the mapping, not dataclasses.fields: torch.compile traces it (Options.parse)
    names = [name for name, f in opts.__dataclass_fields__.items()
             if f.metadata.get("check") is positive_scalar and is_array(getattr(opts, name))]
    if not names:
        return opts, None
    safe, outside = {}, []
    for name in names:
        t = getattr(opts, name)
        bad = ~((t > 0) & xp.isfinite(t))
        safe[name] = xp.where(bad, xp.ones_like(t), t)
        outside.append(bad)
    return dataclasses.replace(opts, **safe), functools.reduce(lambda a, b: a | b, outside)


def python_number(check: Callable[[Any, str], Any], context: str = "") -> Callable[[Any, str], Any]:
    """``check``, and the value must be a Python number: it shapes the computation, not only the data."""

    def checked(value: Any, name: str) -> Any:
        value = check(value, name)
        if is_array(value):
            raise TypeError(f"{name} must be a Python number{context}, not an array")
        return value

    return checked


def choice(*allowed: Any) -> Callable[[Any, str], Any]:
    """One of ``allowed`` (compared with ``==``; ``None`` allowed where listed)."""

    def checked(value: Any, name: str) -> Any:
        if not any(value is a or (a is not None and isinstance(value, type(a)) and value == a) for a in allowed):
            raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
        return value

    return checked


def norm_exponent(value: Any, name: str) -> float:
    """A p-norm exponent in (1, 2] (a Python number: it picks the solver's closed form)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number in (1, 2], got {type(value).__name__}")
    if not (math.isfinite(value) and 1 < value <= 2):
        raise ValueError(f"{name} must lie in (1, 2], got {value!r}")
    return float(value)


def boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
    return value


def positive_count(value: Any, name: str) -> int:
    """An int >= 1 (``max_iter``, ``k``-like sizes)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= 1, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return int(value)


def optional_count(value: Any, name: str) -> int | None:
    """None or an int >= 1 (``n_samples``)."""
    return None if value is None else positive_count(value, name)


def known_options(options: dict[str, Any], allowed: Iterable[str], where: str) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(
            f"{where} got unexpected option(s) {', '.join(map(repr, unknown))}; "
            f"it accepts {', '.join(map(repr, sorted(allowed))) or 'none'}{_suggestions(unknown)}"
        )


# A peer's name for an option (torchsort, OTT-JAX, SoftJAX, diffsort, NumPy) -> what rankops calls it.
_PEER_NAMES = {
    "regularization_strength": "method='permutahedron', strength= (torchsort's regularization_strength), or softness=",
    "temperature": "softness= (scale-free), or the method's own tau / epsilon / alpha / strength / steepness",
    "threshold": "tol=",
    "dim": "axis=",
    "max_iterations": "max_iter=",
}


def _suggestions(unknown: Iterable[str]) -> str:
    """`` (for X pass Y)`` for the unknown names that are a peer's names of a rankops option."""
    hints = [f"for {name!r} pass {_PEER_NAMES[name]}" for name in unknown if name in _PEER_NAMES]
    return f" ({'; '.join(hints)})" if hints else ""
