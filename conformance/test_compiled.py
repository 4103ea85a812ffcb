"""Every operator under ``torch.compile(fullgraph=True)``: eager's values and gradients (the compiled-torch variant).

What ``jit`` is to the JAX checks, this is to torch: the primary variant of
every (operator, method) pair is compiled whole, forward and backward, on
each torch device, and must give the value and the gradient of <w, op(x)>
that eager torch gives (Sinkhorn solved to convergence, so that the row
that a compiled round freezes is the row eager freezes). Compiling takes
3-25 s per operator on this CPU: they run under ``-m compiled`` (.ci/run's
second step). The default run captures one, the Sinkhorn solver (its
``while_loop`` forward and its replayed backward), with the ``aot_eager``
backend: the same graph, without inductor's code generation (2 s, not 10).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose

from .inputs import SHAPE, well_separated
from .operators import CASES, converged

PRIMARY = [o for o in CASES if o.primary]
PARAMS = [pytest.param(o, "inductor", marks=pytest.mark.compiled, id=o.name) for o in PRIMARY] + [
    pytest.param(o, "aot_eager", id=f"{o.name}-aot_eager") for o in PRIMARY if o.name == "sinkhorn.plan"
]


def _value_and_grad(torch, f, x, w):
    x = x.clone().requires_grad_(True)
    y = f(x)
    (g,) = torch.autograd.grad((y * w).sum(), x)
    return y.detach().cpu().numpy(), g.cpu().numpy()


@pytest.mark.parametrize("op, compiler", PARAMS)
def test_compiled_matches_eager(torch_backend, device, op, compiler):
    import torch

    x = torch_backend.asarray(well_separated(SHAPE, seed=11) * 0.5, device=device)
    w = torch_backend.asarray(np.random.default_rng(3).normal(size=op.out_shape(SHAPE)), device=device)
    kw = converged(op)

    def f(v):
        return op(v, **kw)

    torch._dynamo.reset()
    with warnings.catch_warnings():
        # torch's own notes while it compiles (autograd.Function, deprecations inside inductor)
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        got = _value_and_grad(torch, torch.compile(f, fullgraph=True, backend=compiler), x, w)
    want = _value_and_grad(torch, f, x, w)
    assert_allclose(got[0], want[0], rtol=1e-10, atol=1e-12)
    assert_allclose(got[1], want[1], rtol=1e-8, atol=1e-10)
