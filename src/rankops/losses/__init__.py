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

Learning to rank, on lists with padding masks (options and defaults as allRank names them; docs/ranking.md):

=======================  =============================================================  ==================
loss                     value per list                                                 methods
=======================  =============================================================  ==================
``listnet_loss``         ``-sum softmax(t) log(softmax(s) + eps)`` (Cao et al. 2007)     (none)
``binary_listnet_loss``  ``-sum (t / sum t) log(softmax(s) + eps)``                      (none)
``listmle_loss``         the Plackett-Luce negative log-likelihood (Xia et al. 2008)    (none)
``ranknet_loss``         mean logistic loss of the ordered pairs (Burges et al. 2005)    (none)
``lambda_loss``          LambdaLoss with allRank's weighing schemes (Wang et al. 2018)   (none)
``approx_ndcg_loss``     ``-NDCG`` with approximate ranks (Qin et al. 2010)             sigmoid, every soft_rank one
``neural_ndcg_loss``     ``-NDCG@k`` with a Sinkhorn-scaled relaxed sort (Pobrotyn 2021)  neuralsort, softsort, sinkhorn, diffsort
``smooth_ap_loss``       ``1 - AP`` with sigmoid ranks (Brown et al. 2020)               (none)
=======================  =============================================================  ==================
"""

from __future__ import annotations

from ._common import DEFAULT_METHOD, rankdata  # noqa: F401  (re-exported: the examples and tests use them)
from .correlation import kendall_loss, soft_spearman, spearman_loss
from .ranking import MATRIX_METHODS, ndcg_loss, permutation_loss, topk_loss  # noqa: F401
from .classification import TOPK_METHODS, topk_cross_entropy  # noqa: F401
from .regression import pinball_loss, quantile_loss
from .listwise import approx_ndcg_loss, binary_listnet_loss, listmle_loss, listnet_loss, smooth_ap_loss
from .pairwise import WEIGHING_SCHEMES, lambda_loss, ranknet_loss  # noqa: F401
from .neural_ndcg import neural_ndcg_loss

__all__ = [
    "spearman_loss", "soft_spearman", "kendall_loss", "topk_loss", "ndcg_loss", "permutation_loss", "quantile_loss",
    "pinball_loss", "topk_cross_entropy", "listnet_loss", "binary_listnet_loss", "listmle_loss", "ranknet_loss", "lambda_loss",
    "approx_ndcg_loss", "neural_ndcg_loss", "smooth_ap_loss",
]
