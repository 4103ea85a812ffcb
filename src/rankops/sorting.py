r"""Soft sort and soft rank along an axis, by any registered method.

With a relaxed permutation matrix ``P`` (row i: a distribution over the
items for the i-th position of the sorted order):

- soft sort  = ``P @ x``          (position i gets a weighted mean of items)
- soft rank  = ``P^T @ [1..n]``   (item j gets its expected 1-based position)

``P`` comes from an entropic optimal transport to an ordered grid
(``"sinkhorn"``, Cuturi, Teboul & Vert 2019, the default), or from ``x``
itself (``"softsort"``, Prillo & Eisenschlos 2020; ``"neuralsort"``, Grover
et al. 2019). Two methods need no matrix at all and cost O(n log n):
``"permutahedron"`` (a projection onto the permutahedron, Blondel et al.
2020) and ``"lapsum"`` (sums of Laplace CDFs, after Struski et al. 2025).
A method is one entry of :data:`METHODS`: a function that validates its
options and binds the call to its kernels.
"""

from __future__ import annotations

import functools
from typing import Any

from ._docstrings import SECTIONS
from ._kernels import lapsum, permutahedron, permutation, transport
from ._lib._calls import Call
from ._lib._docs import fill_doc
from ._lib._operator import operator

__all__ = ["soft_sort", "soft_rank", "METHODS"]

# method -> bind(output, x, axis, descending, options) -> Call, output "sort" or "rank"
METHODS = {
    "sinkhorn": transport.bind_sort_or_rank,
    "softsort": functools.partial(permutation.bind_sort_or_rank, "softsort"),
    "neuralsort": functools.partial(permutation.bind_sort_or_rank, "neuralsort"),
    "permutahedron": permutahedron.bind_sort_or_rank,
    "lapsum": lapsum.bind_sort_or_rank,
}


def _bind(output: str, x: Any, axis: Any, descending: Any, method: Any, options: dict[str, Any]) -> Call:
    bind = METHODS.get(method) if isinstance(method, str) else None
    if bind is None:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    return bind(output, x, axis, descending, options)


@operator
@fill_doc(**SECTIONS)
def soft_sort(x: Any, /, *, axis: int | tuple[int, ...] = -1, descending: bool = False, method: str = "sinkhorn", **options: Any) -> Any:
    """Differentiable sort of ``x`` along ``axis`` (ascending by default).

    ``P @ x`` for a relaxed permutation matrix ``P``. With ``"sinkhorn"``
    this is ``b^-1 (P^T x)`` for the plan ``P`` between the squashed entries
    and m targets on [0, 1] (Cuturi, Teboul & Vert 2019, Definition 1); the
    values are exact convex combinations of the entries. Sinkhorn's
    ``topk=k`` keeps the k largest only: k targets of mass 1/n and one
    filler target of mass (n - k)/n, an n x (k + 1) transport (as OTT-JAX's
    ``soft_sort.sort(topk=k)``).

    Parameters
    ----------
    %(x)s
    descending : bool, default False
        Largest first when True (the ascending operator applied to ``-x``).
    %(methods)s

    Returns
    -------
    array
        Shape, namespace, device and floating dtype of ``x`` (``axis`` of
        length m with ``num_targets=m``); tends to ``sort(x)`` as ``epsilon``
        or ``tau`` goes to 0. With ``return_info=True``: ``(value, info)``.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x = np.array([[0.3, -1.2, 2.5, 0.7]])
    >>> np.round(rankops.soft_sort(x, epsilon=1e-3), 2)
    array([[-1.2,  0.3,  0.7,  2.5]])
    >>> np.round(rankops.soft_sort(x, topk=2, epsilon=1e-3), 2)
    array([[0.7, 2.5]])
    >>> np.round(rankops.soft_sort(x, method="neuralsort", tau=1.0), 2)
    array([[-0.84,  0.27,  0.71,  2.16]])
    >>> np.round(rankops.soft_sort(x, method="permutahedron", strength=1.0), 2)
    array([[-0.92,  0.08,  1.08,  2.08]])
    """
    return _bind("sort", x, axis, descending, method, options)


@operator
@fill_doc(**SECTIONS)
def soft_rank(x: Any, /, *, axis: int | tuple[int, ...] = -1, descending: bool = False, method: str = "sinkhorn", **options: Any) -> Any:
    """Differentiable 1-based ranks of ``x`` along ``axis``.

    Ascending like ``scipy.stats.rankdata`` (the smallest entry has rank 1);
    ``descending=True`` gives the largest entry rank 1. ``P^T @ (1..n)`` for
    a relaxed permutation matrix ``P``; with ``"sinkhorn"``, ``n a^-1 (P
    b_bar)`` for the transport plan ``P`` and ``b_bar = cumsum(b)`` (Cuturi,
    Teboul & Vert 2019, Definition 2). SoftSort / NeuralSort matrices are
    row- but not doubly stochastic: the ranks of a row always sum to
    ``n (n + 1) / 2``, yet at large ``tau`` one rank can leave ``[1, n]``.

    Parameters
    ----------
    %(x)s
    descending : bool, default False
        Rank 1 for the largest entry when True.
    %(methods)s

    Returns
    -------
    array
        Shape, namespace, device and floating dtype of ``x``; tends to
        ``rankdata(x)`` on inputs without ties as ``epsilon`` or ``tau`` goes
        to 0. With ``return_info=True``: ``(value, info)``.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> x = np.array([[0.3, -1.2, 2.5, 0.7]])
    >>> np.round(rankops.soft_rank(x, epsilon=1e-3), 2)
    array([[2., 1., 4., 3.]])
    >>> np.round(rankops.soft_rank(x, method="softsort", tau=0.5), 2)
    array([[2.32, 1.05, 3.92, 2.72]])
    >>> np.round(rankops.soft_rank(x, method="lapsum", alpha=0.5), 2)
    array([[2.21, 1.04, 3.98, 2.78]])
    >>> ranks, info = rankops.soft_rank(x, return_info=True)
    >>> bool(info.converged.all())
    True
    """
    return _bind("rank", x, axis, descending, method, options)
