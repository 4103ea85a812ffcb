r"""``rankops.vjp``: gradients of any rankops operator or loss, on any backend.

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

- torch and JAX: the backend's own autodiff (``torch.autograd.grad``,
  ``jax.vjp``), so the operator's options apply as usual (``implicit``).
- NumPy, CuPy, Dask, array-api-strict: rankops' own backward rules, written
  once against the array API next to each operator's forward: closed forms
  for SoftSort and NeuralSort (softmax, sort and |s_i - s_j| pullbacks), and
  for every Sinkhorn operator the implicit rule of
  :mod:`rankops._solvers.implicit` (so these backends always get the
  gradient of the converged fixed point, whatever ``implicit`` says). Dask
  maps the rule over the same blocks as the forward, recomputing each
  block's forward inside its backward task.

A loss of :mod:`rankops.losses` composes operators with array arithmetic:
torch and JAX differentiate it; on the other backends it runs on a tape
(:mod:`rankops._lib._adapters._tape`) that records each array operation's
pullback and each operator inside it whole, by the operator's own rule.
Its scores (the first argument) are differentiated as an operator's ``x``,
any other floating array argument too; integer ones (labels, graded
relevance) get zeros.

For an operator the rule is its own: every public operator carries an
explicit object (``fun.operator``) whose ``vjp`` binds the call exactly as
calling ``fun`` does and differentiates that call's core; nothing is
recorded or switched by ambient state.

For :func:`rankops.sinkhorn` the cotangent is an array for the plan, or a
``SinkhornResult`` / tuple ``(plan, f, g, ...)`` whose entries may be None;
``f`` and ``g`` are defined up to a shared constant, so only cotangents
that respect it (``f_i + g_j``, ``<a, f> + <b, g>``, the plan) have exact
gradients by the implicit rule. ``hard=True`` operators return the relaxed
gradient (straight-through), as under autodiff.
"""

from __future__ import annotations

import textwrap
from typing import Any, Callable

from ._lib._adapters import get_adapter
from ._lib._adapters._tape import vjp as tape_vjp
from ._lib._arguments import call_with, differentiable_arguments, float_leaf, positional_names
from ._lib._calls import ArrayValue
from ._lib._compat import Array, namespace, device as _device
from ._lib._docs import fill_doc
from ._registry import OPERATORS
from . import losses

LOSSES = tuple(getattr(losses, name) for name in losses.__all__)

__all__ = ["vjp"]


_ONE_OF = ("One of " + ", ".join(f"``rankops.{f.__name__}``" for f in OPERATORS)
           + " (each operator of ``rankops._registry``), or a loss of ``rankops.losses`` (any name of its ``__all__``).")


@fill_doc(operators=textwrap.fill(_ONE_OF, 72))
def vjp(fun: Callable[..., Any], x: Array, /, *args: Any, **options: Any) -> tuple[Array, Callable[[Array], tuple[Array, ...]]]:
    """``(fun(x, *args, **options), vjp_fn)``, shaped like ``jax.vjp``.

    Parameters
    ----------
    fun : rankops operator or loss
        %(operators)s
    x : array
        The operator's or loss's first argument (``cost`` for ``sinkhorn``).
    *args, **options
        Its other arguments, as in a direct call (not ``return_info``).

    Returns
    -------
    value
        ``fun(x, *args, **options)``.
    vjp_fn : callable
        ``vjp_fn(cotangent)`` (an array shaped like ``value``; for
        ``sinkhorn`` also a tuple ``(plan, f, g)`` of arrays or None) returns
        a tuple with one gradient per array argument, in call order, each in
        its argument's shape, namespace, device and floating dtype.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x = np.array([[0.3, -1.2, 2.5, 0.7]])
    >>> ranks, vjp_fn = rankops.vjp(rankops.soft_rank, x, method="softsort", tau=0.5)
    >>> (dx,) = vjp_fn(np.array([[0.0, 0.0, 1.0, 0.0]]))
    >>> dx.shape, bool(abs(dx.sum()) < 1e-12)
    ((1, 4), True)
    """
    if any(fun is op for op in OPERATORS):
        return fun.operator.vjp(x, *args, **options)  # type: ignore[attr-defined]
    if any(fun is loss for loss in LOSSES):
        if "return_info" in options:
            raise TypeError(f"{fun.__name__} takes no return_info")
        return _loss_vjp(fun, x, args, options)
    names = ", ".join(f"rankops.{f.__name__}" for f in OPERATORS)
    raise TypeError(f"fun must be a rankops operator ({names}) or a loss of rankops.losses, got {fun!r}")


def _loss_vjp(fun: Callable[..., Any], x: Any, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
    """``rankops.vjp`` of a function of arrays built from the operators (the losses): ``(value, vjp_fn)``.

    Its floating array arguments are differentiated by the backend's reverse mode (torch, JAX) or, elsewhere, by a
    tape of the function's array operations on which each operator is recorded by its own rule
    (:mod:`._adapters._tape`); the first argument is promoted as an operator's is, any other integer or bool one
    (labels, graded relevance) gets zeros, a mask nothing.
    """
    positional = positional_names(fun)
    diff = differentiable_arguments(fun.__name__, positional, (x, *args), options)
    xp = namespace(x, names=(positional[0],))
    adapter = get_adapter(xp)
    # the first argument (the scores) is differentiated as the operators' is, an integer or bool one promoted; the
    # others where they are floating: integer labels are indices
    live = [name for name, value in diff if name == positional[0] or xp.isdtype(value.dtype, "real floating")]

    def f(*leaves: Any) -> Any:
        return call_with(fun, positional, (x, *args), options, dict(zip(live, leaves)))

    leaves = [float_leaf(value, name) for name, value in diff if name in live]
    if adapter.autodiff:
        value, outs, pull = adapter.autodiff_vjp(f, leaves, ArrayValue.differentiable)
    else:
        value, outs, pull = tape_vjp(xp, adapter, f, leaves, ArrayValue.differentiable)

    zero = value.dtype if xp.isdtype(value.dtype, "real floating") else None  # the dtype of an integer argument's zeros

    def vjp_fn(ct: Any) -> tuple[Any, ...]:
        grads = dict(zip(live, pull(ArrayValue.cotangents(ct, outs))))
        return tuple(grads[name] if name in grads else xp.zeros(arg.shape, dtype=zero, device=_device(arg)) for name, arg in diff)

    return value, vjp_fn
