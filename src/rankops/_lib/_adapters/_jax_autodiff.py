"""JAX autodiff rules: hand-written backwards as ``custom_jvp`` rules (forward and reverse mode), and the solver loop's."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from .._loops import round_count, run_round, settled

__all__ = ["transposed", "with_forward_rule", "custom_transposed", "iterate", "varying"]


def varying(carry: Any, *like: Any) -> Any:
    """A loop's initial ``carry`` made to vary over every manual mesh axis that a leaf of it or of ``like`` varies
    over: under ``jax.shard_map`` (its default ``check_vma``) a carry built from constants is invariant while the
    body's outputs, computed from the sharded input, vary, and the loop would refuse the mismatch."""
    leaves = jax.tree_util.tree_leaves((carry, like))
    axes = frozenset().union(*(_varies_over(a) for a in leaves if hasattr(a, "dtype")))
    return jax.tree_util.tree_map(lambda a: _varying_over(a, axes), carry) if axes else carry


def _varying_as(a: Any, like: Any) -> Any:
    """``a`` made to vary over the manual mesh axes ``like`` varies over (a tangent or cotangent must match its primal)."""
    return _varying_over(a, _varies_over(like))


def _varying_over(a: Any, axes: frozenset[str]) -> Any:
    """``a`` made to vary over ``axes`` too (``lax.pcast`` of the axes it does not vary over yet)."""
    missing = tuple(sorted(axes - _varies_over(a)))
    return jax.lax.pcast(a, missing, to="varying") if missing else a


def _varies_over(a: Any) -> frozenset[str]:
    """The manual mesh axes ``a`` varies over (none outside ``shard_map``): the aval's ``mat`` or ``manual_axis_type``
    (jax >= 0.10), else its ``vma``; ``a`` may be an array or the ``ShapeDtypeStruct`` of one."""
    aval = a if isinstance(a, jax.ShapeDtypeStruct) else jax.typeof(a)
    manual = getattr(aval, "mat", None) or getattr(aval, "manual_axis_type", None)
    return frozenset(manual.varying) if manual is not None else frozenset(getattr(aval, "vma", ()))


def _floating(a: Any) -> bool:
    """Whether ``a`` has tangents: a mask or integer labels have none."""
    return bool(jnp.issubdtype(jnp.result_type(a), jnp.floating))


def _live(a: Any, t: Any) -> Any:
    """The tangent ``t`` of the input ``a``, or None where it has none (a symbolic zero, an input that is not floating)."""
    return None if isinstance(t, SymbolicZero) or not _floating(a) else t


def transposed(xp: Any, fwd: Any, bwd: Any, arrays: tuple[Any, ...]) -> tuple[Any, ...]:
    """``fwd`` as a ``jax.custom_jvp``: the output tangent is the transpose of ``v -> bwd(v)`` applied to the input tangents.

    ``bwd`` is linear in the cotangent, ``v -> J^T v``; its transpose is ``J``.
    Inputs that are not real floating (a mask, integer labels) have no
    tangent, and ``bwd``'s gradient for them (None) is left out.
    """
    differentiable = tuple(_floating(a) for a in arrays)

    @jax.custom_jvp
    def fn(*args: Any) -> Any:
        return tuple(fwd(xp, *args)[0])

    @fn.defjvp
    def fn_jvp(primals: Any, tangents: Any) -> Any:
        outs, res = fwd(xp, *primals)
        outs = tuple(outs)

        def pullback(ct: Any) -> Any:
            grads = bwd(xp, res, (ct,))
            return tuple(g for g, d in zip(grads, differentiable) if d)

        (out_tangent,) = jax.linear_transpose(pullback, outs[0])(tuple(t for t, d in zip(tangents, differentiable) if d))
        return outs, (out_tangent, *(_zero_out_tangent(o) for o in outs[1:]))

    return fn(*arrays)


def zero_tangent(a: Any) -> Any:
    """The zero tangent of ``a``: ``float0`` for an integer array."""
    return jnp.zeros_like(a) if jnp.issubdtype(a.dtype, jnp.inexact) else np.zeros(a.shape, jax.dtypes.float0)


def _zero_out_tangent(a: Any) -> Any:
    """The zero tangent a rule returns for its output ``a``: symbolic for an integer or bool output, whose ``float0``
    tangent must also carry the mesh axes ``a`` varies over under ``shard_map``, which a NumPy ``float0`` cannot."""
    return jnp.zeros_like(a) if _floating(a) else SymbolicZero(jax.typeof(a).strip_weak_type().to_tangent_aval())


def _plus(a: Any, b: Any) -> Any:
    """The sum of two cotangents of one leaf; a bool or integer leaf has none (``float0``), whatever it was given."""
    if _floating(a) and _floating(b):
        return a + b
    return np.zeros(jnp.shape(a), jax.dtypes.float0)


@jax.custom_jvp
def first_order(*arrays: Any) -> Any:
    """The identity, whose derivative raises: it carries the residuals of a backward that is not differentiable itself."""
    return arrays


@first_order.defjvp
def first_order_jvp(primals: Any, tangents: Any) -> Any:
    raise TypeError(
        "second derivatives through a Sinkhorn solve (method='sinkhorn', implicit or unrolled) are not implemented on JAX: "
        "differentiate once (jax.grad, jax.jacrev, jax.jacfwd), or use another method (every other method has "
        "jax.hessian); torch differentiates implicit=False twice"
    )


def custom_transposed(forward: Any, backward: Any, tangents: tuple[Any, ...], outs: tuple[Any, ...]) -> tuple[Any, ...]:
    """The output tangents ``forward(tangents)`` of a linear map whose transpose is ``backward``; JAX sees into neither.

    ``tangents``: one per input, None where there is none (a symbolic zero, an
    integer input); ``forward`` gets them with zeros in place of the Nones and
    returns one tangent per array of ``outs``; ``backward(cotangents)``
    returns one per input (None: zero). JAX has no public custom-transpose
    rule that also batches, so the pair rides on ``lax.custom_linear_solve``:
    on the space of (input tangents, output tangents) the "solve" maps
    ``(t, 0)`` to ``(0, forward(t))`` and its transpose maps ``(0, c)`` to
    ``(backward(c), 0)``; ``(t, 0)`` is linear in ``t`` (its zeros are
    selected from ``t``, as linearization requires of every part of the
    right-hand side). Under ``jvp`` JAX runs ``forward``, under ``grad`` it
    transposes the solve into ``backward``, under ``vmap`` it batches both.
    """
    live = [i for i, t in enumerate(tangents) if t is not None]
    if not live:
        return tuple(jnp.zeros_like(o) for o in outs)
    # a zero selected from a tangent (so linear in it), summed: a 0-d zero also when the tangent is empty
    first = jnp.reshape(tangents[live[0]], (-1,))[:1]
    zero = jnp.sum(jnp.where(jnp.zeros(first.shape, bool), first, jnp.zeros_like(first)))
    zeros = tuple(jnp.broadcast_to(jnp.astype(zero, o.dtype), o.shape) for o in outs)
    shapes = [t for t in tangents if t is not None]  # their shapes, dtypes and (under shard_map) varying axes

    def cast(values: Any, like: Any) -> tuple[Any, ...]:
        return tuple(
            _varying_as(jnp.zeros(w.shape, w.dtype) if v is None else jnp.broadcast_to(jnp.astype(v, w.dtype), w.shape), w)
            for v, w in zip(values, like)
        )

    def solve(_: Any, b: Any) -> Any:
        t, _o = b
        full = [None] * len(tangents)
        for i, ti in zip(live, t):
            full[i] = ti
        return tuple(jnp.zeros_like(ti) for ti in t), cast(forward(full), zeros)

    def solve_t(_: Any, c: Any) -> Any:
        _t, ct = c
        grads = backward(ct)
        return cast([grads[i] for i in live], shapes), tuple(jnp.zeros_like(ci) for ci in ct)

    b = (tuple(tangents[i] for i in live), zeros)
    return tuple(jax.lax.custom_linear_solve(lambda z: z, b, solve, solve_t)[1])


def with_forward_rule(xp: Any, fwd: Any, bwd: Any, linear_bwd: Any, arrays: tuple[Any, ...], n_diff: int) -> tuple[Any, ...]:
    """``fwd`` as a ``jax.custom_jvp`` whose tangents come from ``linear_bwd`` transposed and whose reverse mode is ``bwd``.

    ``linear_bwd`` computes ``bwd``'s map in operations JAX can transpose (no
    guard that reads the cotangent's size, a linear solve declared as one);
    ``bwd`` keeps its guards for ``grad``. The residuals pass through
    :func:`first_order`: a second derivative raises instead of silently
    missing the backward's own dependence on them.
    """
    floating = tuple(_floating(a) for a in arrays)

    @jax.custom_jvp
    def fn(*args: Any) -> Any:
        return tuple(fwd(xp, *args)[0])

    def fn_jvp(primals: Any, tangents: Any) -> Any:
        outs, res = fwd(xp, *primals)
        # Under shard_map the residuals that the mesh replicates are cast to vary as the outputs do: JAX's
        # linearization of lax.custom_linear_solve makes the solve's constants vary and then replays a solve traced
        # with them invariant, which it cannot lower.
        outs, res = tuple(outs), varying(first_order(*res), *outs)
        diff = outs[:n_diff]
        sharded = any(_varies_over(o) for o in diff)

        def forward(ts: list[Any]) -> Any:
            def pull(cts: Any) -> Any:
                grads = linear_bwd(xp, res, cts)
                return tuple(g for g, f in zip(grads, floating) if f)

            given = [jnp.zeros_like(a) if t is None else t for a, t, f in zip(primals, ts, floating) if f]
            if sharded:  # a missing tangent is a zero of its gradient's type, which varies as the rows do
                given = [_varying_as(g, w) for g, w in zip(given, jax.eval_shape(pull, diff))]
            return jax.linear_transpose(pull, diff)(tuple(given))[0]

        def backward(cts: Any) -> Any:
            return bwd(xp, res, tuple(cts))

        live = tuple(_live(a, t) for a, t in zip(primals, tangents))
        return outs, custom_transposed(forward, backward, live, diff) + tuple(_zero_out_tangent(o) for o in outs[n_diff:])

    fn.defjvp(fn_jvp, symbolic_zeros=True)
    return fn(*arrays)


def iterate(
    xp: Any, step: Any, operands: Any, state: Any, *, error: Any, freeze: Any, max_iter: int, tol: float, check_every: int,
    whole_rounds: bool = False,
) -> Any:
    """``lax`` version of :func:`rankops._lib._loops.iterate`: jit, vmap and grad safe.

    Forward: a ``lax.while_loop`` over rounds of ``check_every`` iterations
    that stops once every problem is within ``tol`` (problems that got there
    earlier are frozen, as in the eager loop). Under ``vmap`` it runs until
    the slowest problem of the batch converges.

    Reverse mode: a backward that walks back over the rounds that actually
    ran, from the state recorded at the start of each (O(rounds x (n + m))
    memory), recomputing each one under ``jax.vjp``: the gradient of the
    unrolled iterations, with the kernels of one round alive at a time and
    no work for the rounds that were never run. Forward mode: the
    iterations' own ``jvp``. The two are one ``custom_jvp`` whose tangent
    map has that backward as its transpose (:func:`custom_transposed`).
    """
    # Rematerialised step: replaying a round under jax.vjp then keeps the
    # potentials of each iteration, not its n x m kernels.
    rounds = _Rounds(xp, jax.checkpoint(step), error, freeze, max_iter, tol, check_every, whole_rounds)

    @jax.custom_jvp
    def loop(ops: Any, s0: Any) -> Any:
        return rounds.forward(ops, s0, record=False)[0]

    loop.defjvp(rounds.tangents, symbolic_zeros=True)
    return loop(operands, state)


@dataclasses.dataclass(frozen=True)
class _Rounds:
    """:func:`iterate`'s loop: its rounds forward, their backward, and the tangent map that joins the two."""

    xp: Any
    step: Any
    error: Any
    freeze: Any
    max_iter: int
    tol: float
    check_every: int
    whole_rounds: bool

    @property
    def count(self) -> int:
        """The most rounds the loop runs."""
        return round_count(self.max_iter, self.check_every)

    def run_round(self, ops: Any, s: Any, r: Any, done: Any) -> Any:
        """Round ``r`` from the state ``s``, the problems flagged in ``done`` frozen (:func:`.._loops.run_round`)."""
        return run_round(self.xp, self.step, ops, s, r, done, freeze=self.freeze, max_iter=self.max_iter,
                         check_every=self.check_every, whole_rounds=self.whole_rounds, fori=jax.lax.fori_loop)

    def forward(self, ops: Any, s0: Any, record: bool) -> Any:
        """``((state, n_iter, error), (rounds run, history))``; ``record``: the history holds each round's starting
        state and error, which the backward replays."""
        xp, tol, count = self.xp, self.tol, self.count
        spec = jax.eval_shape(self.error, ops, s0)  # shapes only: no kernel pass
        err0 = jnp.full(spec.shape, jnp.inf, dtype=spec.dtype)  # nothing frozen at the start
        history = (
            (jax.tree_util.tree_map(lambda a: jnp.zeros((count,) + a.shape, a.dtype), s0), jnp.zeros((count,) + err0.shape, err0.dtype))
            if record
            else None
        )

        def cond(carry: Any) -> Any:
            k, _, err, _ = carry
            return (k < count) & ~jnp.all(settled(xp, err, tol))

        def body(carry: Any) -> Any:
            k, s, err, hist = carry
            if record:
                starts, errs = hist
                starts = jax.tree_util.tree_map(lambda buf, a: buf.at[k].set(a), starts, s)
                hist = (starts, errs.at[k].set(err))
            new = self.run_round(ops, s, k, settled(xp, err, tol))
            return k + 1, new, self.error(ops, new), hist

        k, s, err, hist = jax.lax.while_loop(cond, body, varying((jnp.asarray(0, jnp.int32), s0, err0, history), ops))
        n_iter = jnp.minimum(k * self.check_every, self.max_iter)
        return (s, n_iter, err), (k, hist)

    def backward(self, res: Any, cts: Any) -> Any:
        """The pullback of ``(state, error)`` to ``(operands, initial state)``: the rounds that ran, replayed last
        to first from their recorded starts."""
        ops, s_final, k, (starts, errs) = res
        ct_state, ct_err = cts
        _, pull_err = jax.vjp(self.error, ops, s_final)
        d_ops, d_final = pull_err(ct_err)
        d_state = jax.tree_util.tree_map(_plus, d_final, ct_state)

        def back(carry: Any) -> Any:
            j, d_ops_acc, d_s = carry
            b = j - 1
            s_start = jax.tree_util.tree_map(lambda buf: buf[b], starts)
            done = settled(self.xp, errs[b], self.tol)
            _, pull = jax.vjp(lambda o, s: self.run_round(o, s, b, done), ops, s_start)
            d_o, d_s = pull(d_s)
            return b, jax.tree_util.tree_map(_plus, d_ops_acc, d_o), d_s

        _, d_ops, d_state = jax.lax.while_loop(lambda c: c[0] > 0, back, varying((k, d_ops, d_state), ops, starts))
        return d_ops, d_state

    def tangents(self, primals: Any, tangents: Any) -> Any:
        """The loop's ``custom_jvp`` rule: the iterations' ``jvp`` forward, :meth:`backward` as its transpose."""
        out, (k, hist) = self.forward(*primals, record=True)
        leaves, tree = jax.tree_util.tree_flatten(primals)
        res_leaves, res_tree = jax.tree_util.tree_flatten((primals[0], out[0], k, hist))
        res = jax.tree_util.tree_unflatten(res_tree, first_order(*res_leaves))
        # the state and its error (the count has no tangent); only their floating leaves have tangents (a bool
        # flag of the state has none, and a linear map over it could not be transposed for a second derivative)
        every, diff_tree = jax.tree_util.tree_flatten((out[0], out[2]))
        floating = [_floating(d) for d in every]
        diff = tuple(d for d, f in zip(every, floating) if f)

        def plain(*xs: Any) -> Any:
            s, _, err = self.forward(*jax.tree_util.tree_unflatten(tree, xs), record=False)[0]
            return jax.tree_util.tree_leaves((s, err))

        def forward_map(ts: list[Any]) -> Any:
            # a leaf without a tangent (None) gets a zero one: float0 for a bool or integer leaf (a mask, a count)
            t_out = jax.jvp(plain, leaves, [zero_tangent(a) if t is None else t for a, t in zip(leaves, ts)])[1]
            return [t for t, f in zip(t_out, floating) if f]

        def backward_map(cts: Any) -> Any:
            given = iter(cts)
            full = [next(given) if f else jnp.zeros_like(d) for d, f in zip(every, floating)]
            return jax.tree_util.tree_leaves(self.backward(res, jax.tree_util.tree_unflatten(diff_tree, full)))

        live = [_live(a, t) for a, t in zip(leaves, jax.tree_util.tree_leaves(tangents, is_leaf=lambda t: isinstance(t, SymbolicZero)))]
        t_live = iter(custom_transposed(forward_map, backward_map, live, diff))
        t_s, t_err = jax.tree_util.tree_unflatten(diff_tree, [next(t_live) if f else _zero_out_tangent(d) for d, f in zip(every, floating)])
        return out, (t_s, _zero_out_tangent(out[1]), t_err)
