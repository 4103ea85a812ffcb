"""Gradients by torch.autograd directly, the reference for tests/test_implicit.py and tests/test_vjp.py."""

from __future__ import annotations

import numpy as np
import torch

import rankops


def torch_gradients(fn, x, args, options, seed):
    """``(value, grads)`` of ``fn(x, *args, **options)`` on float64 torch tensors.

    Every NumPy array among ``x``, ``args`` and ``options`` becomes a leaf;
    ``grads`` are the gradients of ``<ct, value>`` (for ``sinkhorn``, of the
    plan) with ``ct`` standard normal from ``seed``, in call order, as NumPy.
    """
    leaves = []

    def leaf(value):
        if not isinstance(value, np.ndarray):
            return value
        leaves.append(torch.asarray(value).requires_grad_(True))
        return leaves[-1]

    x = leaf(x)
    args = [leaf(a) for a in args]
    options = {k: leaf(v) for k, v in options.items()}
    out = fn(x, *args, **options)
    out = out.plan if fn is rankops.sinkhorn else out
    ct = torch.asarray(np.random.default_rng(seed).normal(size=tuple(out.shape)))
    return out.detach().numpy(), [g.numpy() for g in torch.autograd.grad(out, leaves, ct)]
