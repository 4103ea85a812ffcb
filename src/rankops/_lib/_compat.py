"""The one place that turns user arrays into ``(xp, array)`` pairs.

Everything here inspects dtypes, shapes and devices only, never values: a
check that read data would force a device sync and break ``jax.jit``.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any, TypeAlias

import array_api_compat
import numpy as np

# An array of any array API namespace (NumPy, CuPy, torch, JAX, Dask, array-api-strict): what
# the public operators take and return, in the caller's namespace.
Array: TypeAlias = Any

__all__ = ["Array", "is_array", "namespace", "device", "is_torch_namespace", "real_float_dtypes", "normalize_axis", "normalize_axes", "index_dtype", "default_float", "broadcast_arrays", "concrete_number", "cumulative_sum"]


# torch.compile traces array-api-compat's type tests (each behind functools.lru_cache) with a warning per call
# site: torch tensors, the arrays such a trace sees, are told apart here from their class alone, before those tests.
_TORCH_NAMESPACES = ("torch", "array_api_compat.torch")


def _is_torch_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch tensor (or of a subclass): never imports torch, and no cached test."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def is_torch_namespace(xp: Any) -> bool:
    """Whether ``xp`` is torch or array-api-compat's torch namespace (``array_api_compat.is_torch_namespace``)."""
    return getattr(xp, "__name__", None) in _TORCH_NAMESPACES


def device(x: Any) -> Any:
    """The device of the array ``x`` (``array_api_compat.device``)."""
    return x.device if _is_torch_tensor(x) else array_api_compat.device(x)


def cumulative_sum(xp: Any, x: Any, axis: int = -1) -> Any:
    """``xp.cumulative_sum(x, axis=axis)``; torch's own ``cumsum`` for a torch tensor: array-api-compat's looks up the
    namespace again through its cached type tests, which ``torch.compile`` traces with a warning per call site."""
    if _is_torch_tensor(x):
        return sys.modules["torch"].cumsum(x, dim=axis)
    return xp.cumulative_sum(x, axis=axis)


def is_array(value: Any) -> bool:
    """An array API array; Python and NumPy scalars (``np.float64(1.0)``) are not."""
    if _is_torch_tensor(value):
        return True
    if value is None or isinstance(value, (bool, int, float, complex, str, list, tuple, dict)):  # np.float64 too
        return False
    return array_api_compat.is_array_api_obj(value)


def namespace(*arrays: Any, names: tuple[str, ...] | None = None) -> Any:
    """Return the array API namespace shared by ``arrays``.

    Python scalars and lists are rejected: the contract asks for arrays so
    that the output's namespace and device are never a guess.
    """
    names = names or tuple(f"argument {i}" for i in range(len(arrays)))
    for name, a in zip(names, arrays):
        if not is_array(a):
            raise TypeError(
                f"{name} must be an array (NumPy, CuPy, PyTorch, JAX, Dask or "
                f"array-api-strict), got {type(a).__name__}"
            )
    for a in arrays:
        if getattr(type(a), "records_gradients", False):  # a traced array (rankops.vjp of a loss): the tape's namespace
            return a.__array_namespace__()
    if all(_is_torch_tensor(a) for a in arrays):
        from array_api_compat import torch as torch_namespace

        return torch_namespace
    try:
        return array_api_compat.array_namespace(*arrays)
    except TypeError as exc:
        kinds = ", ".join(f"{n}: {type(a).__module__}.{type(a).__name__}" for n, a in zip(names, arrays))
        raise TypeError(f"arrays from different namespaces cannot be mixed ({kinds})") from exc


def on_cpu(x: Any) -> bool:
    """Whether ``x`` lives in a CPU's memory (NumPy, torch's ``cpu``, array-api-strict's default device), where an
    operation costs in proportion to its size; on a GPU a small operation costs its launch."""
    return "cpu" in str(device(x)).lower()


def default_float(xp: Any, device: Any) -> Any:
    """The namespace's default real floating dtype (float32 for torch/JAX)."""
    try:
        return xp.__array_namespace_info__().default_dtypes(device=device)["real floating"]
    except (AttributeError, TypeError, ValueError):  # pragma: no cover - old namespaces
        return xp.asarray(0.0).dtype


def accumulation_dtype(xp: Any, x: Any) -> Any:
    """float64 for a narrower real float ``x`` on a CPU whose device has it, else ``x``'s own dtype: the dtype a
    long sequential accumulation over ``x`` keeps its precision in (NumPy's prefix sums and its sums over an axis
    other than the last add one entry at a time; torch's CPU kernels accumulate float32 in double). A GPU's
    reductions combine in trees, where float64 may cost many times float32."""
    return wide_dtype(xp, x) if on_cpu(x) else x.dtype


def wide_dtype(xp: Any, x: Any) -> Any:
    """float64 for a narrower real float ``x`` whose device has it (any device), else ``x``'s own dtype."""
    dtype = x.dtype
    if not xp.isdtype(dtype, "real floating") or dtype == xp.float64:
        return dtype
    try:
        wide = "float64" in xp.__array_namespace_info__().dtypes(device=device(x), kind="real floating")
    except (AttributeError, TypeError, ValueError):  # pragma: no cover - old namespaces
        return dtype
    return xp.float64 if wide else dtype


def index_dtype(xp: Any, device: Any) -> Any:
    """The namespace's default indexing dtype (what ``argsort`` returns and ``take_along_axis`` takes)."""
    try:
        return xp.__array_namespace_info__().default_dtypes(device=device)["indexing"]
    except (AttributeError, TypeError, ValueError):  # pragma: no cover - old namespaces
        return xp.asarray(0).dtype


def real_float_dtypes(xp: Any, x: Any, name: str = "x") -> tuple[Any, Any]:
    """Return ``(compute_dtype, output_dtype)`` for input ``x``.

    - float32 / float64 are kept;
    - bool and integer inputs are promoted to the default floating dtype;
    - float16 / bfloat16 are computed in float32 (the softmax and the
      Sinkhorn potentials overflow or lose all resolution in 16 bits) and
      cast back on output;
    - complex inputs raise ``TypeError``: sorting has no meaning there.
    """
    dtype = x.dtype
    if xp.isdtype(dtype, "complex floating"):
        raise TypeError(f"{name} must be real-valued; complex dtype {dtype} is not supported")
    if xp.isdtype(dtype, ("bool", "integral")):
        out = default_float(xp, device(x))
        return out, out
    if not xp.isdtype(dtype, "real floating"):  # pragma: no cover - exotic dtypes
        raise TypeError(f"{name} must have a real numeric dtype, got {dtype}")
    if dtype == xp.float32 or dtype == xp.float64:
        return dtype, dtype
    return xp.float32, dtype


def normalize_axis(axis: Any, ndim: int, name: str = "axis", *, where: str | None = None) -> int:
    """Return ``axis`` as a non-negative int; errors name the argument (and ``where``, for a tuple)."""
    if isinstance(axis, tuple):
        raise TypeError(
            f"{where or 'this function'} works along one axis: {name} must be an int, got the tuple {axis!r} "
            "(tuples of axes are taken by the soft vector operators: soft_rank, soft_sort, soft_quantile, ...)"
        )
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(axis).__name__}")
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}={axis} is out of range [{-ndim}, {ndim - 1}] for an array with {ndim} dimension(s)")
    return axis % ndim


def normalize_axes(axis: Any, ndim: int, name: str = "axis") -> tuple[int, ...]:
    """An int ``axis``, or a non-empty tuple of distinct ones, as increasing non-negative axes.

    Checks the Python value only: an int gives a 1-tuple (errors as
    :func:`normalize_axis`); a tuple must be non-empty, of ints in range,
    without repeats once normalized (``(1, -1)`` on a 2-D array repeats 1).
    The order of the entries is not kept: the axes are returned sorted.
    """
    if not isinstance(axis, tuple):
        if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
            raise TypeError(f"{name} must be an int or a tuple of ints, got {type(axis).__name__}")
        return (normalize_axis(axis, ndim, name),)
    if not axis:
        raise ValueError(f"{name}=() is an empty tuple: give at least one axis")
    for a in axis:
        if isinstance(a, bool) or not isinstance(a, numbers.Integral):
            raise TypeError(f"{name} must be an int or a tuple of ints, got an entry of type {type(a).__name__} in {axis!r}")
        if not -ndim <= a < ndim:
            raise ValueError(f"{name}={axis!r}: {int(a)} is out of range [{-ndim}, {ndim - 1}] for an array with {ndim} dimension(s)")
    axes = tuple(int(a) % ndim for a in axis)
    repeated = sorted({a for a in axes if axes.count(a) > 1})
    if repeated:
        raise ValueError(f"{name}={axis!r} names axis {repeated[0]} twice (axes normalized for an array with {ndim} dimension(s))")
    return tuple(sorted(axes))


def broadcast_arrays(xp: Any, *arrays: Any) -> list[Any]:
    """``xp.broadcast_arrays``, the shape worked out here: array-api-compat's torch version calls
    ``torch.broadcast_shapes``, whose first call imports SymPy (two seconds of a first soft rank)."""
    shape = np.broadcast_shapes(*(tuple(a.shape) for a in arrays))  # shapes only, as the solvers' batches
    return [a if tuple(a.shape) == shape else xp.broadcast_to(a, shape) for a in arrays]


def concrete_number(value: Any) -> Any:
    """``value``, a constant where ``torch.compile`` traces a Python number symbolically.

    Called again with another float, dynamo makes that argument a ``SymFloat``
    (it passes as a float), which ``math.isfinite``, the eager op's parameters
    and the loops' closures cannot hold. An option's number is a constant of
    the graph, as with ``torch.compile(dynamic=False)``: ``guard_scalar``
    specializes it (a guard on its value; another value recompiles). A
    temperature meant to change without recompiling is a 0-d tensor.
    """
    shapes = sys.modules.get("torch.fx.experimental.symbolic_shapes")  # loaded by whatever traces symbolically
    if shapes is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not sys.modules["torch"].compiler.is_compiling():
        return value
    return shapes.guard_scalar(value)
