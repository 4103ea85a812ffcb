"""Convergence is never silent: ``return_info``, :class:`ConvergenceWarning`, and the readout that applies them.

Every Sinkhorn operator's core returns, next to its value, the solver's
marginal error per transport problem. The :class:`Reported` readout warns
when some problem stopped above ``tol`` (wherever values can be read now)
and, with ``return_info=True``, returns ``(value, SinkhornInfo)``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple

from .._lib._calls import Along, Prepared
from .._lib._warnings import caller_stacklevel

__all__ = ["SinkhornInfo", "ConvergenceWarning", "warn_if_unconverged", "Reported"]


class SinkhornInfo(NamedTuple):
    """Convergence of the transport problems behind one operator call (``return_info=True``).

    One entry per problem, i.e. per row of the input (per row and level for
    :func:`rankops.soft_quantile` with an array of levels); arrays in the
    input's namespace and device, detached from autodiff.
    """

    converged: Any  # bool: error <= tol when the solver stopped
    error: Any  # L1 error of both marginals at exit, in the dtype the operator computed in


class ConvergenceWarning(RuntimeWarning):
    """Sinkhorn stopped at ``max_iter`` with a marginal error above ``tol`` in some row."""


def warn_if_unconverged(adapter: Any, xp: Any, error: Any, opts: Any, where: str) -> None:
    """Warn (:class:`ConvergenceWarning`) when some problem stopped above ``tol``.

    Reads values, so only where they exist now: not on tracers (``jax.jit``,
    ``grad``, ``vmap``, ``torch.func``) nor on Dask's lazy arrays. The eager
    solver loop has read its error at every block already, so the read costs
    no extra device sync there. A NaN error (a NaN or infinite input row) is
    a data problem, not a convergence one, and does not warn.
    """
    if not adapter.is_concrete(error):
        return
    bad = error > opts.tol
    if not bool(xp.any(bad)):
        return
    count = int(xp.sum(xp.astype(bad, xp.int32)))
    worst = float(xp.max(xp.where(bad, error, xp.zeros_like(error))))
    warnings.warn(
        f"{where}: Sinkhorn stopped at max_iter={opts.max_iter} with a marginal error above tol={opts.tol:g} in "
        f"{count} of {math.prod(error.shape)} transport problem(s) (largest {worst:.3g}); raise max_iter or epsilon, or pass "
        "return_info=True to see which ones",
        ConvergenceWarning,
        stacklevel=caller_stacklevel(),
    )


class Reported(Along):
    """Readout of a Sinkhorn operator: the value, warned about and, if asked, with its :class:`SinkhornInfo`.

    ``levels``: the value and the error have a trailing axis of quantile
    levels that goes where the caller's (first) axis was. Lazy backends never warn,
    so without ``return_info`` the error is left out of their graph (one task
    per block of rows).
    """

    def __init__(self, opts: Any, where: str, return_info: bool, *, lazy: bool, axis_kept: bool = True, levels: bool = False) -> None:
        super().__init__(axis_kept=axis_kept, levels=levels)
        self.opts, self.where, self.return_info = opts, where, return_info
        self.outputs = ("value",) if lazy and not return_info else ("value", "error")

    def finish(self, p: Prepared, outs: tuple[Any, ...]) -> Any:
        value = super().finish(p, outs)
        if len(outs) == 1:
            return value
        xp, adapter = p.xp, p.adapter
        err = adapter.stop_gradient(xp, outs[1])
        if self.levels:
            err = p.place(err, levels=True)
        warn_if_unconverged(adapter, xp, err, self.opts, self.where)
        return (value, SinkhornInfo(converged=err <= self.opts.tol, error=err)) if self.return_info else value
