r"""A recording namespace: reverse mode over any array-API namespace, for ``rankops.vjp`` of the losses.

The losses compose the operators with array arithmetic. Where the backend has
autodiff (torch, JAX) it differentiates that arithmetic; on the others (NumPy,
CuPy, Dask, array-api-strict) ``rankops.vjp`` runs the loss on :class:`Traced`
arrays. Each wraps one of the backend's arrays, and each function of
:class:`Namespace` computes on the backend and records, for each traced
input, its pullback ``g -> J^T g``. :func:`backward` then applies the
pullbacks in reverse topological order (Griewank & Walther, "Evaluating
Derivatives", ch. 3), summing what reaches an array by several paths. Two
kinds of call are recorded whole, by rules written elsewhere: a rankops
operator by its own ``vjp`` (``_calls.Operator``), and a core's hand-written
backward (``custom_backward``) by its ``bwd`` (:meth:`TapeAdapter.custom_vjp`).

Only floating arrays carry gradients: a function whose value is not floating
(a comparison, ``argsort``, ``isfinite``) returns the backend's own array, and
so does a function of untraced arrays. A traced input reaching a function
without a rule raises ``NotImplementedError`` naming it, never a wrong
gradient. Traced arrays are immutable, as JAX's are.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from .._numerics import unbroadcast
from ._generic import PortableAdapter
from ._tape_rules import Rules
from ._traced import Group, Node, Traced, any_live, floating as _floating, raw


class Namespace(Rules):
    """The recording namespace over the backend namespace ``xp`` (its rules: :class:`._tape_rules.Rules`)."""

    __name__ = "rankops.tape"  # not the backend's: no namespace test may take the tape for it

    def __init__(self, xp: Any, base: PortableAdapter) -> None:
        self.xp = xp
        self.adapter = TapeAdapter(self, base)

    def record(self, value: Any, *pulls: tuple[Any, Callable[[Any], Any]]) -> Any:
        """``value``, traced from the traced ones among the ``(input, pullback)`` pairs.

        Every floating array the tape makes is traced, a constant where no traced input reached it: a
        backend array meeting a traced one in an operator may refuse it (array-api-strict does).
        """
        if not _floating(value):
            return value
        live = [(a, f) for a, f in pulls if type(a) is Traced and a.live]
        if not live:
            return Traced(self, value)
        fs = [f for _, f in live]
        return Traced(self, value, tuple(a for a, _ in live), lambda g: tuple(f(g) for f in fs))

    def constant(self, value: Any) -> Any:
        """``value`` (an array, or a tuple or list of them) with its floating arrays traced as constants."""
        if type(value) in (tuple, list):
            return type(value)(self.constant(v) for v in value)
        return Traced(self, value) if _floating(value) else value

    def record_group(self, outs: tuple[Any, ...], inputs: tuple[Any, ...], pull: Callable[[tuple[Any, ...]], tuple[Any, ...]]) -> tuple[Any, ...]:
        """``outs`` traced together: ``pull(cts)`` (a cotangent per output, zeros where none came) gives one per input."""
        live = [i for i, a in enumerate(inputs) if type(a) is Traced and a.live]
        if not live:
            return tuple(self.constant(outs))

        def pull_live(cts: tuple[Any, ...]) -> tuple[Any, ...]:
            grads = pull(cts)  # once for every input
            return tuple(grads[i] for i in live)

        group = Group(tuple(inputs[i] for i in live), pull_live, outs)
        k = len(outs)

        def slot(i: int) -> Callable[[Any], tuple[Any, ...]]:
            return lambda g: (tuple(g if j == i else None for j in range(k)),)

        return tuple(Traced(self, o, (group,), slot(i)) if _floating(o) else o for i, o in enumerate(outs))

    def __getattr__(self, name: str) -> Any:
        # dtypes, constants and inspection (isdtype, finfo, ...) are the backend's; a function without a rule
        # may read traced arrays (a comparison, a sort order) but gives no gradient
        attr = getattr(self.xp, name)
        if not callable(attr) or isinstance(attr, type) or name.startswith("__"):
            return attr
        return self._without_rule(name, attr)

    def _without_rule(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            out = fn(*raw(args), **{k: raw(v) for k, v in kwargs.items()})
            if _floating(out) and name not in _NO_GRADIENT and any_live(args, kwargs):
                raise NotImplementedError(f"rankops.vjp records no derivative of xp.{name}: its gradient would be lost")
            return self.constant(out)

        return call


# functions whose floating value has a zero derivative (or none): they read traced arrays as constants
_NO_GRADIENT = frozenset({"zeros_like", "ones_like", "full_like", "empty_like", "sign", "floor", "ceil", "round", "trunc"})


def _add(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if type(a) is tuple:
        return tuple(_add(x, y) for x, y in zip(a, b))
    return a + b


def _order(outs: list[Node]) -> list[Node]:
    """Every node the outputs were computed from, each after every node that read it (outputs first)."""
    post: list[Node] = []
    seen: set[int] = set()
    for out in outs:
        if id(out) in seen:
            continue
        seen.add(id(out))
        stack = [(out, iter(out.parents))]
        while stack:
            node, parents = stack[-1]
            for p in parents:
                if id(p) not in seen:
                    seen.add(id(p))
                    stack.append((p, iter(p.parents)))
                    break
            else:
                post.append(node)
                stack.pop()
    return post[::-1]


def backward(ns: Namespace, outs: list[Any], cts: list[Any], leaves: list[Traced]) -> list[Any]:
    """The cotangent of each leaf given those of the outputs (None: zero); None where nothing reached it."""
    grads: dict[int, Any] = {}
    for o, c in zip(outs, cts):
        if type(o) is Traced and c is not None:
            grads[id(o)] = _add(grads.get(id(o)), c)
    keep = {id(leaf) for leaf in leaves}
    for node in _order([o for o in outs if type(o) is Traced]):
        g = grads.get(id(node)) if id(node) in keep else grads.pop(id(node), None)
        if g is None or node.pull is None:
            continue
        if type(node) is Group:
            g = tuple(ns.xp.zeros_like(t) if c is None else c for c, t in zip(g, node.templates))
        for parent, c in zip(node.parents, node.pull(g)):
            if c is None:
                continue
            if type(parent) is Traced:
                c = unbroadcast(ns.xp, c, parent.shape)
                c = ns.xp.astype(c, parent.dtype) if c.dtype != parent.dtype else c
            grads[id(parent)] = _add(grads.get(id(parent)), c)
    return [grads.get(id(leaf)) for leaf in leaves]


def vjp(xp: Any, base: PortableAdapter, f: Callable[..., Any], leaves: list[Any], outputs: Callable[[Any], Any]) -> Any:
    """``(value, outs, pull)`` of ``f(*leaves)`` as an adapter's ``autodiff_vjp`` gives them, recorded on a tape.

    ``leaves`` are floating arrays of ``xp``; ``pull(cotangents)`` returns one gradient per leaf, zeros where nothing
    flowed. The function's other arrays may stay the backend's: the first traced argument names the namespace.
    """
    return _recorded(Namespace(xp, base), f, leaves, outputs)


def _recorded(ns: Namespace, f: Callable[..., Any], leaves: list[Any], outputs: Callable[[Any], Any]) -> Any:
    xp = ns.xp
    traced = [Traced(ns, leaf, leaf=True) for leaf in leaves]
    value = f(*traced)
    outs = tuple(outputs(value))

    def pull(cts: tuple[Any, ...]) -> tuple[Any, ...]:
        grads = backward(ns, list(outs), list(cts), traced)
        return tuple(xp.zeros_like(leaf) if g is None else g for leaf, g in zip(leaves, grads))

    return _untraced(value), tuple(raw(o) for o in outs), pull


def _row_pullback(fn: Callable[..., Any], i: int, xp: Any, *arrays: Any) -> Any:
    """The cotangent of ``arrays[i]`` through ``fn(xp, *arrays)`` given the last array's, on a tape of ``xp``."""
    from . import get_adapter  # the block's own namespace (NumPy chunks of a Dask array)

    *inputs, g = arrays
    live = [k for k, a in enumerate(inputs) if _floating(a)]

    def f(*leaves: Any) -> Any:
        swap = dict(zip(live, leaves))
        return fn(ns, *[swap.get(k, a) for k, a in enumerate(inputs)])

    ns = Namespace(xp, get_adapter(xp))
    _, _, pull = _recorded(ns, f, [inputs[k] for k in live], lambda v: (v,))
    grads = dict(zip(live, pull((g,))))
    return grads.get(i, xp.zeros_like(inputs[i]))


def _untraced(value: Any) -> Any:
    if type(value) is Traced:
        return value.value
    if isinstance(value, tuple):
        parts = [_untraced(v) for v in value]
        return type(value)(*parts) if hasattr(value, "_fields") else tuple(parts)
    return value


def _untraced_to_base(method: Callable[..., Any]) -> Callable[..., Any]:
    """A :class:`TapeAdapter` method that runs the backend adapter's own where no argument is traced."""
    name = method.__name__

    @functools.wraps(method)
    def run(self: TapeAdapter, xp: Any, *args: Any, **kwargs: Any) -> Any:
        if not any_live(args, kwargs):
            return self.ns.constant(getattr(self.base, name)(self.ns.xp, *raw(args), **{k: raw(v) for k, v in kwargs.items()}))
        return method(self, xp, *args, **kwargs)

    return run


class TapeAdapter(PortableAdapter):
    """The adapter of a :class:`Namespace`: the backend adapter's for untraced arrays, recorded rules for traced ones.

    What it does not override runs the portable implementation in the recording namespace, so the tape
    differentiates it operation by operation.
    """

    name = "tape"
    autodiff = True  # custom_backward records the cores' own backward (custom_vjp)

    def __init__(self, ns: Namespace, base: PortableAdapter) -> None:
        self.ns, self.base = ns, base
        self.lazy, self.flushes_subnormals = base.lazy, base.flushes_subnormals

    def stop_gradient(self, xp: Any, x: Any) -> Any:
        return raw(x)

    def is_concrete(self, x: Any) -> bool:
        return self.base.is_concrete(raw(x))

    def check_devices(self, arrays: tuple[Any, ...], names: tuple[str, ...]) -> None:
        self.base.check_devices(raw(tuple(arrays)), names)

    def searchsorted(self, xp: Any, sorted_seq: Any, values: Any, *, side: str = "left") -> Any:
        return self.base.searchsorted(self.ns.xp, raw(sorted_seq), raw(values), side=side)

    def invert_permutation(self, xp: Any, order: Any) -> Any:
        return self.base.invert_permutation(self.ns.xp, raw(order))

    def gumbel(self, xp: Any, key: Any, shape: tuple[int, ...], dtype: Any, device: Any) -> Any:
        return self.ns.constant(self.base.gumbel(self.ns.xp, key, shape, dtype, device))

    @_untraced_to_base
    def rows(self, xp: Any, fn: Callable[..., Any], *arrays: Any, dtype: Any) -> Any:
        """Recorded operation by operation; on a lazy backend recorded whole, its value and each input's pullback
        mapped over blocks of whole rows (each block's pullback a tape of its own, in the chunks' namespace)."""
        if not self.lazy:
            return fn(self.ns, *arrays)
        b, plain = self.ns.xp, raw(arrays)

        def pull(i: int) -> Callable[[Any], Any]:
            return lambda g: self.base.rows(b, functools.partial(_row_pullback, fn, i), *plain, g, dtype=plain[i].dtype)

        return self.ns.record(self.base.rows(b, fn, *plain, dtype=dtype), *[(a, pull(i)) for i, a in enumerate(arrays)])

    @_untraced_to_base
    def take(self, xp: Any, a: Any, index: Any) -> Any:
        ns, n = self.ns, a.shape[-1]
        return ns.record(self.base.take(ns.xp, raw(a), raw(index)), (a, lambda g: ns.scatter_rows(raw(index), g, n)))

    @_untraced_to_base
    def sort_order(self, xp: Any, x: Any, *, descending: bool = False) -> tuple[Any, Any]:
        _, order = self.base.sort_order(self.ns.xp, raw(x), descending=descending)
        return self.take(xp, x, order), order

    @_untraced_to_base
    def softmax(self, xp: Any, z: Any, axis: int = -1) -> Any:
        b = self.ns.xp
        p = self.base.softmax(b, raw(z), axis)
        return self.ns.record(p, (z, lambda g: p * (g - b.sum(g * p, axis=axis, keepdims=True))))

    @_untraced_to_base
    def logsumexp(self, xp: Any, z: Any, axis: int = -1) -> Any:
        b = self.ns.xp
        out = self.base.logsumexp(b, raw(z), axis)
        return self.ns.record(out, (z, lambda g: b.expand_dims(g, axis=axis) * self.base.softmax(b, raw(z), axis)))

    @_untraced_to_base
    def sigmoid(self, xp: Any, z: Any) -> Any:
        s = self.base.sigmoid(self.ns.xp, raw(z))
        return self.ns.record(s, (z, lambda g: g * s * (1 - s)))

    @_untraced_to_base
    def log_sigmoid(self, xp: Any, z: Any) -> Any:
        b = self.ns.xp
        return self.ns.record(self.base.log_sigmoid(b, raw(z)), (z, lambda g: g * self.base.sigmoid(b, -raw(z))))

    def custom_vjp(
        self, xp: Any, fwd: Any, bwd: Any, arrays: tuple[Any, ...], n_diff: int, residuals: Any = None, linear: Any = True
    ) -> tuple[Any, ...]:
        """The forward on the backend's arrays; its first ``n_diff`` outputs traced together, pulled back by ``bwd``."""
        b = self.ns.xp
        outs, res = fwd(b, *raw(tuple(arrays)))
        outs = tuple(outs)
        traced = self.ns.record_group(outs[:n_diff], tuple(arrays), lambda cts: tuple(bwd(b, res, cts)))
        return tuple(traced) + outs[n_diff:]


def traced_call(op_vjp: Callable[..., Any], differentiable: Callable[[Any], tuple[Any, ...]], args: tuple[Any, ...],
                kwargs: dict[str, Any], diff_names: Callable[[tuple[Any, ...], dict[str, Any]], list[tuple[str, Any]]]) -> Any:
    """A rankops operator called on traced arrays, recorded whole by its own ``vjp`` (``_calls.Operator``).

    ``op_vjp(*args, **kwargs)`` is the operator's ``vjp`` on the backend's arrays, whose gradients come one per
    entry of ``diff_names(args, kwargs)`` (its array arguments in call order); those of traced arguments flow on.
    """
    ns = next(a for a in list(args) + list(kwargs.values()) if type(a) is Traced).ns
    plain_args, plain_kwargs = raw(tuple(args)), {k: raw(v) for k, v in kwargs.items()}
    value, vjp_fn = op_vjp(*plain_args, **plain_kwargs)
    outs = differentiable(value)
    named = diff_names(args, kwargs)
    inputs = tuple(a for _, a in named)
    single = len(outs) == 1 and outs[0] is value
    traced_outs = ns.record_group(tuple(outs), inputs, lambda cts: vjp_fn(cts[0] if single else tuple(cts)))
    if single:
        return traced_outs[0]
    swap = {id(o): t for o, t in zip(outs, traced_outs)}
    return type(value)(*[swap.get(id(v), v) for v in value])
