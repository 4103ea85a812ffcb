r"""Ready losses built on the soft operators: one value per row, the caller reduces.

Every loss takes ``method=`` (the relaxation) and its options, and runs on
every backend that method runs on (Dask included), under the caller's
autodiff (torch autograd, ``jax.grad`` / ``jit`` / ``vmap``). The default
method of the rank-based losses is ``"permutahedron"`` (Blondel et al.
2020): O(n log n), no iterations, and the relaxation those authors trained
Spearman objectives with. As with the operators, float16 and bfloat16
inputs are computed in float32 and the value cast back, and bool / integer
inputs are promoted to the default floating dtype.

======================  ==============================================================  ==================
loss                    value per row                                                   methods
======================  ==============================================================  ==================
``spearman_loss``       ``1 - corr(soft_rank(pred), rankdata(target))``                 every soft_rank one
``soft_spearman``       ``corr(soft_rank(x), soft_rank(y))`` (both differentiable)      every soft_rank one
``kendall_loss``        ``1 - soft_kendall_tau(pred, target)`` (targets' signs exact)   smooth pair signs
``topk_loss``           ``relu(n - k + 1 - soft_rank(scores)[label])``                  every soft_rank one
``ndcg_loss``           ``1 - NDCG@k`` with soft ranks in the discounts, padding masks  every soft_rank one
``permutation_loss``    cross-entropy of a relaxed permutation matrix and the true one  neuralsort, softsort, sinkhorn, diffsort
``topk_cross_entropy``  ``-log sum_k p_k P(label in the top k)`` (difftopk)             diffsort, softsort, neuralsort, sinkhorn
``quantile_loss``       soft q-quantile of ``|target - pred|``                          sinkhorn, every soft_sort one
``pinball_loss``        the exact pinball (check) loss, the baseline of quantile_loss   (none)
======================  ==============================================================  ==================
"""

from __future__ import annotations

from ._common import DEFAULT_METHOD, rankdata  # noqa: F401  (re-exported: the examples and tests use them)
from .correlation import kendall_loss, soft_spearman, spearman_loss
from .ranking import MATRIX_METHODS, ndcg_loss, permutation_loss, topk_loss  # noqa: F401
from .classification import TOPK_METHODS, topk_cross_entropy  # noqa: F401
from .regression import pinball_loss, quantile_loss

__all__ = [
    "spearman_loss", "soft_spearman", "kendall_loss", "topk_loss", "ndcg_loss", "permutation_loss", "quantile_loss",
    "pinball_loss", "topk_cross_entropy",
]
