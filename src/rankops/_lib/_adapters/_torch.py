"""PyTorch adapter: fused kernels, ``detach`` and ``torch.Generator``."""

from __future__ import annotations

import numbers
from typing import Any

import torch


def softmax(xp: Any, z: Any, axis: int = -1) -> Any:
    return torch.softmax(z, dim=axis)


def logsumexp(xp: Any, z: Any, axis: int = -1) -> Any:
    return torch.logsumexp(z, dim=axis)


def stop_gradient(xp: Any, x: Any) -> Any:
    return x.detach()


def gumbel(xp: Any, key: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
    """Gumbel(0, 1) as ``-log(E)``, E ~ Exp(1), from the caller's generator.

    ``key``: None (torch's global generator, so ``torch.manual_seed`` applies),
    an int seed, or a ``torch.Generator`` on the array's device.
    """
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        key = torch.Generator(device=device).manual_seed(int(key))
    elif key is not None and not isinstance(key, torch.Generator):
        raise TypeError(f"key must be None, an int seed or a torch.Generator for torch arrays, got {type(key).__name__}")
    e = torch.empty(shape, dtype=dtype, device=device).exponential_(generator=key)
    return -torch.log(e)


def iterate(xp: Any, step: Any, operands: Any, state: Any, **kwargs: Any) -> Any:
    """Eager loop; under autograd each block is checkpointed.

    Checkpointing keeps only the potentials at block boundaries and recomputes
    a block's kernels during the backward pass, so memory grows with the
    number of blocks times O(n + m), not with iterations times O(n m).
    """
    from torch.utils.checkpoint import checkpoint

    from .._loops import iterate as _iterate

    def block(run: Any, s: Any) -> Any:
        if torch.is_grad_enabled():
            return checkpoint(run, s, use_reentrant=False)
        return run(s)

    return _iterate(xp, step, operands, state, block=block, **kwargs)
