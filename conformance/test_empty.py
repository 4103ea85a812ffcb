"""Empty batches: a ``(0, n)`` or ``(2, 0, n)`` input (a data loader's last batch, a filtered batch) on every backend.

Every operator returns an empty output of the right shape, dtype, namespace
and device, and its gradient (``rankops.vjp``: the backend's autodiff on torch
and JAX, rankops' own rules elsewhere) is an empty array shaped like the
input; neither warns (a reduction over no entries: torch's ``std`` of a
``(0, n)`` batch warned of its degrees of freedom). JAX, which compiles per
shape, is checked under ``jit`` in reverse and forward mode (``grad``,
``jacfwd``) on one shape: an empty tangent must not reach a reshape to a
scalar.
"""

from __future__ import annotations

import array_api_compat
import numpy as np
import pytest

from .inputs import SHAPE
from .operators import CASES
from .test_softness import CASES as DEFAULTS

BATCHES = [(0,), (2, 0)]


def _empty(batch: tuple[int, ...]) -> np.ndarray:
    return np.zeros(batch + SHAPE[-1:])


def _same_place(a, like, shape):
    assert array_api_compat.array_namespace(a) is array_api_compat.array_namespace(like)
    assert array_api_compat.device(a) == array_api_compat.device(like)
    assert a.dtype == like.dtype
    assert tuple(a.shape) == tuple(shape)


# the option variants (descending, block sizes, ...) take the same code paths on an empty batch: theirs are exhaustive
EVERY = [pytest.param(o, marks=() if o.primary else pytest.mark.exhaustive) for o in CASES]


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("op", EVERY, ids=lambda o: o.name)
def test_empty_batch_value_and_gradient(eager_backend, device, op):
    backend = eager_backend
    for batch in BATCHES:
        x = _empty(batch)
        xb = backend.asarray(x, device=device)
        value = op(xb)
        _same_place(value, xb, op.out_shape(x.shape))
        value, vjp_fn = op.vjp(xb, **op.kwargs)
        _same_place(value, xb, op.out_shape(x.shape))
        g = vjp_fn(backend.asarray(np.zeros(op.out_shape(x.shape)), device=device))[0]
        _same_place(g, xb, x.shape)


def test_empty_batch_under_jit_and_forward_mode(jax_backend, op):
    import jax

    x = jax_backend.asarray(_empty((2, 0)))
    out_shape = op.out_shape(tuple(x.shape))

    def every(v):  # one program: the value, reverse mode and forward mode
        return op(v), jax.grad(lambda u: jax.numpy.sum(op(u)))(v), jax.jacfwd(op)(v)

    value, grad, jacobian = jax.jit(every)(x)
    assert tuple(value.shape) == out_shape
    assert tuple(grad.shape) == tuple(x.shape)
    assert tuple(jacobian.shape) == out_shape + tuple(x.shape)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_empty_batch_at_the_default_softness(eager_backend, device, name):
    """The defaults set each row's temperature from its own scale and length (``softness``): on an empty batch there
    is no row, and no reduction over none may warn (torch's ``std`` did, for the permutahedron's soft sort)."""
    call, _ = DEFAULTS[name]
    for batch in BATCHES:
        x = _empty(batch)
        xb = eager_backend.asarray(x, device=device)
        value = call(xb)
        assert array_api_compat.array_namespace(value) is array_api_compat.array_namespace(xb)
        assert tuple(value.shape[:len(batch)]) == batch  # a row's value, or its matrix (n, n), or one quantile
