r"""``rankops.isotonic_regression``: exact, batched, differentiable least-squares isotonic regression."""

from __future__ import annotations

import dataclasses

from ._cores import masked
from ._cores.regression import regression_core
from ._lib._calls import Call, operator, prepare
from ._lib._compat import Array
from ._lib._options import Options, boolean

__all__ = ["isotonic_regression"]

# one axis only: the order constraint is a chain along it (several axes would ask for a partial order)
WHERE = "isotonic_regression"


@dataclasses.dataclass(frozen=True)
class IsotonicOptions(Options):
    """``isotonic_regression`` has no hyper-parameters."""


@operator(methods=("isotonic",))
def isotonic_regression(
    y: Array, /, *, weights: Array | None = None, mask: Array | None = None, increasing: bool = True, axis: int = -1
) -> Call[Array]:
    r"""Least-squares isotonic regression of ``y`` along ``axis``.

    Solves, for every row, :math:`\min_v \sum_i w_i (y_i - v_i)^2` subject to
    :math:`v_1 \le v_2 \le \dots \le v_n` (``increasing=False``: ``\ge``):
    the same solution as ``scipy.optimize.isotonic_regression(y,
    weights=weights, increasing=increasing).x``, for every backend and batch.
    The solution is piecewise constant, each block holding its weighted mean
    (Barlow et al. 1972); it is computed exactly with array operations only:
    rounds that pool every decreasing run of blocks at once (most rows settle
    in one or two), then, for rows still unsettled after ``ceil(log2 n)`` of
    them, ``ceil(log2 n)`` rounds of parallel merges. No Python loop over the
    data, so ``jax.jit`` and ``vmap`` apply (see docs/fast-methods.md).

    Parameters
    ----------
    y : array
        Any array API array; every axis but ``axis`` is a batch axis.
    weights : array, optional
        Non-negative weights, shaped like ``y`` or 1-D of length n (the same
        for every row); default all ones. Differentiable. A zero weight
        leaves its entry free (the others get the fit of the weighted entries
        alone, SciPy's, which refuses zeros); a row with a negative or
        non-finite weight, or all zeros, is NaN, never a plausible fit (no
        check reads the values: that would sync the device).
    mask : bool array, optional
        True for the valid entries (shaped like ``y``, or broadcastable to
        it): each row's valid entries get the fit of those entries alone,
        the others 0 and no gradient; a row with no valid entry is NaN.
        Ragged rows, padded (see docs/api.md, "Ragged rows").
    increasing : bool, default True
        Fit a non-decreasing sequence (False: non-increasing).
    axis : int, default -1
        The axis along which the order constraint applies.

    Returns
    -------
    array
        The fitted values: shape, namespace, device and floating dtype of ``y``.
        Gradients are block-wise (Blondel et al. 2020, Lemma 1):
        ``dv_B / dy_i = w_i / W_B`` and ``dv_B / dw_i = (y_i - v_B) / W_B``
        for ``i`` in block ``B`` of total weight ``W_B``; blocks are the runs of
        equal fitted values.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> rankops.isotonic_regression(np.array([1.0, 3.0, 2.0, 4.0, 3.5]))
    array([1.  , 2.5 , 2.5 , 3.75, 3.75])
    >>> rankops.isotonic_regression(np.array([1.0, 3.0, 2.0]), weights=np.array([1.0, 1.0, 3.0]))
    array([1.  , 2.25, 2.25])
    """
    opts, _ = IsotonicOptions.parse({}, WHERE)
    increasing = boolean(increasing, "increasing")
    arrays = {k: v for k, v in (("weights", weights), ("mask", mask)) if v is not None}
    p = prepare(y, axis=axis, name="y", arrays=arrays, one_axis_for=WHERE)
    w = None if weights is None else p.lay_out(weights, "weights")
    params = {"increasing": increasing, "weights": w}
    if mask is not None:
        params["mask"] = masked.in_core_layout(p, mask)
    return Call(regression_core, p, opts, params, input_shaped=("weights",) if w is not None and w.ndim > 1 else ())
