"""PyTorch adapter: fused kernels, ``detach``, ``torch.Generator``, autograd."""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import importlib
import numbers
from typing import Any

import torch

from .. import _loops
from .._compat import cumulative_sum
from ._generic import PortableAdapter, precise_segment_sum
from ._torch_autograd import custom_function, every_mapped, in_transform, mapped, plain, searchable

__all__ = ["Torch", "ADAPTER"]


class Torch(PortableAdapter):
    name = "torch"
    autodiff = True
    # the whole SoftSort matrix up to this size: faster than streamed rows at n = 2000 (benchmarks/permutations.py)
    dense_matrix_bytes = 512 * 2**20

    def softmax(self, xp: Any, z: Any, axis: int = -1) -> Any:
        return torch.softmax(z, dim=axis)

    def logsumexp(self, xp: Any, z: Any, axis: int = -1) -> Any:
        return torch.logsumexp(z, dim=axis)

    def sign(self, xp: Any, x: Any) -> Any:
        # torch.sign maps NaN to 0; array-api-compat's fix writes through a boolean index, which vmap cannot map
        return torch.where(torch.isnan(x), x, torch.sign(x))

    def ndtr(self, xp: Any, u: Any) -> Any:
        # erfc: torch.special.ndtr in float32 on a CPU loses its lower tail to cancellation (Phi(-6) = 1e-9 is 0)
        return 0.5 * torch.special.erfc(u * -0.7071067811865476)

    def sigmoid(self, xp: Any, z: Any) -> Any:
        return torch.sigmoid(z)

    def log_sigmoid(self, xp: Any, z: Any) -> Any:
        return torch.nn.functional.logsigmoid(z)

    def stop_gradient(self, xp: Any, x: Any) -> Any:
        return x.detach()

    def cumlogsumexp(self, xp: Any, z: Any, *, reverse: bool = False) -> Any:
        return torch.flip(torch.logcumsumexp(torch.flip(z, (-1,)), dim=-1), (-1,)) if reverse else torch.logcumsumexp(z, dim=-1)

    def sum(self, xp: Any, a: Any, axis: int, *, keepdims: bool = False) -> Any:
        return torch.sum(a, dim=axis, keepdim=keepdims)  # a CPU accumulates float32 in double, a GPU in trees

    def cumulative_sum(self, xp: Any, z: Any, *, reverse: bool = False) -> Any:
        return torch.flip(cumulative_sum(xp, torch.flip(z, (-1,))), (-1,)) if reverse else cumulative_sum(xp, z)

    def linear_scan(self, xp: Any, a: Any, b: Any, *, reverse: bool = False, overwrite_b: bool = False) -> Any:
        """The doubling scan written in place into one buffer: per step one product, one add and the next
        step's links, and no concatenation (half the kernels of the portable form).

        ``a`` may come packed from :meth:`scan_links`, every step's link products already in it;
        ``overwrite_b``: ``b`` is the caller's own new array, and becomes the buffer.
        """
        if not torch.compiler.is_compiling() and not plain(a, b):  # recorded by autograd (a second derivative), torch.func
            return super().linear_scan(xp, a[..., : b.shape[-1] - 1], b, reverse=reverse)
        n, sizes = b.shape[-1], _link_sizes(b.shape[-1])
        packed = len(sizes) > 1 and a.shape[-1] == sum(sizes)
        if reverse:
            a = a[..., : n - 1]  # the plain links, reversed below
            return torch.flip(self.linear_scan(xp, torch.flip(a, (-1,)), torch.flip(b, (-1,))), (-1,))
        # compiled, a backward that asks for a layout is re-traced with every cotangent made contiguous, which
        # fails on the residual outputs' None cotangents (_torch_autograd.Custom): there, always the copy
        reuse = overwrite_b and not torch.compiler.is_compiling() and b.is_contiguous()
        h = b if reuse else b.clone(memory_format=torch.contiguous_format)
        at, link = 0, a
        for i, size in enumerate(sizes):
            d = 1 << i
            if packed:
                link, at = a[..., at : at + size], at + size
            # link[j]: the product of the links from entry j to j + d (the product is taken before the write;
            # add_ on the view, since `h[...] +=` would copy the view back over itself as well)
            h[..., d:].add_(link * h[..., :-d])
            if not packed and i + 1 < len(sizes):
                link = link[..., :-d] * link[..., d:]
        return h

    def scan_links(self, xp: Any, a: Any) -> Any:
        """Every doubling step's link products, packed along the last axis (``a`` itself, then the products
        over 2, 4, ... links): each later scan over them saves those products. Rows too long for the
        extra ``log2 n`` copies of ``a`` (:data:`_LINKS_KEPT`) stay as they are."""
        sizes = _link_sizes(a.shape[-1] + 1)
        # compiled code rebuilds them in fused kernels (and dynamo takes no strided out=)
        if len(sizes) < 2 or a.numel() // a.shape[-1] * sum(sizes) > _LINKS_KEPT or torch.compiler.is_compiling() or not plain(a):
            return a
        buf = a.new_empty(a.shape[:-1] + (sum(sizes),))
        prev, at = buf[..., : sizes[0]], sizes[0]
        prev.copy_(a)
        for i, size in enumerate(sizes[1:]):
            d = 1 << i
            nxt = buf[..., at : at + size]
            torch.mul(prev[..., :-d], prev[..., d:], out=nxt)
            prev, at = nxt, at + size
        return buf

    def searchsorted(self, xp: Any, sorted_seq: Any, values: Any, *, side: str = "left") -> Any:
        return torch.searchsorted(*searchable(sorted_seq, values), right=side == "right")

    def clip(self, xp: Any, x: Any, low: Any = None, high: Any = None) -> Any:
        return torch.clamp(x, low, high)  # one kernel, and a symbolic bound is not tested with math.isnan

    def take(self, xp: Any, a: Any, index: Any) -> Any:
        # take_along_dim wraps negative indices (a remainder per call); these never are negative
        return torch.gather(a, -1, index)

    def select(self, xp: Any, a: Any, index: Any, axis: int) -> Any:
        # array-api-compat's take wraps negative indices first (a comparison and a where per call)
        return torch.index_select(a, axis, index)

    def sort_order(self, xp: Any, x: Any, *, descending: bool = False) -> tuple[Any, Any]:
        # one kernel: the sort already holds the values the gather would fetch (the same bits)
        return tuple(torch.sort(x, dim=-1, descending=descending, stable=True))

    def invert_permutation(self, xp: Any, order: Any) -> Any:
        ranks = torch.arange(order.shape[-1], device=order.device).expand_as(order)
        # out of place: torch.func.vmap has a batching rule for scatter, none for scatter_
        return torch.empty_like(order).scatter(-1, order, ranks)

    def segment_sum(self, xp: Any, starts: Any, g: Any, *, precise: bool = False) -> Any:
        if precise:  # float64 where the device has it, else two levels
            return precise_segment_sum(self.segment_sum, xp, starts, g)
        # each segment summed in index order into its own slot, from 1 (slot 0 stays empty): no cancellation between them
        ids = torch.cumsum(starts, dim=-1).expand_as(g)  # starts may broadcast against g: stacked sums share one scatter
        return g.new_zeros(g.shape[:-1] + (g.shape[-1] + 1,)).scatter_add(-1, ids, g).gather(-1, ids)

    def segment_totals(self, xp: Any, starts: Any, group: Any, heads: Any, g: Any) -> Any:  # a slot per segment
        return g.new_zeros(g.shape[:-1] + (heads.shape[0],)).scatter_add(-1, group.expand_as(g), g)

    def segment_max(self, xp: Any, starts: Any, g: Any, ids: Any = None) -> Any:  # ids: the slots, if counted already
        ids = torch.cumsum(starts, dim=-1).expand_as(g) if ids is None else ids  # slots from 1, as segment_sum's
        return g.new_full(g.shape[:-1] + (g.shape[-1] + 1,), -torch.inf).scatter_reduce(-1, ids, g, "amax").gather(-1, ids)

    def segment_logsumexp(self, xp: Any, starts: Any, g: Any) -> Any:
        ids = torch.cumsum(starts, dim=-1).expand_as(g)
        top = self.segment_max(xp, starts, g, ids).nan_to_num(neginf=0.0)  # 0 for -inf only: its terms are exp(-inf) = 0
        total = g.new_zeros(g.shape[:-1] + (g.shape[-1] + 1,)).scatter_add(-1, ids, torch.exp(g - top))
        # the log of the entries' totals (at least 1, or 0 for -inf only), not of the slots: most slots are empty
        # (0), whose log is torch's slow path
        return torch.log(total.gather(-1, ids)) + top

    def segment_first(self, xp: Any, starts: Any, g: Any) -> Any:
        pos = torch.arange(g.shape[-1], device=g.device)
        first = torch.cummax(torch.where(starts, pos, torch.zeros_like(pos)), dim=-1).values
        return torch.gather(g, -1, first.expand_as(g))  # g may stack several rows of starts' shape

    def is_concrete(self, x: Any) -> bool:
        """False inside ``torch.compile`` and for arrays that ``torch.func.vmap`` maps. ``grad``, ``vjp`` and ``jvp``
        wrap tensors that can be read as in eager code: they take its routes."""
        return not torch.compiler.is_compiling() and not mapped(x)

    def gumbel(self, xp: Any, key: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
        """Gumbel(0, 1) as ``-log(E)``, E ~ Exp(1), from the caller's ``key``: None (torch's global generator, so
        ``torch.manual_seed`` applies), an int seed, or a ``torch.Generator`` on the array's device."""
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
        Small problems are not checkpointed: whatever the number of rounds,
        autograd then keeps at most a few ``_KEPT_WHOLE`` elements, and the
        checkpoint's per-tensor hooks cost more than the whole round (the
        same numbers either way: checkpointing recomputes the same operations).
        """
        if torch.compiler.is_compiling():
            if self.replays_loops((operands, state)):
                # autograd cannot follow a while_loop: a fixed schedule (settled rows frozen, the same
                # numbers); the Sinkhorn solver avoids this by replaying its loop (replays_loops)
                return _loops.iterate(xp, step, operands, state, early_exit=False, **kwargs)
            return _while_rounds(xp, step, operands, state, **kwargs)
        from torch.utils.checkpoint import checkpoint

        largest = max((t.numel() for t in _tensors(operands)), default=0)
        small = largest * -(-kwargs["max_iter"] // kwargs["check_every"]) <= _KEPT_WHOLE

        def checkpointed(run: Any, s: Any) -> Any:
            # torch.func's transforms take no saved-tensor hooks (which checkpointing is): their rounds are kept
            if torch.is_grad_enabled() and not small and not in_transform():
                return checkpoint(run, s, use_reentrant=False)
            return run(s)

        # under torch.func.vmap the stopping test is read under the map, as JAX's vmap of a while_loop reads it
        read = every_mapped if any(mapped(t) for t in _tensors((operands, state))) else None
        return _loops.iterate(xp, step, operands, state, wrap=checkpointed, all_settled=read, **kwargs)

    def repeat(self, xp: Any, body: Any, state: Any, count: Any, most: int, like: tuple[Any, ...] = (),
               differentiated: bool = True) -> Any:
        """Under ``torch.compile`` with no gradient through it: torch's ``while_loop``, its body traced once.

        ``count`` may be a 0-d tensor there (:func:`_while_rounds`); with a gradient (autograd cannot follow a
        ``while_loop``) such a count runs ``most`` steps, those from ``count`` on masked.
        """
        state = tuple(state)
        if not torch.compiler.is_compiling():
            return super().repeat(xp, body, state, count, most)
        if self.replays_loops((state, like)) or most <= 1:
            if not isinstance(count, torch.Tensor):
                return super().repeat(xp, body, state, count, most)
            for i in range(most):
                state = tuple(torch.where(count > i, new, old) for new, old in zip(body(state), state))
            return state
        return _counted_loop(lambda i, s: i < count, body, state)

    def repeat_while(self, xp: Any, going: Any, body: Any, state: Any, most: int) -> Any:
        """Under ``torch.compile`` with no gradient through it: one ``while_loop`` whose test is ``going`` (no
        ``torch.cond`` in its body, whose two branches would each be a subgraph of their own kernels)."""
        state = tuple(state)
        if not torch.compiler.is_compiling() or self.replays_loops(state) or most <= 1:
            return super().repeat_while(xp, going, body, state, most)
        return _counted_loop(lambda i, s: (i < most) & going(s), body, state)

    def scan_blocks(self, xp: Any, body: Any, carry: Any, xs: tuple[Any, ...], block: int, *, looped: bool = False) -> Any:
        """``looped`` under ``torch.compile``: torch's ``scan`` higher-order op over the whole blocks, then the remainder.

        The body is traced once, not once per block: a sorting network's
        hundreds of layers are one loop in the graph (its compile time does not
        grow with them). Only forward graphs ask for it: inductor miscompiles
        a loop op inside a backward graph (see :meth:`eagerly`'s op, which runs
        such loops). Eager torch runs the portable loop.
        """
        whole, rest = xs[0].shape[-1] // block, xs[0].shape[-1] % block  # not divmod: dynamo refuses it on a symbolic n
        if not (looped and torch.compiler.is_compiling()) or whole < _SCANNED_FROM or not _tensors(carry):
            return super().scan_blocks(xp, body, carry, xs, block)
        from torch._higher_order_ops import scan

        def split(x: Any) -> Any:
            return torch.movedim(x[..., : whole * block].unflatten(-1, (whole, block)), -2, 0)

        def step(c: Any, cols: Any) -> Any:
            # scan's body may not return (views of) its inputs
            out, ys = body(c, tuple(cols))
            # a scan with no stacked output does not lower in inductor's backward graphs: one of a zero
            return _fresh(out), _fresh(ys) if ys else (cols[0][..., :0].clone(),)

        carry, ys = scan(step, _fresh(carry), tuple(split(x) for x in xs))
        parts = [tuple(torch.movedim(y, 0, -2).flatten(-2) for y in ys if y.shape[-1])]  # without the empty one
        if rest:
            carry, tail = body(carry, tuple(x[..., whole * block :] for x in xs))
            parts.append(tail)
        return carry, tuple(p[0] if len(p) == 1 else torch.cat(p, dim=-1) for p in zip(*parts))

    def unless(self, xp: Any, skip: Any, fn: Any, operand: Any, in_loop: bool = False) -> Any:
        """``torch.cond`` under ``torch.compile`` (no gradient through it), so compiled code skips the work too; not in
        a loop's body (``in_loop``: torch 2.13 rejects a ``cond`` in a ``while_loop``'s body as aliasing its input)."""
        if torch.compiler.is_compiling() and not in_loop and not self.replays_loops(operand):
            # Each branch returns a new array (a branch may not return its input) with the strides of a new dense one:
            # cond merges the branches' strides, and a slice of a longer row counts as contiguous with a stride of its own.
            def dense(t: Any) -> Any:
                return t.clone(memory_format=torch.contiguous_format)

            if isinstance(operand, tuple):  # a tuple of arrays (the Newton polish's state): its arrays are the operands
                return tuple(torch.cond(skip, lambda *o: tuple(map(dense, o)), lambda *o: tuple(map(dense, fn(o))), operand))
            return torch.cond(skip, dense, lambda o: dense(fn(o)), (operand,))
        return super().unless(xp, skip, fn, operand)

    def eagerly(self, xp: Any, fn: Any, arrays: tuple[Any, ...], *, like: tuple[int, ...], **params: Any) -> tuple[Any, ...]:
        """Under ``torch.compile``: one node of the graph, the op ``rankops::eager``, which runs ``fn`` when the graph runs."""
        if not torch.compiler.is_compiling():
            return super().eagerly(xp, fn, arrays, like=like, **params)
        return tuple(torch.ops.rankops.eager(f"{fn.__module__}:{fn.__name__}", repr(params), list(arrays), list(like)))

    def reads_in_eager_node(self, x: Any) -> bool:
        """Also under ``torch.compile``, whose ``rankops::eager`` node runs the function on real tensors."""
        return torch.compiler.is_compiling() or self.is_concrete(x)

    def replays_loops(self, arrays: Any) -> bool:
        return torch.compiler.is_compiling() and torch.is_grad_enabled() and any(t.requires_grad for t in _tensors(arrays))

    def custom_vjp(
        self, xp: Any, fwd: Any, bwd: Any, arrays: tuple[Any, ...], n_diff: int, residuals: Any = None, linear: Any = True
    ) -> tuple[Any, ...]:
        """Registered as a ``torch.autograd.Function``; without ``residuals`` a ``create_graph=True`` pass raises
        instead of silently returning a wrong second derivative. Where no gradient is wanted (no input requires
        one, or grad mode is off) the forward runs alone: nothing to save, and ``torch.compile`` of an
        inference call with several array inputs does not go through ``autograd.Function`` at all (dynamo's
        trace of one failed to unpack the arguments)."""
        tensors = [a for a in arrays if isinstance(a, torch.Tensor)]
        # torch.func's vmap maps the Function (its rule runs the forward per slice), never the forward itself
        if not any(mapped(a) for a in tensors) and (not torch.is_grad_enabled() or not any(a.requires_grad for a in tensors)):
            return tuple(fwd(xp, *arrays)[0])
        applied = custom_function().apply((xp, fwd, bwd, n_diff, residuals), *arrays)
        return tuple(applied[: applied[-1][0]])  # the outputs, without the residuals and their template

    def autodiff_vjp(self, f: Any, leaves: list[Any], outputs: Any) -> tuple[Any, tuple[Any, ...], Any]:
        """``rankops.vjp`` on torch: ``(value, outs, pull)`` with ``pull(cotangents) -> grads``.

        ``outputs(value)`` are the differentiable outputs; a None cotangent is a
        zero one. The graph is kept, so ``pull`` may be called again.
        """
        leaves = [leaf.detach().requires_grad_(True) for leaf in leaves]
        value = _with_autograd(f, *leaves)
        outs = tuple(outputs(value))

        def pull(cts: tuple[Any, ...]) -> tuple[Any, ...]:
            pairs = [(o, c) for o, c in zip(outs, cts) if c is not None]
            grads = _with_autograd(
                torch.autograd.grad,
                [o for o, _ in pairs], leaves, [c.to(o.dtype) for o, c in pairs], retain_graph=True, allow_unused=True,
            )
            return tuple(torch.zeros_like(leaf) if g is None else g for leaf, g in zip(leaves, grads))

        if isinstance(value, tuple):  # a tuple or NamedTuple result: detach its tensors
            parts = [v.detach() if isinstance(v, torch.Tensor) else v for v in value]
            value = type(value)(*parts) if hasattr(value, "_fields") else tuple(parts)
        else:
            value = value.detach()
        return value, outs, pull


def _link_sizes(n: int) -> list[int]:
    """The doubling scan's steps over a row of ``n``: step i links entries 2^i apart, ``n - 2^i`` link products."""
    return [n - (1 << i) for i in range((n - 1).bit_length())]


# elements up to which Torch.scan_links keeps every doubling step's link products (16 MiB in float32): a
# scan's own link products cost one kernel per step, and memory only while that scan runs
_LINKS_KEPT = 2**22

# elements of the largest operand (a transport's scaled cost) times the rounds of a loop up to which
# its rounds are not checkpointed: autograd keeps a few arrays of that size per round, 8 MiB each in float64
_KEPT_WHOLE = 2**20
# blocks from which a compiled scan_blocks is one scan op: fewer are traced one by one (inductor fuses them)
_SCANNED_FROM = 4


def _with_autograd(f: Any, *args: Any, **kwargs: Any) -> Any:
    """``f(*args, **kwargs)`` recorded by autograd, also inside a custom op (``rankops::eager``), where the dispatcher excludes autograd.

    That exclusion is thread-local, so there ``f`` runs on a new thread (on
    the caller's CUDA stream, if any): public API only.
    """
    with torch.enable_grad():
        if (torch.ones((), requires_grad=True) * 2).requires_grad:  # autograd records here
            return f(*args, **kwargs)
    stream = torch.cuda.current_stream() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    box: list[Any] = []

    def work() -> None:
        with torch.enable_grad(), (torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()):
            box.append(f(*args, **kwargs))

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(work).result()
    return box[0]


@torch.library.custom_op("rankops::eager", mutates_args=())
def _eager(fn: str, params: str, arrays: list[torch.Tensor], like: list[int]) -> list[torch.Tensor]:
    """:meth:`Torch.eagerly`'s op: ``fn`` named ``module:name`` and its literal ``params`` by ``repr``.

    Named rather than held, so that a compiled graph holds no Python object and
    this op no table of callables: the function is looked up when the op runs.
    """
    import array_api_compat.torch as xp

    module, _, name = fn.partition(":")
    outs = getattr(importlib.import_module(module), name)(xp, *arrays, **ast.literal_eval(params))
    for o, i in zip(outs, like):
        if o.shape != arrays[i].shape or o.dtype != arrays[i].dtype:
            raise AssertionError(f"rankops: {fn} returned {o.dtype}{tuple(o.shape)}, not {arrays[i].dtype}{tuple(arrays[i].shape)}")
    # an op's outputs are new, dense arrays (what the fake below promises the compiler)
    return [o.clone(memory_format=torch.contiguous_format) if o._base is not None or any(o is a for a in arrays) else o.contiguous() for o in outs]


@_eager.register_fake
def _eager_fake(fn: str, params: str, arrays: list[torch.Tensor], like: list[int]) -> list[torch.Tensor]:
    return [arrays[i].new_empty(arrays[i].shape) for i in like]


def _fresh(tree: Any) -> Any:
    """``tree`` with each tensor copied to a dense one: a loop body's outputs may not alias its inputs, and a
    scan's carry keeps its strides (a broadcast one has zeros)."""
    return torch.utils._pytree.tree_map(lambda t: t.clone(memory_format=torch.contiguous_format) if isinstance(t, torch.Tensor) else t, tree)


def _tensors(tree: Any) -> list[Any]:
    return [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _counted_loop(test: Any, body: Any, state: tuple[Any, ...]) -> tuple[Any, ...]:
    """torch's ``while_loop`` of ``body`` over ``state`` while ``test(i, state)`` holds, ``i`` the steps taken (a 0-d
    tensor): the body traced once."""
    from torch._higher_order_ops import while_loop

    def step(i: Any, *s: Any) -> Any:
        return (i + 1, *_distinct(list(body(s)), s))

    start = torch.zeros((), dtype=torch.int64, device=state[0].device)
    return tuple(while_loop(lambda i, *s: test(i, s), step, (start, *_fresh(state)))[1:])


def _distinct(arrays: list[Any], taken: Any) -> list[Any]:
    """``arrays`` with copies for those that are views or repeat one another or ``taken``: a ``while_loop``'s carries may not alias."""
    out: list[Any] = []
    for a in arrays:
        out.append(a.clone() if a._base is not None or any(a is t for t in (*taken, *out)) else a)
    return out


def _while_rounds(
    xp: Any, step: Any, operands: Any, state: Any, *, error: Any, freeze: Any, max_iter: int, tol: float, check_every: int,
    whole_rounds: bool = False,
) -> Any:
    """:func:`rankops._lib._loops.iterate` as torch's ``while_loop``, for compiled code that no gradient flows through.

    The same rounds, frozen rows and stopping test as the eager loop, so the
    same numbers; the test is read once per round, as eagerly. ``n_iter`` is a
    0-d tensor. (The JAX adapter's loop is the same one.)
    """
    from torch._higher_order_ops import while_loop

    n_rounds = _loops.round_count(max_iter, check_every)
    flat, spec = torch.utils._pytree.tree_flatten(state)

    def cond(k: Any, err: Any, *leaves: Any) -> Any:
        return (k < n_rounds) & ~torch.all(_loops.settled(xp, err, tol))

    def body(k: Any, err: Any, *leaves: Any) -> Any:
        s = torch.utils._pytree.tree_unflatten(list(leaves), spec)
        new = _loops.run_round(xp, step, operands, s, k, _loops.settled(xp, err, tol), freeze=freeze, max_iter=max_iter,
                               check_every=check_every, whole_rounds=whole_rounds)
        # no carry may come back as an input or as a view of another (the error often is one)
        return (k + 1, *_distinct([error(operands, new), *torch.utils._pytree.tree_leaves(new)], leaves))

    err0 = torch.full_like(error(operands, state), torch.inf)  # nothing settled before the first round
    # the loop's own copies of the state: carries may not alias one another or the caller's arrays
    k, err, *leaves = while_loop(cond, body, (torch.zeros((), dtype=torch.int64, device=err0.device), err0, *(t.clone() for t in flat)))
    return torch.utils._pytree.tree_unflatten(leaves, spec), torch.clamp(k * check_every, max=max_iter), err


ADAPTER = Torch()
