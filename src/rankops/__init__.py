"""rankops: differentiable sorting and ranking for every array API backend.

One implementation per operator, written against the Python array API
standard, runs on NumPy, CuPy, PyTorch, JAX, Dask and array-api-strict
arrays and differentiates under the caller's own autodiff.
"""

from __future__ import annotations

from .sinkhorn import ConvergenceWarning, PerformanceWarning, SinkhornInfo
from .gradients import vjp
from .isotonic import isotonic_regression
from .kernels import kendall_kernel, mallows_kernel, soft_kendall_tau, suquan_targets
from .permutations import diffsort, neuralsort, softsort
from .sinkhorn import SinkhornResult, sinkhorn
from .sorting import soft_rank, soft_sort
from .transport import soft_cdf, soft_quantile, soft_quantile_normalize, soft_quantize, soft_topk_mask, sort_with
from .multivariate import multivariate_cdf_quantile_maps
from .magnitude import soft_topk_magnitude

from . import losses  # noqa: E402, F401  (rankops.losses.spearman_loss, ...: built on the operators above)
from . import metrics  # noqa: E402, F401  (rankops.metrics.ndcg, ...: the exact metrics the ranking losses relax)

__version__ = "0.1.0.dev0"

__all__ = [
    "soft_rank",
    "soft_sort",
    "soft_cdf",
    "soft_quantile",
    "soft_quantile_normalize",
    "soft_quantize",
    "soft_topk_mask",
    "soft_topk_magnitude",
    "sort_with",
    "multivariate_cdf_quantile_maps",
    "sinkhorn",
    "SinkhornResult",
    "SinkhornInfo",
    "ConvergenceWarning",
    "PerformanceWarning",
    "softsort",
    "neuralsort",
    "diffsort",
    "isotonic_regression",
    "kendall_kernel",
    "mallows_kernel",
    "soft_kendall_tau",
    "suquan_targets",
    "vjp",
    "__version__",
]
