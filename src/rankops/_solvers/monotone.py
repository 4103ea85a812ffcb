r"""Exact dual potentials of one-dimensional transport: the warm start of the Sinkhorn operators.

Between points ``s_i`` (weights ``a``) and ascending targets ``y_j`` (weights
``b``) with a cost ``C_ij = h(y_j - s_i)``, ``h`` convex, the optimal plan is
the north-west corner rule applied after sorting ``s`` (Cuturi, Teboul &
Vert 2019, Prop. 1): in sorted order its support is a staircase of cells,
one step right or down at each breakpoint of ``cumsum(a)`` and
``cumsum(b)``. Dual potentials with ``f_i + g_j = C_ij`` on that staircase
follow by telescoping along it:

    f_i - f_{i-1} = C_{i, j(i)} - C_{i-1, j(i)},     j(i): the column that holds cumsum(a)_{i-1},
    g_j - g_{j-1} = C_{i(j), j} - C_{i(j), j-1},     i(j): the row that holds cumsum(b)_{j-1},

from ``g_0 = 0``; the cost being a Monge array (convex ``h``), they satisfy
``f_i + g_j <= C_ij`` everywhere, so they solve the unregularised dual.
The row steps ``j(i)`` come from one binary search; the column steps
``i(j)`` are read off them, so both telescopes walk one staircase. A
breakpoint shared by both sides (within the sums' rounding) may step right
or down first: the two choices give the dual's extreme solutions, and the
start is their mean (see :func:`grid_potentials`).

The entropic potentials differ from these by O(epsilon log n): started
here, Sinkhorn skips the phase where the potentials travel O(max C)
from zero. An O(n log n) sort and four binary searches per row.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from array_api_compat import device as _device

from .._lib._adapters import get_adapter

__all__ = ["grid_potentials"]


def grid_potentials(xp: Any, s: Any, log_a: Any, log_b: Any, cost: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``(f, g)`` for points ``s`` (..., n) and the grid targets ``y_j = j / (m - 1)``.

    ``log_a`` (..., n) and ``log_b`` (..., m) broadcast against ``s``'s
    batch; ``cost(d)`` is ``h(d)`` elementwise. Returns ``f`` of the
    broadcast batch plus (n,) and ``g`` plus (m,), in ``s``'s dtype.

    Where breakpoints are shared (n = m with uniform weights: every one),
    the dual is not unique: stepping right first or down first at each gives
    its two extreme solutions. Their mean, feasible too, lies nearer the
    entropic potentials than either (which sit inside the polytope).
    """
    adapter = get_adapter(xp)
    n, m = s.shape[-1], log_b.shape[-1]
    batch = np.broadcast_shapes(tuple(s.shape[:-1]), tuple(log_a.shape[:-1]), tuple(log_b.shape[:-1]))  # shapes only
    s = xp.broadcast_to(s, batch + (n,))
    order = xp.argsort(s, axis=-1, stable=True)
    ss = adapter.take(xp, s, order)
    a_cum = xp.cumulative_sum(adapter.take(xp, xp.broadcast_to(xp.exp(log_a), batch + (n,)), order), axis=-1)
    b_cum = xp.broadcast_to(xp.cumulative_sum(xp.exp(log_b), axis=-1), batch + (m,))
    # Breakpoints closer than the sums' rounding are one shared breakpoint: whether two equal
    # sums compare equal depends on how the host added them (XLA under jit differs from eager).
    tol = 4 * xp.finfo(s.dtype).eps * math.sqrt(n + m)
    right = _staircase(xp, ss, a_cum[..., :-1] + tol, b_cum, cost, side="right")
    down = _staircase(xp, ss, a_cum[..., :-1] - tol, b_cum, cost, side="left")
    f_sorted, g = ((p + q) / 2 for p, q in zip(right, down))
    return adapter.take(xp, f_sorted, adapter.invert_permutation(xp, order)), g


def _staircase(xp: Any, ss: Any, a_break: Any, b_cum: Any, cost: Callable[[Any], Any], *, side: str) -> tuple[Any, Any]:
    """Potentials telescoped along one staircase: ``f`` (in sorted order) and ``g``.

    ``col[i]``, the column in which the path steps from sorted row ``i`` to
    ``i + 1``, counts the column breakpoints below ``a_break[i]``
    (``side="right"``: a shared one steps right first; ``"left"``: down
    first). The column steps are read off the same path, ``row[j - 1] =
    #{i: col[i] < j}``, so the two telescopes walk one staircase exactly.
    """
    adapter = get_adapter(xp)
    dev, m = _device(ss), b_cum.shape[-1]
    scale = 1.0 / max(m - 1, 1)
    col = xp.clip(adapter.searchsorted(xp, b_cum, a_break, side=side), 0, m - 1)  # (..., n - 1)
    y_col = xp.astype(col, ss.dtype) * scale
    df = cost(y_col - ss[..., 1:]) - cost(y_col - ss[..., :-1])
    steps = xp.broadcast_to(xp.arange(1, m, dtype=col.dtype, device=dev), col.shape[:-1] + (m - 1,))
    s_row = adapter.take(xp, ss, adapter.searchsorted(xp, col, steps, side="left"))  # the row of each column step
    y = xp.arange(m, dtype=ss.dtype, device=dev) * scale
    dg = cost(y[1:] - s_row) - cost(y[:-1] - s_row)
    zero = xp.zeros(col.shape[:-1] + (1,), dtype=ss.dtype, device=dev)
    f_sorted = cost(-ss[..., :1]) + xp.concat([zero, xp.cumulative_sum(df, axis=-1)], axis=-1)
    return f_sorted, xp.concat([zero, xp.cumulative_sum(dg, axis=-1)], axis=-1)
