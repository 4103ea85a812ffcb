"""The public API as a type checker sees it: checked by mypy in .ci/run (``mypy tests/typed_usage.py``), never run.

Operators return their value's type (``Array``, the caller's array, or a
``SinkhornResult``), not the ``Call`` their binding builds; signatures are
the binding's, so a wrong argument type is an error (each ``type: ignore``
below must be needed: ``warn_unused_ignores``).
"""

from __future__ import annotations

from typing import Any, Callable, assert_type

import numpy as np

import rankops
import rankops.losses

x = np.zeros((2, 5))
cost = np.zeros((2, 3, 3))

assert_type(rankops.soft_rank(x, epsilon=0.1), Any)
assert_type(rankops.soft_sort(x, method="softsort", tau=0.5), Any)
assert_type(rankops.soft_cdf(x), Any)
assert_type(rankops.soft_quantile(x, 0.5), Any)
assert_type(rankops.soft_quantile_normalize(x, np.arange(5.0)), Any)
assert_type(rankops.soft_quantize(x, 2), Any)
assert_type(rankops.soft_topk_mask(x, 2), Any)
assert_type(rankops.soft_topk_magnitude(x, 2, strength=0.2), Any)
assert_type(rankops.sort_with(x[..., None], x), Any)
assert_type(rankops.softsort(x), Any)
assert_type(rankops.neuralsort(x), Any)
assert_type(rankops.diffsort(x, network="bitonic"), Any)
assert_type(rankops.isotonic_regression(x), Any)
assert_type(rankops.soft_kendall_tau(x, x), Any)

result = rankops.sinkhorn(cost, epsilon=0.1)
assert_type(result, rankops.SinkhornResult)
assert_type(result.plan, Any)

value, vjp_fn = rankops.vjp(rankops.soft_rank, x)
assert_type(vjp_fn, Callable[[Any], tuple[Any, ...]])

loss = rankops.losses.spearman_loss(x, x)
ranked = rankops.losses.lambda_loss(x, x, weighing_scheme="ndcgLoss2PP", k=10)
quality = rankops.metrics.ndcg(x, x, 5)

# the signatures reach the type checker
rankops.soft_rank(x, axis="last")  # type: ignore[arg-type]
rankops.soft_quantize(x, 2.5)  # type: ignore[arg-type]
rankops.sinkhorn(cost, epsilon=0.1, max_iter="many")  # type: ignore[arg-type]
