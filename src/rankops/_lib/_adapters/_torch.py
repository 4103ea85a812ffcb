"""PyTorch adapter: fused kernels, ``detach``, ``torch.Generator``, autograd."""

from __future__ import annotations

import numbers
from typing import Any

import torch

from .. import _loops
from ._generic import Generic

__all__ = ["Torch", "ADAPTER"]


class _Custom(torch.autograd.Function):
    """A forward with a hand-written backward, both written against the array API."""

    @staticmethod
    def forward(ctx: Any, spec: tuple[Any, ...], *arrays: Any) -> Any:
        xp, fwd, _, n_diff, _ = spec
        ctx.set_materialize_grads(False)  # unused outputs reach bwd as None, not zeros
        outs, res = fwd(xp, *arrays)
        ctx.spec = spec
        ctx.n_res = len(res)
        # the inputs are kept only to rebuild the residuals for a second derivative: the
        # scaled cost of a Sinkhorn solve is a whole plan's worth of memory the backward does not need
        ctx.save_for_backward(*res, *(arrays if spec[4] is not None else ()))
        ctx.mark_non_differentiable(*(o for o in outs[n_diff:] if isinstance(o, torch.Tensor)))
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *cts: Any) -> Any:
        xp, _, bwd, n_diff, residuals = ctx.spec
        saved = ctx.saved_tensors
        res, arrays = saved[: ctx.n_res], saved[ctx.n_res :]
        if torch.is_grad_enabled():  # create_graph=True
            if residuals is None:
                # the rule's own derivative is not implemented, and once_differentiable
                # would drop it silently under autograd.grad(inputs=...)
                raise RuntimeError(
                    "rankops: second derivatives are not supported through a hand-written backward pass: "
                    "use implicit=False (unrolled) for higher-order gradients of Sinkhorn operators"
                )
            # residuals rebuilt from the inputs under autograd: bwd is then differentiable
            res = residuals(xp, *arrays)
        return (None, *bwd(xp, res, cts[:n_diff]))


class Torch(Generic):
    name = "torch"
    autodiff = True
    # B = 20, float32, forward+backward of soft_rank(method="softsort"): the whole matrix takes
    # 0.67x / 0.63x the papers' code at n = 1000 / 2000, streamed rows 1.1x (benchmarks/permutations.py)
    dense_matrix_bytes = 512 * 2**20

    def softmax(self, xp: Any, z: Any, axis: int = -1) -> Any:
        return torch.softmax(z, dim=axis)

    def logsumexp(self, xp: Any, z: Any, axis: int = -1) -> Any:
        return torch.logsumexp(z, dim=axis)

    def stop_gradient(self, xp: Any, x: Any) -> Any:
        return x.detach()

    def cumlogsumexp(self, xp: Any, z: Any, *, reverse: bool = False) -> Any:
        if reverse:
            return torch.flip(torch.logcumsumexp(torch.flip(z, (-1,)), dim=-1), (-1,))
        return torch.logcumsumexp(z, dim=-1)

    def searchsorted(self, xp: Any, sorted_seq: Any, values: Any, *, side: str = "left") -> Any:
        return torch.searchsorted(sorted_seq.contiguous(), values.contiguous(), right=side == "right")

    def take(self, xp: Any, a: Any, index: Any) -> Any:
        # take_along_dim wraps negative indices (a remainder per call); these never are negative
        return torch.gather(a, -1, index)

    def invert_permutation(self, xp: Any, order: Any) -> Any:
        ranks = torch.arange(order.shape[-1], device=order.device).expand_as(order)
        return torch.empty_like(order).scatter_(-1, order, ranks)

    def segment_sum(self, xp: Any, starts: Any, g: Any) -> Any:
        # each segment summed in index order into its own slot: no cancellation between segments
        # (starts may broadcast against g: stacked sums share one scatter)
        ids = (torch.cumsum(starts, dim=-1) - 1).expand_as(g)
        return torch.zeros_like(g).scatter_add(-1, ids, g).gather(-1, ids)

    def segment_first(self, xp: Any, starts: Any, g: Any) -> Any:
        pos = torch.arange(g.shape[-1], device=g.device)
        first = torch.cummax(torch.where(starts, pos, torch.zeros_like(pos)), dim=-1).values
        return torch.gather(g, -1, first)

    def is_concrete(self, x: Any) -> bool:
        """False inside ``torch.compile`` and ``torch.func`` transforms, where reading a value is not allowed."""
        return not torch.compiler.is_compiling() and not torch._C._functorch.is_functorch_wrapped_tensor(x)

    def gumbel(self, xp: Any, key: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
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

    def iterate(self, xp: Any, step: Any, operands: Any, state: Any, **kwargs: Any) -> Any:
        """Eager loop; under autograd each round of ``check_every`` iterations is checkpointed.

        Checkpointing keeps only the potentials between rounds and recomputes
        a round's kernels during the backward pass, so memory grows with the
        number of rounds times O(n + m), not with iterations times O(n m).
        """
        if torch.compiler.is_compiling():
            # traced: no value to stop on, every round runs (settled rows frozen), and the
            # compiler plans the memory of the graph itself
            return _loops.iterate(xp, step, operands, state, early_exit=False, **kwargs)
        from torch.utils.checkpoint import checkpoint

        def checkpointed(run: Any, s: Any) -> Any:
            if torch.is_grad_enabled():
                return checkpoint(run, s, use_reentrant=False)
            return run(s)

        return _loops.iterate(xp, step, operands, state, wrap=checkpointed, **kwargs)

    def custom_vjp(self, xp: Any, fwd: Any, bwd: Any, arrays: tuple[Any, ...], n_diff: int, residuals: Any = None) -> tuple[Any, ...]:
        """Registered as a ``torch.autograd.Function``; without ``residuals`` a ``create_graph=True`` pass raises
        instead of silently returning a wrong second derivative."""
        return _Custom.apply((xp, fwd, bwd, n_diff, residuals), *arrays)

    def autodiff_vjp(self, f: Any, leaves: list[Any], outputs: Any) -> tuple[Any, tuple[Any, ...], Any]:
        """``rankops.vjp`` on torch: ``(value, outs, pull)`` with ``pull(cotangents) -> grads``.

        ``outputs(value)`` are the differentiable outputs; a None cotangent is a
        zero one. The graph is kept, so ``pull`` may be called again.
        """
        leaves = [leaf.detach().requires_grad_(True) for leaf in leaves]
        with torch.enable_grad():
            value = f(*leaves)
        outs = tuple(outputs(value))

        def pull(cts: tuple[Any, ...]) -> tuple[Any, ...]:
            pairs = [(o, c) for o, c in zip(outs, cts) if c is not None]
            grads = torch.autograd.grad(
                [o for o, _ in pairs], leaves, [c.to(o.dtype) for o, c in pairs], retain_graph=True, allow_unused=True
            )
            return tuple(torch.zeros_like(leaf) if g is None else g for leaf, g in zip(leaves, grads))

        if isinstance(value, tuple):  # a NamedTuple result: detach its tensors
            value = type(value)(*(v.detach() if isinstance(v, torch.Tensor) else v for v in value))
        else:
            value = value.detach()
        return value, outs, pull


ADAPTER = Torch()
