r"""Soft top-k in magnitude: keep the k entries of largest ``|x_i|``, softly and sparsely (Sander et al. 2023).

The relaxation of ``x * hard_topk_mask(|x|)`` that the pruning of weights or
activations needs: entries far below the k-th magnitude are exactly 0,
those far above it are exactly ``x_i``, and only a band around the
threshold blends (its formula: :mod:`rankops._cores.magnitude`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ._cores.magnitude import magnitude_core
from ._lib._calls import Call, operator
from ._lib._compat import Array
from ._lib._options import Options, choice, norm_exponent, option, positive_scalar, python_number
from .sorting import bind_real_k

__all__ = ["soft_topk_magnitude", "MagnitudeOptions"]


@dataclasses.dataclass(frozen=True)
class MagnitudeOptions(Options):
    """Options of :func:`soft_topk_magnitude` (the defaults are those of the paper's code, with ``"l2"``)."""

    regularization: str = option("l2", choice("l2", "lp"))
    p: float = option(4.0 / 3.0, norm_exponent)  # the exponent of regularization="lp"
    strength: float = option(0.1, python_number(positive_scalar, " (it sets the width of the blending band)"))


@operator(methods=("permutahedron",))
def soft_topk_magnitude(x: Array, /, k: float | Array, *, axis: int | tuple[int, ...] = -1, mask: Array | None = None, **options: Any) -> Call[Array]:
    """The k entries of largest magnitude kept, the rest 0, softly and sparsely: a relaxed ``x * topk_mask(|x|)``.

    Per row, with ``a = |x|``, ``eps = strength``, ``q = p / (p - 1)`` (p = 2
    for ``"l2"``) and the threshold ``theta`` that makes the entries' shares
    sum to k (Sander, Puigcerver, Djolonga, Peyre & Blondel 2023, the top-k
    in magnitude with p-norm regularization):

    - ``a_i <= theta``: exactly 0;
    - ``theta < a_i < theta + eps theta^(p-1)``: ``sign(x_i) ((a_i - theta) +
      ((a_i - theta) / eps)^(q-1))``;
    - otherwise exactly ``x_i``.

    Continuous in x and k; for ``"l2"`` scale-free (``eps`` is the blending
    band's width relative to the threshold, and ``f(c x) = c f(x)``); as
    ``strength -> 0``, the hard top-k in magnitude. O(n log n) array
    operations: a sort and a binary search, no host callback, no n x n matrix.

    Parameters
    ----------
    x : array
        Input (any floating dtype; integers are promoted), any shape.
    k : float or array
        How many entries to keep: a real in (0, n], or an array of per-row k
        of the batch shape (x without ``axis``); differentiable.
    axis : int or tuple of ints, default -1
        The axis (or axes, flattened together) along which to select.
    mask : bool array, optional
        True for the valid entries: the top k of each row's n_v valid
        entries, 0 elsewhere; a row with no valid entry, or with k > n_v, is
        NaN.

    Other Parameters
    ----------------
    regularization : {"l2", "lp"}, default "l2"
        ``"lp"``: the p-norm, with p below 2 a band whose entries start at
        the slope of a soft-thresholding (1) rather than ``1 + 1/strength``.
    p : float, default 4/3
        With ``"lp"``: the exponent, in (1, 2]; closed forms for 2, 3/2 and
        4/3, Newton's method otherwise.
    strength : float, default 0.1
        The regularization's strength (a Python number), the paper's ``l``;
        for ``"lp"`` it has the units of ``|x|^(2-p)``:
        ``f(c x; eps) = c f(x; c^(p-2) eps)``.

    Returns
    -------
    array
        Shape, namespace, device and floating dtype of ``x``. A row with a
        non-finite entry is NaN.

    Examples
    --------
    >>> import numpy as np, rankops
    >>> np.round(rankops.soft_topk_magnitude(np.array([3.0, -0.5, -2.0, 1.9, 0.1]), 2), 3)
    array([ 3.   ,  0.   , -1.571,  0.471,  0.   ])
    """
    return bind_real_k(magnitude_core, _parse(options), x, k, axis, mask, "soft_topk_magnitude", closed=True)


def _parse(options: dict[str, Any]) -> MagnitudeOptions:
    where = "soft_topk_magnitude"
    if "p" in options and options.get("regularization") != "lp":
        raise ValueError(f"{where}: p is the exponent of regularization='lp', got regularization={options.get('regularization', 'l2')!r}")
    opts, _ = MagnitudeOptions.parse(options, where)
    return opts
