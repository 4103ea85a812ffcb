"""The backend seam: the one place that tells namespaces apart, and what the adapters run.

``get_adapter(xp)`` returns the adapter of a namespace (the protocol is
:class:`._generic.PortableAdapter`): torch, JAX and Dask have their own, imported
only when such an array arrives, so that the core never imports a
framework; every other namespace (NumPy, CuPy, array-api-strict) gets the
portable one.

What every adapter runs is a :class:`Core`: a kernel written once against
the array API for trailing core axes, ``rule(xp, x, opts, **params) ->
(outputs, pullback)``, with the trailing shapes of its outputs (what lazy
backends need before running). A core with a hand-written backward gives it
through :func:`custom_backward`, the one place that registers a backward
with the backend's autodiff.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from array_api_compat import is_dask_namespace, is_jax_namespace

from .._compat import device, is_array, is_torch_namespace
from .._options import within_positive_reals

from ._generic import PORTABLE, PortableAdapter
from . import _tape

__all__ = ["get_adapter", "PortableAdapter", "Core", "core", "same_shape", "square_matrix", "custom_backward", "rebuilt"]


def get_adapter(xp: Any) -> PortableAdapter:
    """The adapter for namespace ``xp`` (framework adapters are imported lazily)."""
    if isinstance(xp, _tape.Namespace):  # rankops.vjp of a loss, on a backend without autodiff
        return xp.adapter
    # import statements rather than importlib.import_module, which torch.compile refuses to trace
    if is_torch_namespace(xp):
        from . import _torch

        return _torch.ADAPTER
    if is_jax_namespace(xp):
        from . import _jax

        return _jax.ADAPTER
    if is_dask_namespace(xp):
        from . import _dask

        return _dask.ADAPTER
    return PORTABLE


class Core:
    """A kernel with its own backward rule; see the module docstring.

    ``output_shapes(core_shape, opts, params)`` gives each output's trailing shape
    (None: one count per call), which lazy backends need before running;
    ``core_ndim`` is the number of trailing core axes of ``x``; ``batched``
    names the parameters that share ``x``'s batch axes, with the core axes
    of ``x`` they span (the marginals of the transport solver).
    """

    def __init__(
        self,
        rule: Callable[..., tuple[tuple[Any, ...], Callable[..., dict[str, Any]]]],
        *,
        output_shapes: Callable[..., dict[str, Any]],
        outputs: tuple[str, ...] = ("value",),
        core_ndim: int = 1,
        batched: Mapping[str, tuple[int, ...]] | None = None,
    ) -> None:
        self.rule, self.output_shapes, self.outputs, self.core_ndim = rule, output_shapes, outputs, core_ndim
        self.batched = dict(batched or {})
        self.__name__ = rule.__name__
        self.__doc__ = rule.__doc__

    def __call__(self, xp: Any, x: Any, opts: Any, **params: Any) -> tuple[Any, ...]:
        return self.vjp(xp, x, opts, **params)[0]

    def vjp(self, xp: Any, x: Any, opts: Any, **params: Any) -> tuple[tuple[Any, ...], Callable[..., dict[str, Any]]]:
        # a temperature given as an array is not read (a device sync, and no value under jit): where it is not a
        # finite number > 0, the method runs at 1 and its floating outputs are NaN, not a plausible row
        opts, outside = within_positive_reals(xp, opts)
        outs, back = self.rule(xp, x, opts, **params)
        if outside is None:
            return outs, back

        def pullback(cts: tuple[Any, ...]) -> dict[str, Any]:
            # the cotangents dropped, as autodiff drops them through the NaN outputs: every gradient 0
            return back(tuple(c if c is None else xp.where(outside, xp.zeros_like(c), c) for c in cts))

        return tuple(_nan_where(xp, outside, o) for o in outs), pullback

    def select(self, outs: tuple[Any, ...], wanted: tuple[str, ...]) -> tuple[Any, ...]:
        return tuple(outs[self.outputs.index(w)] for w in wanted)

    def __repr__(self) -> str:
        return f"<rankops core {self.__name__}>"


def _nan_where(xp: Any, outside: Any, a: Any) -> Any:
    """``a`` with NaN where ``outside`` (0-d) holds, if ``a`` is a floating array or a float (a solver's error read
    eagerly); counts and flags, arrays or Python numbers, are kept."""
    if isinstance(a, float):
        return float(xp.where(outside, math.nan, a))
    if not is_array(a) or not xp.isdtype(a.dtype, ("real floating", "complex floating")):
        return a
    return xp.where(outside, xp.asarray(float("nan"), dtype=a.dtype, device=device(a)), a)


def core(*, output_shapes: Callable[..., dict[str, Any]], **kwargs: Any) -> Callable[[Callable[..., Any]], Core]:
    """Decorator: a rule function as a :class:`Core`."""
    return lambda rule: Core(rule, output_shapes=output_shapes, **kwargs)


def same_shape(shape: tuple[int, ...], opts: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """``output_shapes`` of a core whose one output is shaped like its input."""
    return {"value": tuple(shape)}


def square_matrix(shape: tuple[int, ...], opts: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """``output_shapes`` of a core whose one output is an ``(n, n)`` matrix per row of ``n`` entries."""
    return {"value": (shape[-1], shape[-1])}


def rebuilt(fwd: Callable[..., Any]) -> Callable[..., Any]:
    """``residuals`` of :func:`custom_backward` for a forward whose every operation the backend can differentiate:
    its residuals computed again from the inputs, under the backend's autodiff, make the backward differentiable
    (second derivatives: torch's ``create_graph=True``, ``jax.hessian``)."""
    return lambda xp, *arrays: fwd(xp, *arrays)[1]


def custom_backward(
    xp: Any,
    fwd: Callable[..., Any],
    bwd: Callable[..., Any],
    arrays: tuple[Any, ...],
    *,
    names: tuple[str, ...] | None = ("x",),
    n_diff: int = 1,
    residuals: Callable[..., Any] | None = None,
    register: bool = True,
    linear: bool | Callable[..., Any] = True,
) -> tuple[tuple[Any, ...], Callable[[tuple[Any, ...]], Any]]:
    """``(outputs, pullback)`` of a forward with a hand-written backward: every core's one way to give its own gradient.

    ``fwd(xp, *arrays) -> (outputs, residuals)`` and ``bwd(xp, residuals,
    cotangents) -> one gradient per array``; only the first ``n_diff``
    outputs carry gradients. Backends with autodiff register the pair (the
    adapter's ``custom_vjp``; ``residuals(xp, *arrays)``, when given,
    rebuilds the residuals for higher derivatives); with ``register=False``
    the backend differentiates the forward itself (an unrolled solver).
    ``linear``: True where ``bwd`` is written with linear operations of the
    cotangents that the backend can transpose (no loop with an exit test, no
    scaling by the cotangent's own size), so that its transpose is the
    forward mode (JAX: ``jacfwd``, ``jvp``); where it is not (the Sinkhorn
    solves), a version of ``bwd`` that is, for the forward mode alone,
    ``bwd`` keeping the reverse mode; False: reverse mode only.
    ``pullback(cotangents)`` applies ``bwd`` (``rankops.vjp`` on backends
    without autodiff, where the forward's residuals are kept): a dict by
    ``names``, or the gradients' tuple when ``names`` is None.
    """
    adapter = get_adapter(xp)
    if register and adapter.autodiff:
        outs, kept = adapter.custom_vjp(xp, fwd, bwd, arrays, n_diff=n_diff, residuals=residuals, linear=linear), None
    else:
        outs, kept = fwd(xp, *arrays)

    def pullback(cts: tuple[Any, ...]) -> Any:
        res = kept
        if res is None:  # registered with the backend: nothing was kept, the residuals are rebuilt
            res = residuals(xp, *arrays) if residuals is not None else fwd(xp, *arrays)[1]
        grads = bwd(xp, res, cts)
        return tuple(grads) if names is None else dict(zip(names, grads))

    return tuple(outs), pullback
