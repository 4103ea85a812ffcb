"""Empty batches: a ``(0, n)`` or ``(2, 0, n)`` input (a data loader's last batch, a filtered batch) on every host.

Every operator returns an empty output of the right shape, dtype, namespace
and device, and its gradient (``rankops.vjp``: the host's autodiff on torch
and JAX, rankops' own rules elsewhere) is an empty array shaped like the
input. JAX, which compiles per shape, is checked under ``jit`` in reverse
and forward mode (``grad``, ``jacfwd``) on one shape: an empty tangent must
not reach a reshape to a scalar.
"""

from __future__ import annotations

import array_api_compat
import numpy as np
import pytest

from .inputs import SHAPE

BATCHES = [(0,), (2, 0)]


def _empty(batch: tuple[int, ...]) -> np.ndarray:
    return np.zeros(batch + SHAPE[-1:])


def _same_place(a, like, shape):
    assert array_api_compat.array_namespace(a) is array_api_compat.array_namespace(like)
    assert array_api_compat.device(a) == array_api_compat.device(like)
    assert a.dtype == like.dtype
    assert tuple(a.shape) == tuple(shape)


@pytest.mark.parametrize("batch", BATCHES, ids=lambda b: "x".join(map(str, b)))
def test_empty_batch_value_and_gradient(eager_backend, device, op, batch):
    backend = eager_backend
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
    assert tuple(jax.jit(op)(x).shape) == out_shape
    assert tuple(jax.jit(jax.jacfwd(op))(x).shape) == out_shape + tuple(x.shape)
    assert tuple(jax.jit(jax.grad(lambda v: jax.numpy.sum(op(v))))(x).shape) == tuple(x.shape)
