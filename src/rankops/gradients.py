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

Either way the rule is the operator's own: every public operator carries an
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

from ._lib._compat import Array
from ._lib._docs import fill_doc
from ._registry import OPERATORS

__all__ = ["vjp"]


_ONE_OF = "One of " + ", ".join(f"``rankops.{f.__name__}``" for f in OPERATORS) + " (each operator of ``rankops._registry``)."


@fill_doc(operators=textwrap.fill(_ONE_OF, 72))
def vjp(fun: Callable[..., Any], x: Array, /, *args: Any, **options: Any) -> tuple[Array, Callable[[Array], tuple[Array, ...]]]:
    """``(fun(x, *args, **options), vjp_fn)``, shaped like ``jax.vjp``.

    Parameters
    ----------
    fun : rankops operator
        %(operators)s
    x : array
        The operator's first argument (``cost`` for ``sinkhorn``).
    *args, **options
        The operator's other arguments, as in a direct call (not
        ``return_info``).

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
    if not any(fun is op for op in OPERATORS):
        if getattr(fun, "__module__", "").startswith("rankops.losses."):
            # the losses compose operators with array arithmetic, which has no backward rule of rankops' own
            raise TypeError(
                f"rankops.vjp differentiates the operators, not {fun.__module__}.{fun.__name__}: differentiate a loss "
                "with torch or JAX autodiff (its value is the same array code on every backend), or on NumPy apply "
                "rankops.vjp to the operator inside it (soft_rank, ...) and chain the loss's own derivative"
            )
        names = ", ".join(f"rankops.{f.__name__}" for f in OPERATORS)
        raise TypeError(f"fun must be a rankops operator ({names}), got {fun!r}")
    return fun.operator.vjp(x, *args, **options)  # type: ignore[attr-defined]
