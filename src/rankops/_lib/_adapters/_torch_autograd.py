"""PyTorch autograd for the hand-written backward rules: ``autograd.Function`` s that ``torch.func`` can transform.

The torch twin of ``_jax_autodiff``: :class:`Custom` registers a rule's
forward and backward (first and second derivatives, ``torch.func``'s
``grad``, ``vjp``, ``jacrev`` and ``vmap``), and the checks that tell the
adapter whether a transform is running.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["Custom", "CustomForwardMode", "custom_function", "in_transform", "mapped", "plain", "searchable"]

_NO_SECOND_DERIVATIVE = (
    "rankops: second derivatives through an implicit Sinkhorn backward (method='sinkhorn', implicit=True) are not "
    "implemented: pass implicit=False (unrolled), which torch differentiates twice, or use another method (every "
    "other method has second derivatives)"
)


class Custom(torch.autograd.Function):
    """A forward with a hand-written backward, both written against the array API.

    In the ``setup_context`` form that ``torch.func`` requires: the forward
    returns its outputs, then the residual tensors it made (a transform keeps
    no tensor made inside the forward unless it is an output; they are marked
    non-differentiable), then a template saying how to rebuild the residuals
    (:func:`_packed`). ``vmap`` runs the forward once per mapped slice.
    """

    @staticmethod
    def forward(spec: tuple[Any, ...], *arrays: Any) -> Any:
        xp, fwd = spec[0], spec[1]
        outs, res = fwd(xp, *arrays)
        made, template = _packed(arrays, tuple(outs), tuple(res))
        return (*outs, *made, (len(outs), template))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        spec, arrays = inputs[0], inputs[1:]
        n_out, template = output[-1]
        outs, made = output[:n_out], output[n_out:-1]
        ctx.set_materialize_grads(False)  # unused outputs reach bwd as None, not zeros
        ctx.spec = spec
        res = _unpacked(template, made, outs, arrays)
        ctx.values = tuple(_SAVED if isinstance(r, torch.Tensor) else r for r in res)
        # the inputs are kept only to rebuild the residuals for a second derivative: the
        # scaled cost of a Sinkhorn solve is a whole plan's worth of memory the backward does not need
        tensors = [r for r in res if isinstance(r, torch.Tensor)]
        ctx.n_res = len(tensors)
        # under a torch.func transform they are also the link a second derivative would need, to raise (backward)
        ctx.functorch = in_transform()
        ctx.save_for_backward(*tensors, *(arrays if spec[4] is not None or ctx.functorch else ()))
        ctx.mark_non_differentiable(*(o for o in (*outs[spec[3]:], *made) if isinstance(o, torch.Tensor)))

    @staticmethod
    def backward(ctx: Any, *cts: Any) -> Any:
        xp, _, bwd, n_diff, residuals = ctx.spec
        saved = ctx.saved_tensors
        kept, inputs = saved[: ctx.n_res], saved[ctx.n_res :]
        if not torch.is_grad_enabled():  # a first derivative
            return (None, *bwd(xp, _residuals(ctx.values, kept), cts[:n_diff]))
        if residuals is not None and (not ctx.functorch or any(_differentiable_again(a) for a in inputs)):
            # create_graph=True, or torch.func under a second derivative: the residuals rebuilt from the inputs under
            # autograd make bwd differentiable
            return (None, *bwd(xp, residuals(xp, *inputs), cts[:n_diff]))
        # Only the implicit Sinkhorn backward (an iterative solve) gives no residuals to rebuild; its derivative
        # is not implemented, and once_differentiable would drop it silently under autograd.grad(inputs=...).
        if not ctx.functorch:
            raise RuntimeError(_NO_SECOND_DERIVATIVE)
        # torch.func (grad, vjp, jacrev) runs the backward with grad enabled, a second derivative or not: where none
        # can follow, the gradient is the first-order one from the saved residuals, computed unrecorded (a record
        # would keep every intermediate: a sorting network's layers), and differentiating it raises
        with torch.no_grad():
            if residuals is None and any(mapped(c) for c in cts[:n_diff] if isinstance(c, torch.Tensor)):
                # vmap of this backward (jacrev): its solve cannot read its stopping test, so it runs per slice
                grads = _Pullback.apply((xp, bwd), ctx.values, ctx.n_res, *kept, *cts[:n_diff])
            else:
                grads = tuple(bwd(xp, _residuals(ctx.values, kept), cts[:n_diff]))
        live = [i for i, g in enumerate(grads) if isinstance(g, torch.Tensor)]
        linked = _FirstOrder.apply(len(live), *(grads[i] for i in live), *(a for a in inputs if a.is_floating_point()))
        return (None, *(linked[live.index(i)] if i in live else g for i, g in enumerate(grads)))

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], spec: tuple[Any, ...], *arrays: Any) -> Any:
        """One forward per mapped slice, stacked: correct for every rule (the rows of a slice are the rule's rows);
        the residuals come back stacked too, for the backward's own ``vmap``."""
        return _per_slice(info.batch_size, lambda *sl: custom_function().apply(spec, *sl), arrays, in_dims[1:])


class CustomForwardMode(Custom):
    """:class:`Custom` with a forward-mode rule, for eager code (``torch.compile`` traces no custom ``jvp``)."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
        Custom.setup_context(ctx, inputs, output)
        ctx.save_for_forward(*inputs[1:])
        ctx.n_outputs = len(output)

    @staticmethod
    def jvp(ctx: Any, spec: Any, *tangents: Any) -> Any:
        """Forward mode (``torch.func.jacfwd``, ``hessian``): the forward's own operations, differentiated by
        torch's forward AD (Sinkhorn: its iterations, within ``tol`` of the implicit derivative)."""
        xp, fwd = ctx.spec[0], ctx.spec[1]
        arrays = ctx.saved_tensors  # in jvp: those of save_for_forward
        n_diff = ctx.spec[3]
        live = [i for i, (a, t) in enumerate(zip(arrays, tangents)) if t is not None and a.is_floating_point()]

        def moved(*values: Any) -> tuple[Any, ...]:
            given = list(arrays)
            for i, v in zip(live, values):
                given[i] = v
            return tuple(fwd(xp, *given)[0])[:n_diff]

        _, out_tangents = torch.func.jvp(moved, tuple(arrays[i] for i in live), tuple(tangents[i] for i in live))
        return (*out_tangents, *(None,) * (ctx.n_outputs - n_diff))


def custom_function() -> type[Custom]:
    """The ``autograd.Function`` for a rule here: :class:`CustomForwardMode`, or :class:`Custom` in compiled code."""
    return Custom if torch.compiler.is_compiling() else CustomForwardMode


def _keeps_nothing(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """``setup_context`` of a Function whose backward needs nothing: it raises."""


def _refuses_a_second_derivative(ctx: Any, *cts: Any) -> Any:
    raise RuntimeError(_NO_SECOND_DERIVATIVE)


class _FirstOrder(torch.autograd.Function):
    """The identity on the first ``n`` tensors (a first-order gradient), linked to the rest (the inputs it was
    computed from) by a derivative that raises: a second derivative that would miss the backward's own
    dependence on the inputs (the implicit Sinkhorn solve's) is an error, never a number."""

    generate_vmap_rule = True  # its forward (copies) maps as it is

    @staticmethod
    def forward(n: int, *tensors: Any) -> Any:
        return tuple(t.clone() for t in tensors[:n])

    setup_context = staticmethod(_keeps_nothing)
    backward = staticmethod(_refuses_a_second_derivative)


class _Pullback(torch.autograd.Function):
    """A backward rule as a function of its residuals and cotangents, with a ``vmap`` rule that runs it per slice:
    ``torch.func.jacrev`` maps the backward, whose iterative solves (Sinkhorn's) read their stopping test."""

    @staticmethod
    def forward(spec: tuple[Any, Any], values: tuple[Any, ...], n_res: int, *tensors: Any) -> Any:
        xp, bwd = spec
        return tuple(bwd(xp, _residuals(values, tensors[:n_res]), tensors[n_res:]))

    setup_context = staticmethod(_keeps_nothing)
    backward = staticmethod(_refuses_a_second_derivative)

    @staticmethod
    def vmap(info: Any, in_dims: tuple[Any, ...], spec: Any, values: Any, n_res: int, *tensors: Any) -> Any:
        return _per_slice(info.batch_size, lambda *sl: _Pullback.apply(spec, values, n_res, *sl), tensors, in_dims[3:])


def _per_slice(size: int, f: Any, arrays: tuple[Any, ...], dims: tuple[Any, ...]) -> tuple[Any, Any]:
    """``f`` on each of ``size`` slices of ``arrays`` (mapped along ``dims``, None: not mapped), its tensor
    outputs stacked along a new first axis: a ``vmap`` rule (the outputs, their mapped axes)."""
    slices = [f(*(a if d is None else a.select(d, i) for a, d in zip(arrays, dims))) for i in range(size)]
    first = slices[0]
    stacked = tuple(torch.stack([sl[j] for sl in slices]) if isinstance(first[j], torch.Tensor) else first[j]
                    for j in range(len(first)))
    return stacked, tuple(0 if isinstance(v, torch.Tensor) else None for v in stacked)


_SAVED = object()  # in Custom's residual values: a tensor, from saved_tensors


def _residuals(values: tuple[Any, ...], tensors: Any) -> tuple[Any, ...]:
    """The residuals: ``values`` with each :data:`_SAVED` replaced by the next of the saved ``tensors``."""
    saved = iter(tensors)
    return tuple(next(saved) if v is _SAVED else v for v in values)


def _packed(arrays: tuple[Any, ...], outs: tuple[Any, ...], res: tuple[Any, ...]) -> tuple[list[Any], tuple[Any, ...]]:
    """The residual tensors that are new (not an input, an output or an earlier residual) and, per residual, where
    it is: ``("in", i)``, ``("out", k)``, ``("made", j)`` or ``("value", v)`` (a number, None)."""
    made: list[Any] = []
    template = []
    for r in res:
        if not isinstance(r, torch.Tensor):
            template.append(("value", r))
        elif (i := next((i for i, a in enumerate(arrays) if a is r), None)) is not None:
            template.append(("in", i))
        elif (k := next((k for k, o in enumerate(outs) if o is r), None)) is not None:
            template.append(("out", k))
        elif (j := next((j for j, m in enumerate(made) if m is r), None)) is not None:
            template.append(("made", j))
        else:
            template.append(("made", len(made)))
            made.append(r)
    return made, tuple(template)


def _unpacked(template: tuple[Any, ...], made: Any, outs: Any, arrays: Any) -> tuple[Any, ...]:
    """The residuals from :func:`_packed`'s template."""
    where = {"made": made, "out": outs, "in": arrays}
    return tuple(v if kind == "value" else where[kind][v] for kind, v in template)


def in_transform() -> bool:
    """Whether a ``torch.func`` transform is running (never inside code that ``torch.compile`` traces)."""
    return not torch.compiler.is_compiling() and torch._C._functorch.maybe_current_level() is not None


def _wrappers(t: Any) -> tuple[list[bool], Any]:
    """Per ``torch.func`` wrapper of ``t``, outermost first, whether it is ``vmap``'s; and the tensor under them all."""
    batched = []
    while torch._C._functorch.is_functorch_wrapped_tensor(t):
        batched.append(torch._C._functorch.is_batchedtensor(t))
        t = torch._C._functorch.get_unwrapped(t)
    return batched, t


def mapped(t: Any) -> bool:
    """Whether ``t`` is mapped by ``torch.func.vmap`` at some level (under other transforms' wrappers too)."""
    return not torch.compiler.is_compiling() and any(_wrappers(t)[0])


def _differentiable_again(t: Any) -> bool:
    """Whether a derivative of a gradient with respect to ``t`` can be taken: ``torch.func`` differentiates ``t`` at
    more than one level (``grad`` of ``grad``, ``jacfwd`` of ``jacrev``), or autograd records the tensor under the
    transforms' wrappers. ``vmap``'s levels map and do not differentiate."""
    batched, under = _wrappers(t)
    return batched.count(False) > 1 or under.requires_grad


def every_mapped(flags: Any) -> bool:
    """Whether ``flags`` holds for every problem, those that ``torch.func.vmap`` maps included: read from the tensor
    under every transform's wrapper, which stacks the mapped slices (eager code only)."""
    return bool(_wrappers(flags)[1].all())


def searchable(sorted_seq: Any, values: Any) -> tuple[Any, Any]:
    """Both laid out densely as a batch for ``torch.searchsorted``, which copies a strided batch and warns: under
    ``torch.func.vmap`` a view (a half of a row pair) may be contiguous per example and not as a batch, and a tensor
    the map does not reach is expanded to the other's batch with a zero stride. A clone, after adding zeros of the
    mapped one to the other, lays both out; elsewhere ``contiguous`` does."""
    seq_mapped, values_mapped = mapped(sorted_seq), mapped(values)
    if not (seq_mapped or values_mapped):
        return sorted_seq.contiguous(), values.contiguous()
    if not values_mapped:
        values = values + torch.zeros_like(sorted_seq[..., :1], dtype=values.dtype)
    elif not seq_mapped:
        sorted_seq = sorted_seq + torch.zeros_like(values[..., :1], dtype=sorted_seq.dtype)
    return sorted_seq.clone(), values.clone()


def plain(*tensors: Any) -> bool:
    """Whether in-place writes into buffers are safe for these tensors: none is recorded by autograd (a second
    derivative's backward), carries a forward-mode tangent, or is wrapped by a ``torch.func`` transform."""
    for t in tensors:
        if (t.requires_grad and torch.is_grad_enabled()) or torch._C._functorch.is_functorch_wrapped_tensor(t):
            return False
        if torch.autograd.forward_ad.unpack_dual(t).tangent is not None:
            return False
    return True
