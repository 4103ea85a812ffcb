"""torch.compile(fullgraph=True): the operators captured whole, forward and backward, with eager's values (issue 31).

Namespace detection, option parsing, the call's layout and the cores trace
without a graph break; the data-dependent loops of the cores (isotonic
regression's pooling rounds) run a fixed schedule under compile, settled
rows frozen, so the numbers are eager's. The Sinkhorn operators are not
here yet: their stopping rule unrolls ``max_iter`` iterations when traced
(docs/gpu.md is to track it). One case runs by default; the rest, a minute
of compilation, under ``-m compiled`` (.ci/run's second step).
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import rankops  # noqa: E402

CASES = {
    "soft_rank[lapsum]": lambda x: rankops.soft_rank(x, method="lapsum"),
    "soft_rank[permutahedron]": lambda x: rankops.soft_rank(x, method="permutahedron"),
    "soft_sort[permutahedron]": lambda x: rankops.soft_sort(x, method="permutahedron", descending=True),
    "soft_sort[lapsum]": lambda x: rankops.soft_sort(x, method="lapsum"),
    "soft_topk_mask[lapsum]": lambda x: rankops.soft_topk_mask(x, 3.5, method="lapsum"),
    "soft_rank[softsort]": lambda x: rankops.soft_rank(x, method="softsort"),
    "soft_rank[neuralsort]": lambda x: rankops.soft_rank(x, method="neuralsort"),
    "softsort": lambda x: rankops.softsort(x, tau=0.5),
    "neuralsort": lambda x: rankops.neuralsort(x, tau=0.5),
    "isotonic_regression": lambda x: rankops.isotonic_regression(x),
    "soft_kendall_tau": lambda x: rankops.soft_kendall_tau(x, torch.flip(x, (-1,)), tau=0.3),
    "losses.spearman_loss": lambda x: rankops.losses.spearman_loss(x, torch.flip(x, (-1,)), method="permutahedron"),
}
DEFAULT_RUN = {"soft_rank[lapsum]"}


def _value_and_grad(f, x0):
    x = x0.clone().requires_grad_()
    y = f(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), g


@pytest.mark.parametrize(
    "name", [n if n in DEFAULT_RUN else pytest.param(n, marks=pytest.mark.compiled) for n in CASES]
)
def test_compiles_whole_with_eager_values_and_gradients(name):
    f = CASES[name]
    # ties and a sorted stretch: the pooling rounds have work to do
    x0 = torch.tensor([[0.3, -1.2, 2.5, 0.7, 0.7, 1.9], [3.0, 2.0, 1.0, 0.0, -1.0, 0.5]], dtype=torch.float64)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        # torch's own notes while it compiles (autograd.Function, torch.jit deprecations in inductor's imports)
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        compiled = _value_and_grad(torch.compile(f, fullgraph=True), x0)
    eager = _value_and_grad(f, x0)
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-10, atol=1e-12)
