r"""``rankops.vjp``: gradients of any rankops operator, on any backend.

Shaped like ``jax.vjp``::

    value, vjp_fn = rankops.vjp(rankops.soft_rank, x, epsilon=0.1)
    (dx,) = vjp_fn(cotangent)             # cotangent: an array shaped like value

``vjp(fun, x, *args, **options)`` calls ``fun(x, *args, **options)``;
``vjp_fn(ct)`` returns one gradient per array argument, in call order: ``x``,
then the array positionals (``q`` levels, ``targets``, the marginals of
``sinkhorn``), then the array-valued keyword options (``target_weights``, a
0-d ``tau`` or ``epsilon``). Python numbers (``k``, a float ``q``) get none.
Each gradient has its argument's floating dtype (integer arguments: the
floating dtype the operator computed in).

How the gradient is obtained:

- torch and JAX: the host's own autodiff (``torch.autograd.grad``,
  ``jax.vjp``), so the operator's options apply as usual (``implicit``).
- NumPy, CuPy, Dask, array-api-strict: rankops' own backward rules, written
  once against the array API next to each operator's forward: closed forms
  for SoftSort and NeuralSort (softmax, sort and |s_i - s_j| pullbacks), and
  for every Sinkhorn operator the implicit rule of :mod:`rankops._implicit`
  (so these backends always get the gradient of the converged fixed point,
  whatever ``implicit`` says). Dask maps the rule over the same blocks as
  the forward, recomputing each block's forward inside its backward task.

For :func:`rankops.sinkhorn` the cotangent is an array for the plan, or a
``SinkhornResult`` / tuple ``(plan, f, g, ...)`` whose entries may be None;
``f`` and ``g`` are defined up to a shared constant, so only cotangents
that respect it (``f_i + g_j``, ``<a, f> + <b, g>``, the plan) have exact
gradients by the implicit rule. ``hard=True`` operators return the relaxed
gradient (straight-through), as under autodiff.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import array_api_compat
from array_api_compat import is_jax_namespace, is_torch_namespace

from ._lib._adapters import get_adapter
from ._lib._apply import recording
from ._lib._compat import is_array, namespace, real_float_dtypes
from ._lib._numerics import unbroadcast
from .permutations import neuralsort, softsort
from .sinkhorn import SinkhornResult, sinkhorn
from .sorting import soft_rank, soft_sort
from .transport import soft_cdf, soft_quantile, soft_quantile_normalize, soft_topk_mask

__all__ = ["vjp", "OPERATORS"]

OPERATORS = (
    soft_rank, soft_sort, soft_cdf, soft_quantile, soft_quantile_normalize, soft_topk_mask, sinkhorn, softsort, neuralsort,
)


def _positional_names(fun: Callable[..., Any]) -> list[str]:
    params = inspect.signature(fun).parameters.values()
    return [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_ONLY]


def vjp(fun: Callable[..., Any], x: Any, /, *args: Any, **options: Any) -> tuple[Any, Callable[[Any], tuple[Any, ...]]]:
    """``(fun(x, *args, **options), vjp_fn)``; see the module docstring."""
    if fun not in OPERATORS:
        names = ", ".join(f"rankops.{f.__name__}" for f in OPERATORS)
        raise TypeError(f"fun must be a rankops operator ({names}), got {fun!r}")
    if "return_info" in options:
        raise TypeError(
            "rankops.vjp does not take return_info: the value it returns is the one being differentiated; "
            "call the operator with return_info=True to read the convergence info"
        )
    positional = _positional_names(fun)
    if len(args) > len(positional) - 1:
        raise TypeError(f"{fun.__name__} takes at most {len(positional)} positional arguments, got {1 + len(args)}")
    # (name, value) of every array argument, in call order
    named = [(positional[0], x)] + list(zip(positional[1:], args)) + list(options.items())
    diff = [(name, value) for name, value in named if is_array(value)]
    xp = namespace(x, names=(positional[0],))
    if is_torch_namespace(xp) or is_jax_namespace(xp):
        return _autodiff_vjp(fun, xp, x, args, options, positional, diff)
    return _rule_vjp(fun, xp, x, args, options, positional, diff)


def _float_dtype(xp: Any, value: Any, name: str) -> Any:
    """The floating dtype of ``value``, or the one the operators promote it to (integers, bool)."""
    return value.dtype if xp.isdtype(value.dtype, "real floating") else real_float_dtypes(xp, value, name)[0]


def _float_leaf(value: Any, name: str) -> Any:
    """The value as the floating array the operator computes with (integers are promoted)."""
    xp = array_api_compat.array_namespace(value)
    dtype = _float_dtype(xp, value, name)
    return value if value.dtype == dtype else xp.astype(value, dtype)


def _call(fun: Callable[..., Any], x: Any, args: tuple[Any, ...], options: dict[str, Any], positional: list[str], leaves: dict[str, Any]) -> Any:
    """``fun`` with the array arguments replaced by ``leaves`` (by name)."""
    x = leaves.get(positional[0], x)
    args = tuple(leaves.get(name, a) for name, a in zip(positional[1:], args))
    options = {k: leaves.get(k, v) for k, v in options.items()}
    return fun(x, *args, **options)


def _split(value: Any) -> tuple[tuple[Any, ...], bool]:
    """The differentiable outputs: ``(plan, f, g)`` of a SinkhornResult, else the array."""
    if isinstance(value, SinkhornResult):
        return (value.plan, value.f, value.g), True
    return (value,), False


def _cotangents(ct: Any, outs: tuple[Any, ...], is_result: bool) -> tuple[Any, ...]:
    """The caller's cotangent as a tuple matching :func:`_split` (None: zero), shapes checked."""
    if not is_result:
        if not is_array(ct):
            raise TypeError(f"the cotangent must be an array shaped like the value, got {type(ct).__name__}")
        cts: tuple[Any, ...] = (ct,)
    elif is_array(ct):
        cts = (ct, None, None)
    elif isinstance(ct, (tuple, list)) and 1 <= len(ct) <= 6 and all(c is None or is_array(c) for c in tuple(ct)[:3]):
        cts = (tuple(ct) + (None,) * (3 - len(ct)))[:3]
    else:
        raise TypeError(
            "the cotangent of sinkhorn must be an array (for the plan) or a SinkhornResult / tuple (plan, f, g) of arrays or None"
        )
    for c, o in zip(cts, outs):
        if c is not None and tuple(c.shape) != tuple(o.shape):
            raise ValueError(f"cotangent for the output has shape {tuple(c.shape)}, expected {tuple(o.shape)}")
    return cts


def _autodiff_vjp(fun: Any, xp: Any, x: Any, args: Any, options: Any, positional: list[str], diff: list[tuple[str, Any]]) -> Any:
    """torch / JAX: the host's reverse mode, through the adapter's ``autodiff_vjp``."""
    names = [name for name, _ in diff]

    def f(*arrays: Any) -> Any:
        return _call(fun, x, args, options, positional, dict(zip(names, arrays)))

    value, outs, pull = get_adapter(xp).autodiff_vjp(f, [_float_leaf(v, name) for name, v in diff], lambda v: _split(v)[0])
    is_result = isinstance(value, SinkhornResult)
    return value, lambda ct: pull(_cotangents(ct, outs, is_result))


def _rule_vjp(fun: Any, xp: Any, x: Any, args: Any, options: Any, positional: list[str], diff: list[tuple[str, Any]]) -> Any:
    with recording() as tape:
        value = fun(x, *args, **options)
    if len(tape) != 1:  # pragma: no cover - every operator records exactly one core
        raise RuntimeError(f"{fun.__name__} recorded {len(tape)} pullbacks instead of one")
    entry = tape[0]
    is_result = isinstance(value, SinkhornResult)

    def vjp_fn(ct: Any) -> tuple[Any, ...]:
        cts = _cotangents(ct, _split(value)[0], is_result)
        if is_result:
            grads = entry.pullback(*cts)
            grads = {positional[0]: grads.pop("cost"), **grads}
        else:
            grads = _pull_prepared(entry, cts[0])
            grads = {positional[0]: grads.pop("x"), **grads}
        return tuple(_as_argument(xp, grads.get(name), value_, name) for name, value_ in diff)

    return value, vjp_fn


def _pull_prepared(entry: Any, ct: Any) -> dict[str, Any]:
    """Undo ``finish`` on the cotangent, pull back, undo ``prepare`` on the gradient of ``x``."""
    p = entry.prepared
    xp = p.xp
    ct = xp.astype(ct, p.x.dtype)
    # the output's operator-axis position (an axis of levels or targets too), when it has one
    if ct.ndim == p.ndim and p.axis != p.ndim - 1:
        ct = xp.moveaxis(ct, p.axis, -1)
    grads = entry.pullback(ct)
    dx = grads["x"]
    if p.axis != p.ndim - 1:
        dx = xp.moveaxis(dx, -1, p.axis)
    return {**grads, "x": dx}


def _as_argument(xp: Any, g: Any, arg: Any, name: str) -> Any:
    """A gradient in the shape and floating dtype of its argument (zeros if nothing flowed)."""
    dtype = _float_dtype(xp, arg, name)
    if g is None:
        return xp.zeros(arg.shape, dtype=dtype, device=array_api_compat.device(arg))
    g = unbroadcast(xp, g, tuple(arg.shape))  # sample axes of a stochastic operator
    return xp.astype(g, dtype) if g.dtype != dtype else g
