"""Framework adapters, imported only when an array of that framework arrives.

The operators are written once against the array API; an adapter supplies
what the standard lacks for one framework: fused softmax / logsumexp kernels
(faster than the portable versions), ``stop_gradient`` for straight-through
estimators, and the framework's own random number generator. A backend
without an adapter gets the portable versions in :mod:`._generic`.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from array_api_compat import is_jax_namespace, is_torch_namespace

from . import _generic

__all__ = ["get_adapter"]


def get_adapter(xp: Any) -> ModuleType:
    """Return the adapter module for namespace ``xp`` (lazily imported)."""
    if is_torch_namespace(xp):
        return importlib.import_module(f"{__name__}._torch")
    if is_jax_namespace(xp):
        return importlib.import_module(f"{__name__}._jax")
    return _generic
