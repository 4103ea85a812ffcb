r"""Optimal-transport operators: soft CDFs, quantiles, quantile normalization, top-k masks.

Each is one entropic transport between the n entries of a row, squashed into
[0, 1], and an ordered target measure, read out differently (Cuturi, Teboul
& Vert 2019, Definitions 1-2 and Eq. 4; Cuturi et al. 2019, Alg. 2); the
cores and the math are in :mod:`rankops._cores.transport`, the shared
option set and readout in :mod:`rankops.sinkhorn`. ``soft_rank``
and ``soft_sort`` with ``method="sinkhorn"`` (:mod:`rankops.sorting`) use the
same transport; ``sort_with`` carries vectors along ``soft_sort``'s plan.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

from ._cores import masked
from ._cores.quantile import quantile_core
from ._cores.sort_with import sort_with_core
from ._cores.transport import cdf_core, quantile_normalize_core, quantize_core
from ._docstrings import SECTIONS
from ._lib._calls import LIKE_INPUT, INPUT, LEVELS, REDUCED, VALUE, Call, Layout, operator, prepare
from ._lib._compat import Array, is_array, normalize_axis, real_float_dtypes
from ._lib._docs import fill_doc
from ._lib._options import boolean, positive_count
from .sinkhorn import SOLVER_OPTIONS, TransportOptions, bind_grid, check_1d, input_weights, reported, return_info
from .sorting import TOPK_METHODS, bind_topk_mask

__all__ = ["soft_cdf", "soft_quantile", "soft_quantile_normalize", "soft_quantize", "soft_topk_mask", "sort_with"]


@operator(methods=("sinkhorn",))
@fill_doc(**SECTIONS)
def soft_cdf(x: Array, /, *, axis: int | tuple[int, ...] = -1, **options: Any) -> Call[Array]:
    """Sinkhorn CDF of each entry within its row: ``a^-1 (P b_bar)``, in [0, 1].

    ``P`` is the entropic plan between the squashed entries (weights a = 1/n)
    and m targets on [0, 1] (weights b), ``b_bar = cumsum(b)`` (Cuturi,
    Teboul & Vert 2019, Definition 2); ``soft_rank = n * soft_cdf``.

    Parameters
    ----------
    %(x)s

    Other Parameters
    ----------------
    %(softness)s
    %(sinkhorn_options)s
    %(targets)s
    %(weights)s
    %(cost_power)s

    %(returns_like_x)s
        tends to
        ``rankdata(x) / n`` as ``epsilon -> 0`` on inputs without ties.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> np.round(rankops.soft_cdf(np.array([0.3, -1.2, 2.5, 0.7]), epsilon=1e-3), 2)
    array([0.5 , 0.25, 1.  , 0.75])
    """
    return bind_grid(cdf_core, "soft_cdf", x, axis, options)


@operator(methods=("sinkhorn",))
@fill_doc(**SECTIONS)
def soft_quantile(x: Array, /, q: float | Array, *, axis: int | tuple[int, ...] = -1, **options: Any) -> Call[Array]:
    """Sinkhorn quantile(s) of level ``q`` along ``axis`` (after Eq. 4 of Cuturi, Teboul & Vert 2019).

    Three targets (0, 1/2, 1); the quantile is the middle entry of the soft
    sort. Centred (the default), they are weighted (c - t/2, t, 1 - c - t/2)
    for a filler weight t and the CDF level c = (q (n - 1) + 1/2) / n of
    NumPy's linear position q (n - 1) (c = q with ``weights``: NumPy's
    weighted quantile), so the middle block of mass covers [c - t/2, c + t/2]
    and the hard limit is the mean of the row's quantile function over that
    interval: ``numpy.quantile(x, q)`` with ``filler=1/n``. Near the ends t
    shrinks to 2 min(c, 1 - c) (never below 1e-6 t: levels 0 and 1 give the
    soft minimum and maximum). ``centered=False`` is the paper's Eq. 4, weights
    (q (1 - t), t, (1 - q)(1 - t)), whose middle block sits at
    q + t (1/2 - q): biased towards the median.

    Parameters
    ----------
    %(x)s
    q : float or 1-D array
        A level in [0, 1] (the output drops ``axis``), or a 1-D array of
        levels (``axis`` is replaced by ``len(q)``). Array levels are data: one
        outside [0, 1] yields NaN rather than an error, and they receive a
        gradient.

    Other Parameters
    ----------------
    filler : float in (0, 1), default 0.05
        t, the weight of the middle target.
    centered : bool, default True
        Centre the middle block of mass on NumPy's linear position of q (see
        above); False: Eq. 4.
    %(softness)s
    %(sinkhorn_options)s
    %(weights)s
    %(cost_power)s

    Returns
    -------
    array
        Tends to a value between the order statistics bracketing level q as
        ``epsilon -> 0``.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x = np.array([[0.3, -1.2, 2.5, 0.7]])
    >>> np.round(rankops.soft_quantile(x, 0.5, epsilon=1e-3), 2)
    array([0.5])
    >>> rankops.soft_quantile(x, np.array([0.1, 0.9]), epsilon=1e-3).shape
    (1, 2)
    """
    info = return_info(options)
    opts, weights = TransportOptions.parse(options, "soft_quantile", names=SOLVER_OPTIONS + ("filler", "centered"), arrays=("weights", "mask"))
    if is_array(q):
        p = prepare(x, axis=axis, opts=opts, arrays={"q": q, **weights})
        check_1d(q, "q")
        return reported(quantile_core, p, opts, input_weights(p, {"q": q, **weights}), "soft_quantile", info, role=LEVELS)
    if isinstance(q, bool) or not isinstance(q, numbers.Real):
        raise TypeError(f"q must be a Python float or a 1-D array of levels, got {type(q).__name__}")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q!r}")
    p = prepare(x, axis=axis, opts=opts, arrays=weights)
    return reported(quantile_core, p, opts, input_weights(p, {"q": float(q), **weights}), "soft_quantile", info, role=REDUCED)


@operator(methods=("sinkhorn",))
@fill_doc(**SECTIONS)
def soft_quantile_normalize(x: Array, targets: Array, /, *, axis: int | tuple[int, ...] = -1, **options: Any) -> Call[Array]:
    """Replace each entry by a target value, keeping the order of ``x``: ``a^-1 (P targets)``.

    Proposition 2 of Cuturi, Teboul & Vert 2019 (``T(x) = n P f``); with a
    learned ``targets`` this is supervised quantile normalization (Le Morvan &
    Vert 2017).

    Parameters
    ----------
    %(x)s
    targets : 1-D array
        An increasing array of m values (m may differ from n); differentiable.

    Other Parameters
    ----------------
    target_weights : 1-D array, optional
        Probability weights of the m targets (default uniform); differentiable.
    %(softness)s
    %(sinkhorn_options)s
    %(weights)s
    %(cost_power)s

    %(returns_like_x)s
        tends to
        ``targets[rank(x) - 1]`` for m == n as ``epsilon -> 0``.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x = np.array([0.3, -1.2, 2.5, 0.7])
    >>> np.round(rankops.soft_quantile_normalize(x, np.array([0.0, 1.0, 10.0, 100.0]), epsilon=1e-3), 2)
    array([  1.,   0., 100.,  10.])
    """
    info = return_info(options)
    opts, weights = TransportOptions.parse(
        options, "soft_quantile_normalize", names=SOLVER_OPTIONS, arrays=("target_weights", "weights", "mask")
    )
    if not is_array(targets):
        raise TypeError(f"targets must be a 1-D array, got {type(targets).__name__}")
    arrays = {"targets": targets, **weights}
    p = prepare(x, axis=axis, opts=opts, arrays=arrays)
    check_1d(targets, "targets")
    if "target_weights" in weights:
        check_1d(weights["target_weights"], "target_weights", targets.shape[0])
    return reported(quantile_normalize_core, p, opts, input_weights(p, arrays), "soft_quantile_normalize", info)


@operator(methods=("sinkhorn",))
@fill_doc(**SECTIONS)
def soft_quantize(x: Array, num_levels: int, /, *, axis: int | tuple[int, ...] = -1, **options: Any) -> Call[Array]:
    """Soft quantization onto ``num_levels`` values: ``n P diag(b)^-1 P^T x``, b uniform over m = ``num_levels`` targets.

    The entries are soft-sorted onto m targets (``b^-1 P^T x``, m values),
    then each entry is replaced by its row of the plan's mix of them
    (``a^-1 P``), as OTT-JAX's ``soft_sort.quantize``. As ``epsilon -> 0``
    the sorted entries fall into m consecutive blocks of mass 1/m each and
    every entry takes its block's mean (the north-west-corner plan's,
    sharing an entry between blocks where n is not a multiple of m).

    Parameters
    ----------
    %(x)s
    num_levels : int
        m >= 1, the number of levels (m = 1: every entry becomes the mean).

    %(sinkhorn_other_parameters)s
    mask : bool array, optional
        True for the valid entries: each row's valid entries quantized alone
        (0 elsewhere; a row without a valid entry NaN). See docs/api.md, "Ragged rows".

    Returns
    -------
    array
        Shape, namespace, device and floating dtype of ``x``.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x = np.array([0.3, -1.2, 2.5, 0.7, 1.0, -0.8])
    >>> np.round(rankops.soft_quantize(x, 2, epsilon=1e-3), 2)
    array([-0.57, -0.57,  1.4 ,  1.4 ,  1.4 , -0.57])
    """
    info = return_info(options)
    opts, arrays = TransportOptions.parse(options, "soft_quantize", names=SOLVER_OPTIONS, arrays=("mask",))
    m = positive_count(num_levels, "num_levels")
    p = prepare(x, axis=axis, opts=opts, arrays=arrays)
    return reported(quantize_core, p, opts, {**input_weights(p, arrays), "num_levels": m}, "soft_quantize", info)


# soft_topk_mask's methods are those declared with a top-k binding (rankops.sorting.METHODS)
_TOPK_METHOD = "method : {" + ", ".join(f'"{m}"' for m in TOPK_METHODS) + f'}}, default "{TOPK_METHODS[0]}"' + """
    ``"lapsum"`` takes the one option ``alpha`` (float, default 1.0);
    ``"permutahedron"`` takes ``strength``, ``regularization`` (``"l2"``
    or ``"lp"``) and ``p``, as ``soft_rank``.
"""


@operator(methods=TOPK_METHODS)
@fill_doc(**SECTIONS, topk_method=_TOPK_METHOD)
def soft_topk_mask(x: Array, /, k: float | Array, *, axis: int | tuple[int, ...] = -1, method: str = "sinkhorn", **options: Any) -> Call[Array]:
    """Soft indicator of the k largest entries along ``axis``: values in [0, 1] summing to k.

    Two targets (0 and 1) weighted ((n - k)/n, k/n); the mask is the mass an
    entry sends to the top target, times n (Cuturi et al. 2019). With
    ``method="lapsum"``: ``m_i = F((x_i - b) / alpha)`` for the Laplace CDF F
    and the threshold b solving ``sum_i m_i = k``, in O(n log n). With
    ``method="permutahedron"``: the projection of ``x / strength`` onto
    ``{m in [0, 1]^n : sum m = k}``, ``"l2"`` or ``"lp"`` regularized (the
    p-norm, Sander et al. 2023): sparse (exact 0 and 1), O(n log n).

    Parameters
    ----------
    %(x)s
    k : int, float or array
        How many entries to select: an int in [1, n] (``"sinkhorn"``); a real
        in (0, n), or an array of per-row k of the batch shape, differentiable
        (``"lapsum"``; ``"permutahedron"``: a real in (0, n]).
    %(topk_method)s

    %(sinkhorn_other_parameters)s
    mask : bool array, optional
        True for the valid entries: the top k of each row's n_v valid
        entries, 0 elsewhere; a row with no valid entry, or too few for k
        (Sinkhorn and the permutahedron: k > n_v; LapSum: k >= n_v), is NaN. See docs/api.md,
        "Ragged rows".

    Returns
    -------
    array
        Shape, namespace, device and floating dtype of ``x``; tends to 1 on
        the k largest entries and 0 elsewhere as ``epsilon -> 0``.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> np.round(rankops.soft_topk_mask(np.array([0.3, -1.2, 2.5, 0.7]), 2, epsilon=1e-3), 2)
    array([0., 0., 1., 1.])
    >>> np.round(rankops.soft_topk_mask(np.array([0.3, -1.2, 2.5, 0.7]), 1.5, method="lapsum", alpha=0.1), 2)
    array([0.01, 0.  , 1.  , 0.49])
    >>> np.round(rankops.soft_topk_mask(np.array([0.3, -1.2, 2.5, 0.7]), 2, method="permutahedron", regularization="lp", strength=2.0), 3)
    array([0.316, 0.   , 1.   , 0.684])
    """
    return bind_topk_mask(x, k, axis, method, options)


@operator(methods=("sinkhorn",))
@fill_doc(**SECTIONS)
def sort_with(
    x: Array, criterion: Array, /, *, axis: int = -1, topk: int | None = None, descending: bool = False, **options: Any
) -> Call[Array]:
    """Soft-sort vectors by a real criterion: ``b^-1 P^T X``, each output a convex combination of the vectors.

    Per row, ``P`` is the plan ``soft_sort(criterion)`` uses: the entropic
    transport between the n squashed criterion values (weights a = 1/n) and m
    targets on a grid in [0, 1] (weights b); the n vectors ``X`` (n x F) are
    carried along it, ``diag(b)^-1 P^T X`` (m x F), ascending in the criterion
    (Cuturi, Teboul & Vert 2019; OTT-JAX's ``soft_sort.sort_with``). With
    ``topk=k``, only the k vectors of largest criterion: k targets of mass 1/n
    and one filler of mass (n - k)/n, whose vector is dropped (as
    ``soft_sort(topk=k)``). ``sort_with(c[..., None], c)`` is
    ``soft_sort(c)[..., None]``.

    Parameters
    ----------
    x : array
        The vectors: ``criterion``'s shape followed by one or more feature
        axes (``x.shape[:criterion.ndim] == criterion.shape``); integer and bool
        inputs are promoted to the default floating dtype. Differentiable.
    criterion : array
        The values to sort by, shape ``(..., n, ...)`` with n along ``axis``;
        same namespace and device as ``x``, any real dtype (computed in x's
        floating dtype). Differentiable.
    axis : int, default -1
        The criterion's axis to sort along; every other axis of ``criterion``
        is a batch axis.
    topk : int, optional
        k in [1, n]: return only the k vectors of largest criterion (k = n is
        the full sort). Fixes the targets: not with ``num_targets`` or
        ``target_weights``.
    descending : bool, default False
        The largest criterion first.

    Other Parameters
    ----------------
    %(softness)s
    %(sinkhorn_options)s
    %(targets)s
    %(cost_power)s
    mask : bool array, optional
        Shaped like ``criterion`` (or broadcastable): each row's valid
        vectors sorted alone, their n_v first with the default targets (0
        after them; m values with ``num_targets``, k with ``topk`` <= n_v,
        else NaN); a row without a valid entry is NaN. See docs/api.md,
        "Ragged rows".

    Returns
    -------
    array
        ``criterion``'s shape with the length n along ``axis`` replaced by m
        (n, ``num_targets``, the length of ``target_weights``, or k with
        ``topk``), followed by x's feature axes; x's namespace, device and
        floating dtype. Tends to the vectors ordered by ``argsort(criterion)``
        (the last k with ``topk``) as ``epsilon -> 0`` on criteria without ties.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> c = np.array([0.3, -1.2, 2.5, 0.7])
    >>> x = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 1.0], [4.0, 1.0]])
    >>> np.round(rankops.sort_with(x, c, epsilon=1e-3), 2)
    array([[2., 0.],
           [1., 0.],
           [4., 1.],
           [3., 1.]])
    >>> np.round(rankops.sort_with(x, c, topk=2, descending=True, epsilon=1e-3), 2)
    array([[3., 1.],
           [4., 1.]])
    """
    return _bind_sort_with(x, criterion, axis, topk, descending, options)


# -- sort_with: the vectors' layout -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _VectorLayout(Layout):
    """sort_with's layout: the caller's (criterion ``(..., n, ...)`` along ``axis``, then ``features``) and the core's ``(..., n, F)``.

    The vectors (``INPUT``) and the value (``VALUE``, k long) have the
    criterion's batch axes in front in both; ``LIKE_INPUT`` is the criterion,
    its axis last in the core's layout.
    """

    axis: int = 0  # the criterion's axis, normalized
    batch: int = 0  # the criterion's other axes: the core's batch axes
    features: tuple[int, ...] = ()

    def to_core(self, a: Any, role: str = INPUT) -> Any:
        xp, moved = self.xp, self.axis != self.batch
        if role == LIKE_INPUT:
            return xp.moveaxis(a, self.axis, -1) if moved else a
        if role not in (INPUT, VALUE):
            return super().to_core(a, role)
        if role == VALUE and a.dtype != self.compute_dtype:
            a = xp.astype(a, self.compute_dtype)
        a = xp.moveaxis(a, self.axis, self.batch) if moved else a
        return xp.reshape(a, tuple(a.shape[: self.batch + 1]) + (math.prod(self.features),))

    def to_caller(self, a: Any, role: str = INPUT, *, cast: bool = True) -> Any:
        xp, moved = self.xp, self.axis != self.batch
        if role == LIKE_INPUT:
            return xp.moveaxis(a, -1, self.axis) if moved else a
        if role not in (INPUT, VALUE):
            return super().to_caller(a, role, cast=cast)
        a = xp.reshape(a, tuple(a.shape[:-1]) + self.features)
        a = xp.moveaxis(a, self.batch, self.axis) if moved else a
        return xp.astype(a, self.out_dtype) if cast and role == VALUE and a.dtype != self.out_dtype else a


def _bind_sort_with(x: Any, criterion: Any, axis: Any, topk: Any, descending: Any, options: dict[str, Any]) -> Call[Array]:
    """Validate ``sort_with``'s arguments (shapes, dtypes, namespaces; never values) and lay them out for the core."""
    where = "sort_with"
    descending = boolean(descending, "descending")
    if topk is not None:
        topk = positive_count(topk, "topk")
        for name in ("num_targets", "target_weights"):
            if options.get(name) is not None:
                raise ValueError(f"{where}: topk fixes the targets (k values and one filler); do not pass {name} with it")
    info = return_info(options)
    opts, weights = TransportOptions.parse(options, where, names=SOLVER_OPTIONS + ("num_targets",), arrays=("target_weights", "mask"))
    mask = weights.pop("mask", None)
    p = prepare(x, opts=opts, arrays={"criterion": criterion, **weights, **masked.arrays(mask)}, core_ndim=2)
    real_float_dtypes(p.xp, criterion, "criterion")
    if criterion.ndim == 0:
        raise ValueError("criterion must have at least one dimension to sort along, got a 0-d array")
    axis = normalize_axis(axis, criterion.ndim, where="sort_with")
    shape, n = tuple(criterion.shape), criterion.shape[axis]
    if n == 0:
        raise ValueError(f"criterion has an empty axis {axis} (length 0): there is nothing to sort")
    if tuple(x.shape[: len(shape)]) != shape or x.ndim == len(shape):
        raise ValueError(
            f"x must have criterion's shape {shape} followed by one or more feature axes, got shape {tuple(x.shape)}"
        )
    if "target_weights" in weights:
        check_1d(weights["target_weights"], "target_weights", opts.num_targets)
    if topk is not None and topk > n:
        raise ValueError(f"topk must lie in [1, n] = [1, {n}], got {topk}")
    base = p.layout
    layout = _VectorLayout(base.xp, None, base.shape, base.compute_dtype, base.out_dtype, axis, len(shape) - 1, tuple(x.shape[len(shape):]))
    p = dataclasses.replace(p, x=layout.to_core(p.x), layout=layout)
    params = {"criterion": layout.to_core(criterion, LIKE_INPUT), "descending": descending, **weights}
    if mask is not None:
        if mask.dtype != p.xp.bool:
            raise TypeError(f"mask must be a bool array (True for the valid entries), got dtype {mask.dtype}")
        try:
            mask = p.xp.broadcast_to(mask, shape)
        except (ValueError, RuntimeError) as exc:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to criterion's shape {shape}") from exc
        params["mask"] = layout.to_core(mask, LIKE_INPUT)
    # k = n leaves the filler empty: that is the full sort (with a mask, each row's n_v decides)
    if topk is not None and (topk < n or mask is not None):
        params["topk"] = topk
    return reported(sort_with_core, p, opts, params, where, info, input_shaped=("criterion",))
