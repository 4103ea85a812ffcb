"""The backends rankops knows: discovery, devices, and NumPy round trips.

Used by the demo (``python -m rankops``) and by the test and conformance
suites, so that exactly one place knows how to build an array of each
backend on each device and how to read it back into NumPy.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ._adapters import get_adapter

__all__ = ["Backend", "BACKENDS", "device_label", "get_backend"]


@dataclass(frozen=True)
class Backend:
    name: str
    module: str  # top-level import name, for the version
    _namespace: Callable[[], Any] = field(repr=False)
    _devices: Callable[[], list[Any]] = field(repr=False)
    _asarray: Callable[[np.ndarray, Any], Any] = field(repr=False)
    _to_numpy: Callable[[Any], np.ndarray] = field(repr=False)
    _unavailable: Callable[[], str | None] = field(repr=False)
    # compiles a program per new shape, dtype and static option set before running it (JAX): what a
    # call costs there is its compilation, so test suites reuse shapes and option sets on it
    compiles: bool = False

    def unavailable_reason(self) -> str | None:
        """None when usable here, else why not (not installed, no GPU...)."""
        try:
            return self._unavailable()
        except Exception as exc:  # a broken install is "unavailable", with the reason
            return f"{type(exc).__name__}: {exc}"

    @property
    def version(self) -> str:
        try:
            return str(getattr(importlib.import_module(self.module), "__version__", "?"))
        except ImportError:
            return "not installed"

    def namespace(self) -> Any:
        return self._namespace()

    @property
    def autodiff(self) -> bool:
        """Whether the backend differentiates rankops' operators with its own autodiff (torch, JAX): its adapter's flag,
        the one place that says so (False where the backend is unavailable here: nothing to differentiate with)."""
        return self.unavailable_reason() is None and get_adapter(self.namespace()).autodiff

    def devices(self) -> list[Any]:
        """Devices to test on: the default one first."""
        return self._devices()

    def asarray(self, a: Any, *, dtype: Any = None, device: Any = None) -> Any:
        """A backend array holding NumPy data ``a`` (``dtype`` a NumPy dtype)."""
        a = np.asarray(a, dtype=dtype)
        return self._asarray(a, device)

    def to_numpy(self, x: Any) -> np.ndarray:
        return self._to_numpy(x)


def _importable(module: str) -> Callable[[], str | None]:
    def check() -> str | None:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"not installed ({exc})"
        return None

    return check


# -- numpy -------------------------------------------------------------------


def _np_namespace() -> Any:
    import array_api_compat.numpy

    return array_api_compat.numpy


# -- array-api-strict ----------------------------------------------------------


def _strict_devices() -> list[Any]:
    import array_api_strict as xp

    info = xp.__array_namespace_info__()
    # device1 stands in for a GPU: arrays on it cannot silently meet CPU ones.
    return [info.default_device(), xp.Device("device1")]


def _strict_asarray(a: np.ndarray, device: Any) -> Any:
    import array_api_strict as xp

    return xp.asarray(a, device=device)


def _strict_to_numpy(x: Any) -> np.ndarray:
    return np.from_dlpack(x).copy()


# -- torch -----------------------------------------------------------------------


def _torch_namespace() -> Any:
    import array_api_compat.torch

    return array_api_compat.torch


def _torch_devices() -> list[Any]:
    import torch

    return [torch.device("cpu")] + [torch.device("cuda", i) for i in range(torch.cuda.device_count())]


def _torch_asarray(a: np.ndarray, device: Any) -> Any:
    import torch

    return torch.asarray(a.copy(), device=device)


def _torch_to_numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy().copy()


# -- jax -------------------------------------------------------------------------


def _jax_namespace() -> Any:
    import jax.numpy

    return jax.numpy


def _jax_devices() -> list[Any]:
    import jax

    return list(jax.devices())


def _jax_asarray(a: np.ndarray, device: Any) -> Any:
    import jax
    import jax.numpy as jnp

    if a.dtype == np.float64 and not jax.config.jax_enable_x64:
        raise ValueError("float64 JAX arrays need jax.config.update('jax_enable_x64', True)")
    return jax.device_put(jnp.asarray(a), device)


# -- dask --------------------------------------------------------------------------


def _dask_namespace() -> Any:
    import array_api_compat.dask.array

    return array_api_compat.dask.array


def _dask_asarray(a: np.ndarray, device: Any) -> Any:
    import dask.array as da

    # One batch row per chunk, so tests exercise the blockwise path.
    chunks = tuple(1 if i < a.ndim - 1 else -1 for i in range(a.ndim))
    return da.from_array(a, chunks=chunks)


def _dask_to_numpy(x: Any) -> np.ndarray:
    return np.asarray(x.compute())


# -- cupy ----------------------------------------------------------------------------


def _cupy_unavailable() -> str | None:
    try:
        import cupy
    except ImportError as exc:
        return f"not installed ({exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # cupy raises CUDARuntimeError without a driver
        return f"no usable GPU ({type(exc).__name__}: {exc})"
    return None if count > 0 else "no GPU present"


def _cupy_namespace() -> Any:
    import array_api_compat.cupy

    return array_api_compat.cupy


def _cupy_devices() -> list[Any]:
    import cupy

    return [cupy.cuda.Device(i) for i in range(cupy.cuda.runtime.getDeviceCount())]


def _cupy_asarray(a: np.ndarray, device: Any) -> Any:
    import cupy

    with device if device is not None else cupy.cuda.Device():
        return cupy.asarray(a)


def _cupy_to_numpy(x: Any) -> np.ndarray:
    import cupy

    return cupy.asnumpy(x)


BACKENDS: tuple[Backend, ...] = (
    Backend("numpy", "numpy", _np_namespace, lambda: ["cpu"], lambda a, d: a.copy(), np.array, _importable("numpy")),
    Backend(
        "array_api_strict", "array_api_strict",
        lambda: importlib.import_module("array_api_strict"), _strict_devices, _strict_asarray, _strict_to_numpy,
        _importable("array_api_strict"),
    ),
    Backend("torch", "torch", _torch_namespace, _torch_devices, _torch_asarray, _torch_to_numpy, _importable("torch")),
    Backend("jax", "jax", _jax_namespace, _jax_devices, _jax_asarray, lambda x: np.array(x), _importable("jax"), compiles=True),
    Backend(
        "dask", "dask", _dask_namespace, lambda: ["cpu"], _dask_asarray, _dask_to_numpy, _importable("dask.array")
    ),
    Backend("cupy", "cupy", _cupy_namespace, _cupy_devices, _cupy_asarray, _cupy_to_numpy, _cupy_unavailable),
)


def get_backend(name: str) -> Backend:
    for b in BACKENDS:
        if b.name == name:
            return b
    raise ValueError(f"unknown backend {name!r}; known: {', '.join(b.name for b in BACKENDS)}")


def device_label(device: Any) -> str:
    """Short name of a device: ``array_api_strict.Device('device1')`` -> ``device1``."""
    return re.sub(r"^.*Device\('(.*)'\)$", r"\1", str(device))
