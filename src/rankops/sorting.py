r"""Soft sort and soft rank along an axis, by any of the three methods.

With a relaxed permutation matrix ``P`` (row i: the item at position i, see
:mod:`rankops.permutations`) built from ``x`` itself:

- soft sort  = ``P @ x``          (position i gets a weighted mean of items)
- soft rank  = ``P^T @ [1..n]``   (item j gets its expected 1-based position)

``method="sinkhorn"`` (Cuturi, Teboul & Vert 2019) obtains ``P`` from an
entropic optimal transport instead; it lands with the Sinkhorn operators.
"""

from __future__ import annotations

from typing import Any, Callable

from ._lib._apply import finish, prepare, run, with_value
from ._lib._compat import is_array
from ._lib._numerics import matvec
from ._lib._validation import boolean, known_options, positive_count, positive_scalar
from .transport import sinkhorn_sort_or_rank
from .streaming import auto_block, stream_vjp
from .permutations import positions, hard_permutation, neuralsort_matrix, softsort_matrix, straight_through

__all__ = ["soft_sort", "soft_rank", "METHODS"]

METHODS = ("sinkhorn", "softsort", "neuralsort")


def _block(value: Any) -> Any:
    """``"auto"``, None (the full matrix) or an int >= 1 (rows per block)."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return value
    if isinstance(value, str):
        raise ValueError(f"block must be 'auto', None or an int >= 1, got {value!r}")
    return positive_count(value, "block")


def _matrix_and_params(method: Any, options: dict[str, Any], where: str) -> tuple[Callable[..., Any], dict[str, Any]]:
    if method not in ("softsort", "neuralsort"):
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    names = ("tau", "power", "hard", "block") if method == "softsort" else ("tau", "hard", "block")
    known_options(options, names, f"{where}(method={method!r})")
    params = {
        "tau": positive_scalar(options.get("tau", 1.0), "tau"),
        "hard": boolean(options.get("hard", False), "hard"),
        "block": _block(options.get("block", "auto")),
    }
    if method == "softsort":
        params["power"] = positive_scalar(options.get("power", 1), "power")
    return (softsort_matrix if method == "softsort" else neuralsort_matrix), params


def _sort_vjp(xp: Any, x: Any, *, matrix: Callable[..., Any], descending: bool, hard: bool, **params: Any) -> tuple[Any, Any]:
    """``P @ x`` and its pullback (that of the relaxed value when ``hard``)."""
    p, matrix_back = matrix.vjp(xp, x, descending=descending, **params)
    soft = matvec(xp, p, x)

    def pullback(ct: Any) -> dict[str, Any]:
        grads = matrix_back(ct[..., :, None] * x[..., None, :])
        return {**grads, "x": grads["x"] + matvec(xp, xp.matrix_transpose(p), ct)}

    if hard:
        soft = straight_through(xp, matvec(xp, hard_permutation(xp, x, descending), x), soft)
    return soft, pullback


def _rank_vjp(xp: Any, x: Any, *, matrix: Callable[..., Any], descending: bool, hard: bool, **params: Any) -> tuple[Any, Any]:
    """``P^T @ (1..n)`` and its pullback (that of the relaxed value when ``hard``)."""
    r = positions(xp, x, x.shape[-1])
    p, matrix_back = matrix.vjp(xp, x, descending=descending, **params)
    soft = xp.matmul(r, p)

    def pullback(ct: Any) -> dict[str, Any]:
        return matrix_back(r[:, None] * ct[..., None, :])

    if hard:
        soft = straight_through(xp, xp.matmul(r, hard_permutation(xp, x, descending)), soft)
    return soft, pullback


_sort_from_matrix = with_value(_sort_vjp)
_rank_from_matrix = with_value(_rank_vjp)


def _streamed_vjp(xp: Any, x: Any, *, block: Any, **params: Any) -> tuple[Any, Any]:
    # "auto" is resolved here, on the array the core receives (one Dask block, say)
    if block == "auto":
        block = auto_block(tuple(x.shape[:-1]), x.shape[-1], xp.finfo(x.dtype).bits // 8)
    return stream_vjp(xp, x, block=min(block, x.shape[-1]), **params)


_streamed = with_value(_streamed_vjp)


def _along_axis(core: Callable[..., Any], where: str, x: Any, axis: Any, descending: Any, method: Any, options: dict[str, Any]) -> Any:
    if method == "sinkhorn":
        return sinkhorn_sort_or_rank(where[len("soft_"):], x, axis, descending, options)
    matrix, params = _matrix_and_params(method, options, where)
    descending = boolean(descending, "descending")
    p = prepare(x, axis=axis, params=params)
    block = params.pop("block")
    # The streamed backward treats power as a constant: a learnable (array) power takes
    # the full-matrix path, whose gradient includes it.
    if block is None or is_array(params.get("power")):
        out = run(core, p, (p.n,), matrix=matrix, descending=descending, **params)
    else:
        output = where[len("soft_"):]
        out = run(_streamed, p, (p.n,), method=method, output=output, block=block, descending=descending, **params)
    return finish(p, out)


def soft_sort(x: Any, /, *, axis: int = -1, descending: bool = False, method: str = "sinkhorn", **options: Any) -> Any:
    """Differentiable sort of ``x`` along ``axis`` (ascending by default).

    Parameters
    ----------
    x : array
        Any array API array; integer and bool inputs are promoted to the
        default floating dtype.
    axis : int
        Axis to sort along; every other axis is a batch axis.
    descending : bool
        Largest first when True.
    method : {"sinkhorn", "softsort", "neuralsort"}
        The relaxation. Options: ``tau`` (> 0, default 1) and ``hard``
        (straight-through) for both permutation methods, ``power`` (> 0,
        default 1) for SoftSort. An unknown option raises ``TypeError``.

    Returns
    -------
    array of the shape, namespace, device and floating dtype of ``x``; tends
    to ``sort(x)`` as ``tau -> 0``.
    """
    return _along_axis(_sort_from_matrix, "soft_sort", x, axis, descending, method, options)


def soft_rank(x: Any, /, *, axis: int = -1, descending: bool = False, method: str = "sinkhorn", **options: Any) -> Any:
    """Differentiable 1-based ranks of ``x`` along ``axis``.

    Ascending by default like ``scipy.stats.rankdata`` (the smallest entry
    has rank 1); ``descending=True`` gives the largest entry rank 1. Same
    parameters as :func:`soft_sort`. As ``tau -> 0`` the ranks tend to
    ``rankdata(x)`` on inputs without ties.

    For ``"softsort"`` and ``"neuralsort"`` the rank of item j is
    ``sum_i i * P[i, j]``. ``P`` is row-stochastic but not doubly stochastic,
    so the ranks of a row always sum to ``n (n + 1) / 2``, yet at large
    ``tau`` a single rank can leave ``[1, n]`` (an item whose column of ``P``
    holds more, or less, than one unit of mass).
    """
    return _along_axis(_rank_from_matrix, "soft_rank", x, axis, descending, method, options)
