"""Every public operator, with the methods it takes: what ``rankops.vjp`` accepts and what the suites cover.

Derived, not listed: an operator declares its methods where it is defined
(``@operator(methods=...)``; ``soft_sort`` / ``soft_rank`` from
``sorting.METHODS``), and every such function the public modules export is
registered here.
"""

from __future__ import annotations

from typing import Any, Callable

from . import isotonic, kernels, magnitude, permutations, sinkhorn, sorting, transport

__all__ = ["OPERATORS"]

_PUBLIC_MODULES = (sorting, transport, magnitude, sinkhorn, permutations, isotonic, kernels)

# operator -> its methods (the values of its ``method`` option, or the one it is)
OPERATORS: dict[Callable[..., Any], tuple[str, ...]] = {
    fn: fn.operator.methods
    for module in _PUBLIC_MODULES
    for fn in (getattr(module, name) for name in module.__all__)
    if callable(getattr(fn, "operator", None))
}
