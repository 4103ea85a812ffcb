r"""Kernels on permutations (Jiao & Vert 2015, 2017; paper 000), a smooth Kendall tau, and SUQUAN's targets.

``kendall_kernel`` and ``mallows_kernel`` compare vectors through the order of
their entries only: they are positive definite kernels on the symmetric
group, to plug into kernel methods (``sklearn.svm.SVC(kernel="precomputed")``).
``soft_kendall_tau`` is a differentiable Kendall tau for training;
``suquan_targets`` parameterises the learned quantile function of supervised
quantile normalization (Le Morvan & Vert 2017).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ._cores import kendall, masked
from ._cores.soft_kendall import soft_kendall_core
from ._lib._adapters import get_adapter
from ._lib._calls import LIKE_INPUT, REDUCED, ValueReadout, Call, Prepared, operator, prepare
from ._lib._compat import Array, broadcast_arrays, namespace
from ._lib._options import Options, choice, option, positive_scalar, python_number

__all__ = ["kendall_kernel", "mallows_kernel", "soft_kendall_tau", "suquan_targets"]

_ALGORITHMS = ("auto", "signs", "merges")


@dataclasses.dataclass(frozen=True)
class SoftKendallOptions(Options):
    """Options of ``soft_kendall_tau``."""

    tau: float = option(0.1, python_number(positive_scalar))


def _vectors(a: Any, axis: Any, name: str, where: str, also: dict[str, Any] | None = None) -> Prepared:
    """``a`` prepared as the operators' inputs are, entries' axis last; its vectors' axis is then second to last."""
    if a.ndim < 2:
        raise ValueError(f"{name} must have at least 2 dimensions (vectors, entries), got shape {tuple(a.shape)}")
    return prepare(a, axis=axis, name=name, one_axis_for=where, arrays=also)


def _counts(x: Any, y: Any, axis: Any, algorithm: str, where: str) -> tuple[Any, Any, Any, Any, int, Any]:
    """``(xp, n_c - n_d, n_c + n_d, output dtype, p, unordered)`` between the vectors of ``x`` and ``y`` (default
    ``x``); ``unordered``: True for the pairs of vectors of which one holds a NaN."""
    algorithm = choice(*_ALGORITHMS)(algorithm, "algorithm")
    px = _vectors(x, axis, "x", where, None if y is None else {"y": y})
    xp, adapter, xv, out = px.xp, px.adapter, px.x, px.out_dtype
    if y is None:
        yv = xv
    else:
        py = _vectors(y, axis, "y", where)
        yv, out_y = py.x, py.out_dtype
        if yv.shape[-1] != xv.shape[-1]:
            raise ValueError(f"x and y must have as many entries along axis {axis}: {xv.shape[-1]} and {yv.shape[-1]}")
        common = xp.result_type(xv.dtype, yv.dtype)
        xv, yv = (v if v.dtype == common else xp.astype(v, common) for v in (xv, yv))
        out = xp.result_type(out, out_y)
    batch = tuple(_broadcast(xv.shape[:-2], yv.shape[:-2]))
    xv = xp.broadcast_to(xv, batch + tuple(xv.shape[-2:]))
    yv = xp.broadcast_to(yv, batch + tuple(yv.shape[-2:]))
    p = xv.shape[-1]
    if algorithm == "merges" and adapter.lazy:
        raise ValueError("algorithm='merges' gathers along rows, which Dask arrays cannot; use 'signs' (what 'auto' picks on Dask)")
    merges = algorithm == "merges" or (algorithm == "auto" and p > kendall.SIGNS_UP_TO and not adapter.lazy)
    dot, both = adapter.compiled(kendall.by_merges if merges else kendall.by_signs)(xp, xv, yv)
    # a vector holding a NaN has no order: its kernel values are NaN, not the counts of its comparisons (all False)
    unordered = xp.any(xp.isnan(xv), axis=-1)[..., :, None] | xp.any(xp.isnan(yv), axis=-1)[..., None, :]
    return xp, dot, both, out, p, unordered


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> list[int]:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for i, j in zip(a, b):
        if i != j and 1 not in (i, j):
            raise ValueError(f"the batch shapes of x {a} and y {b} do not broadcast")
        out.append(max(i, j))
    return out


def kendall_kernel(x: Array, y: Array | None = None, /, *, axis: int = -1, algorithm: str = "auto") -> Array:
    r"""Kendall kernel (Kendall's tau-a) between every vector of ``x`` and every vector of ``y``.

    ``K(u, v) = (n_c - n_d) / (p (p - 1) / 2)``, with ``n_c`` / ``n_d`` the
    concordant / discordant pairs of entries (a pair tied in either vector
    counts as neither): Kendall's tau-a, which equals the inner product of the
    embeddings ``Phi_ij(u) = sign(u_i - u_j)``, ``i < j``, over
    ``p (p - 1) / 2`` (Jiao & Vert 2015; paper 000). The Gram matrix is
    positive semi-definite.

    Parameters
    ----------
    x : array
        Shape ``(..., N, p)``: N vectors of p entries (with ``axis``, the
        entries lie along ``axis`` and the vectors along the last other axis).
    y : array, optional
        Shape ``(..., M, p)``, same namespace and device; default ``x``.
        Leading axes broadcast against ``x``'s.
    axis : int, default -1
        The axis of the entries.
    algorithm : {"auto", "signs", "merges"}
        ``"signs"``: the sign embeddings in blocks, multiplied as matrices,
        ``O(N M p^2)`` work; ``"merges"``: Knight's sort-and-count,
        ``O(N M p log^2 p)``; ``"auto"``: signs up to p = 1024 (near the measured
        crossover), merges above. Dask arrays take signs (lazy matrix
        products): merges gathers along rows, which Dask cannot.

    Returns
    -------
    array
        Shape ``(..., N, M)``, values in [-1, 1] (0 for p = 1: no pairs),
        the floating dtype of the inputs (integers: the default float); NaN
        for a vector holding a NaN. Constant in ``x`` and ``y``
        between ties: no useful gradient (see :func:`soft_kendall_tau`).

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [1.0, 3.0, 2.0]])
    >>> rankops.kendall_kernel(x)
    array([[ 1.        , -1.        ,  0.33333333],
           [-1.        ,  1.        , -0.33333333],
           [ 0.33333333, -0.33333333,  1.        ]])
    """
    xp, dot, _, out, p, unordered = _counts(x, y, axis, algorithm, "kendall_kernel")
    k = xp.where(unordered, math.nan, dot / max(p * (p - 1) / 2, 1))  # p = 1: no pairs, 0
    return k if k.dtype == out else xp.astype(k, out)


def mallows_kernel(x: Array, y: Array | None = None, /, *, lam: float = 1.0, axis: int = -1, algorithm: str = "auto") -> Array:
    r"""Mallows kernel ``exp(-lam n_d)`` between every vector of ``x`` and every vector of ``y``.

    ``n_d`` is the number of discordant pairs of entries (a pair tied in
    either vector is not discordant): the Kendall distance, the length of
    the shortest path between the two permutations in the Cayley graph of
    adjacent transpositions. Positive definite on permutations for every
    ``lam >= 0`` (Jiao & Vert 2015; paper 000): there ``exp(-lam n_d)`` is the
    Gaussian kernel ``exp(-lam ||Phi(u) - Phi(v)||^2 / 4)`` of the sign
    embeddings. With ties, ``n_d`` as defined here (a tied pair is not
    discordant) no longer is that squared distance, and the Gram matrix may
    have negative eigenvalues (measured: -1.02 on 20 random rows of 9
    entries from {0, 1, 2}, lam = 0.3, among 20 without ties): break ties,
    or use :func:`kendall_kernel`, which stays positive semi-definite.

    Parameters
    ----------
    x, y, axis, algorithm
        As in :func:`kendall_kernel`.
    lam : float, default 1.0
        The bandwidth ``lambda >= 0`` (a Python number).

    Returns
    -------
    array
        Shape ``(..., N, M)``, values in (0, 1]; NaN for a vector holding a NaN.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [1.0, 3.0, 2.0]])
    >>> np.round(rankops.mallows_kernel(x, lam=0.5), 4)
    array([[1.    , 0.2231, 0.6065],
           [0.2231, 1.    , 0.3679],
           [0.6065, 0.3679, 1.    ]])
    """
    lam = python_number(_non_negative)(lam, "lam")
    xp, dot, both, out, _, unordered = _counts(x, y, axis, algorithm, "mallows_kernel")
    k = xp.where(unordered, math.nan, xp.exp(-lam * ((both - dot) / 2)))
    return k if k.dtype == out else xp.astype(k, out)


def _non_negative(value: Any, name: str) -> Any:
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


@operator(methods=("soft_kendall_tau",))
def soft_kendall_tau(
    x: Array, y: Array, /, *, axis: int | tuple[int, ...] = -1, tau: float = 0.1, mask: Array | None = None
) -> Call[Array]:
    r"""A differentiable Kendall tau-a between matching vectors of ``x`` and ``y``.

    ``T(x, y) = sum_{i<j} tanh((x_i - x_j)/tau) tanh((y_i - y_j)/tau) / (p (p-1)/2)``:
    each sign of a pair difference in Kendall's tau-a (see
    :func:`kendall_kernel`) replaced by a tanh of width ``tau``, so
    ``T -> tau_a(x, y)`` as ``tau -> 0`` (ties give 0, as in tau-a). The
    pairs are streamed in blocks of rows with a hand-written backward pass
    (``dT/dx_k = sum_j tanh'((x_k - x_j)/tau) tanh((y_k - y_j)/tau) / (tau P)``),
    so memory stays O(p) at any p (blocks of about 1 MiB): ``O(p^2)`` time.

    Parameters
    ----------
    x, y : array
        Same shape (or broadcastable), same namespace and device; the
        entries lie along ``axis``, every other axis is a batch axis.
        Differentiable in both.
    axis : int or tuple of ints, default -1
        The axis of the entries (a tuple: those axes flattened into one, in
        increasing order; all of them dropped from the output).
    tau : float, default 0.1
        Width of the smooth sign (> 0), in the units of the data.
    mask : bool array, optional
        True for the valid entries (shaped like ``x``, or broadcastable): the
        pairs of each row's p_v valid entries, ``P = p_v (p_v - 1) / 2``; no
        gradient off the mask, NaN for a row without a valid entry.

    Returns
    -------
    array
        ``x``'s shape without ``axis``: one value in [-1, 1] per pair of rows
        (0 for a single entry: no pairs). A NaN in a row gives NaN.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 3.0, 2.0, 4.0])
    >>> round(float(rankops.soft_kendall_tau(x, y, tau=1e-3)), 6)   # tau-a: (5 - 1) / 6
    0.666667
    """
    return _bind_soft_kendall_tau(x, y, axis, tau, mask)


def _bind_soft_kendall_tau(x: Any, y: Any, axis: Any, tau: float, mask: Any = None) -> Call[Array]:
    """``rankops.soft_kendall_tau``: ``x`` and ``y`` broadcast to one shape, entries along ``axis`` (or a tuple of axes)."""
    xp = namespace(x, y, names=("x", "y"))
    if tuple(x.shape) != tuple(y.shape):
        try:
            x, y = broadcast_arrays(xp, x, y)
        except ValueError as err:  # the message names both shapes
            raise ValueError(f"x {tuple(x.shape)} and y {tuple(y.shape)} must have broadcastable shapes") from err
    opts, _ = SoftKendallOptions.parse({"tau": tau}, "soft_kendall_tau")
    p = prepare(x, axis=axis, opts=opts, arrays={"y": y, **masked.arrays(mask)})
    y = p.layout.to_core(xp.astype(y, p.x.dtype) if y.dtype != p.x.dtype else y, LIKE_INPUT)  # laid out as x (several axes: merged alike)
    return Call(soft_kendall_core, p, opts, masked.with_mask(p, {"y": y}, mask), readout=ValueReadout(REDUCED), input_shaped=("y",))


def suquan_targets(h: Array, /, *, low: float = 0.0, high: float = 1.0) -> Array:
    r"""An increasing quantile function from free parameters: ``low + (high - low) cumsum(softmax(h))``.

    The parameterisation of Cuturi, Teboul & Vert (2019, Sec. 4, after Le
    Morvan & Vert 2017's SUQUAN): ``f = cumsum(e^h / sum e^h)`` is strictly
    increasing from ``low`` (excluded) to ``high`` (the last value) for any
    real ``h``, so a model can learn the target quantile function of
    :func:`rankops.soft_quantile_normalize` by gradient descent on ``h``
    (softmax ignores a shift of ``h``: the paper fixes it by ``sum h = 0``).

    Parameters
    ----------
    h : array
        Shape ``(..., m)``, real floating; differentiable under the caller's
        autodiff (plain array operations).
    low, high : float
        The range of the targets (``low < high``).

    Returns
    -------
    array
        Shape ``(..., m)``: increasing along the last axis, ending at ``high``.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> rankops.suquan_targets(np.zeros(4))
    array([0.25, 0.5 , 0.75, 1.  ])
    """
    xp = namespace(h, names=("h",))
    if h.ndim < 1 or not xp.isdtype(h.dtype, "real floating"):
        raise TypeError(f"h must be a real floating array with at least one axis, got dtype {h.dtype} and shape {tuple(h.shape)}")
    if not (isinstance(low, (int, float)) and isinstance(high, (int, float)) and math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"low and high must be finite Python numbers with low < high, got {low!r} and {high!r}")
    adapter = get_adapter(xp)
    return low + (high - low) * adapter.cumulative_sum(xp, adapter.softmax(xp, h, axis=-1))
