"""The backend seam: the one place that tells namespaces apart.

``get_adapter(xp)`` returns the adapter of a namespace (the protocol is
:class:`._generic.Generic`): torch, JAX and Dask have their own, imported
only when such an array arrives, so that the core never imports a
framework; every other namespace (NumPy, CuPy, array-api-strict) gets the
portable one.
"""

from __future__ import annotations

import importlib
from typing import Any

from array_api_compat import is_dask_namespace, is_jax_namespace, is_torch_namespace

from ._generic import GENERIC, Generic

__all__ = ["get_adapter", "Generic"]


def get_adapter(xp: Any) -> Generic:
    """The adapter for namespace ``xp`` (framework adapters are imported lazily)."""
    for is_kind, module in ((is_torch_namespace, "_torch"), (is_jax_namespace, "_jax"), (is_dask_namespace, "_dask")):
        if is_kind(xp):
            return importlib.import_module(f"{__name__}.{module}").ADAPTER
    return GENERIC
