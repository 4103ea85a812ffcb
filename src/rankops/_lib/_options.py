"""Frozen option sets: a method's hyper-parameters, validated once.

Each method declares its options as a frozen dataclass whose fields carry
their check (``option(default, check)``). :meth:`Options.parse` turns the
caller's keyword options into one instance, rejecting unknown names, so a
kernel reads ``opts.epsilon`` knowing it is valid. Instances are hashable
(they key JAX's compile cache), except that a field may hold a 0-d array (a
learnable ``tau``, a traced ``epsilon``): :meth:`Options.split` separates
those, so that they travel as traced arguments and the rest stays static.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping, TypeVar

from ._compat import is_array
from ._validation import known_options

__all__ = ["Options", "option"]

T = TypeVar("T", bound="Options")


def option(default: Any, check: Callable[[Any, str], Any] | None = None) -> Any:
    """A field of an :class:`Options` dataclass; ``check(value, name)`` validates and normalizes a given value."""
    return dataclasses.field(default=default, metadata={"check": check})


@dataclasses.dataclass(frozen=True)
class Options:
    """Base of every method's frozen option set (subclasses are frozen dataclasses)."""

    @classmethod
    def parse(
        cls: type[T], given: Mapping[str, Any], where: str, *, names: Iterable[str] | None = None, arrays: Iterable[str] = ()
    ) -> tuple[T, dict[str, Any]]:
        """``(options, parameter arrays)`` from the caller's keyword options.

        ``names``: the fields this caller accepts (default: all); ``arrays``:
        further accepted names that are parameter arrays (``target_weights``),
        returned as they are, None left out. Anything else raises ``TypeError``.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        names = tuple(fields) if names is None else tuple(names)
        arrays = tuple(arrays)
        known_options(given, names + arrays, where)
        values = {}
        for name in names:
            if name in given:
                check = fields[name].metadata.get("check")
                values[name] = given[name] if check is None else check(given[name], name)
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
