"""Every public operator, with the methods it takes: what ``rankops.vjp`` accepts and what the suites cover."""

from __future__ import annotations

from .isotonic import isotonic_regression
from .kernels import soft_kendall_tau
from .permutations import neuralsort, softsort
from .sinkhorn import sinkhorn
from .sorting import METHODS, soft_rank, soft_sort
from .transport import soft_cdf, soft_quantile, soft_quantile_normalize, soft_quantize, soft_topk_mask, sort_with

__all__ = ["OPERATORS"]

# operator -> its methods (the values of its ``method`` option, or the one it is)
OPERATORS = {
    soft_rank: tuple(METHODS),
    soft_sort: tuple(METHODS),
    soft_cdf: ("sinkhorn",),
    soft_quantile: ("sinkhorn",),
    soft_quantile_normalize: ("sinkhorn",),
    soft_quantize: ("sinkhorn",),
    soft_topk_mask: ("sinkhorn", "lapsum"),
    sort_with: ("sinkhorn",),
    sinkhorn: ("sinkhorn",),
    softsort: ("softsort",),
    neuralsort: ("neuralsort",),
    isotonic_regression: ("isotonic",),
    soft_kendall_tau: ("soft_kendall_tau",),
}
