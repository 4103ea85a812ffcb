"""What each contender of the suite computes; built inside a benchmark child process.

A group is one operator with one set of hyper-parameters; its contenders
compute it on the same seeded float32 (B, n) input ``x``:

- "softsort", "neuralsort": ``rankops.soft_rank(x, method=..., tau=tau)``
  (ascending 1-based ranks) on NumPy, torch and JAX; the reference is the
  papers' PyTorch code (:mod:`benchmarks.permutations`), which builds the
  descending (B, n, n) matrix: the matrix of ``-x`` is the ascending matrix
  of ``x``, so its ranks are ``P(-x)^T @ (1..n)``, rankops' convention.
  ``torchsort.soft_rank`` (regularization_strength = tau) is an extra
  contender in the SoftSort group: an O(n log n) relaxation of its own, timed
  but not compared.
- "sinkhorn": ``rankops.soft_sort(x, epsilon=, tol=, max_iter=,
  num_targets=m, implicit=False)`` against OTT-JAX's
  ``ott.tools.soft_sort.sort(x, num_targets=m, epsilon=, threshold=tol,
  max_iterations=max_iter, implicit_diff=None)``: the same squash (sigmoid of
  the standardized row), targets, squared cost and stopping rule, both
  differentiated through the iterations.
- "sinkhorn-defaults": ``rankops.soft_rank(x)`` at every default (epsilon
  1e-2, tol 1e-3, m = n, implicit gradients) on torch and JAX, against the
  O(n^2) floor of any dense transport, "dense-torch": one (B, n, n) cost,
  ``softmax`` and product, ``softmax(-(x_i - y_j)^2 / epsilon) @ (1..n)``
  (a floor to measure against, not the same operator: values not compared).
- "large-*": torch only, B = 1: soft ranks by SoftSort and NeuralSort,
  ``soft_quantile(x, q)`` and ``soft_topk_mask(x, k)`` (Sinkhorn, rankops'
  defaults).

A :class:`Case` gives, per pass, a callable: "fwd" (the operator, no
gradient bookkeeping) and "fb" (forward and backward of ``sum(w * out)``
with a fixed random ``w``: torch ``.backward()``, JAX ``jit(grad)``, NumPy
``rankops.vjp`` then ``vjp_fn(w)``). ``case.get(p)`` builds it; a JAX
program is compiled there, so that no measurement includes compilation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ._common import seeded_inputs

REFERENCE = {"softsort": "paper-torch", "neuralsort": "paper-torch", "sinkhorn": "ott-jax", "sinkhorn-defaults": "dense-torch"}
CONTENDERS = {
    "softsort": ("rankops-numpy", "rankops-torch", "rankops-jax", "paper-torch", "torchsort"),
    "neuralsort": ("rankops-numpy", "rankops-torch", "rankops-jax", "paper-torch"),
    "sinkhorn": ("rankops-numpy", "rankops-torch", "rankops-jax", "ott-jax"),
    "sinkhorn-defaults": ("rankops-torch", "rankops-jax", "dense-torch"),
}
FLOORS = ("dense-torch",)  # references that bound the cost of another computation: values not compared
OPTIONAL = {"ott-jax": "ott", "torchsort": "torchsort"}  # contender -> module; absent: skipped, not failed
NOT_COMPARED = ("torchsort",)  # another relaxation: timed, values not checked
LARGE = {
    "large-softsort": "soft_rank, SoftSort",
    "large-neuralsort": "soft_rank, NeuralSort",
    "large-quantile": "soft_quantile (Sinkhorn)",
    "large-topk": "soft_topk_mask (Sinkhorn)",
}


@dataclass
class Case:
    makers: dict[str, Callable[[], Callable[[], Any]]]  # pass -> builds the pass's callable
    to_numpy: Callable[[Any], Any]
    built: dict[str, Callable[[], Any]] = field(default_factory=dict)

    def get(self, p: str) -> Callable[[], Any]:
        if p not in self.built:
            self.built[p] = self.makers[p]()
        return self.built[p]


def targets(n: int, s: dict) -> int:
    """m, the number of Sinkhorn targets of the "sinkhorn" group at size n."""
    return min(n, s["targets"])


def _rankops_op(group: str, n: int, s: dict) -> Callable[[Any], Any]:
    import rankops

    if group in ("softsort", "neuralsort"):
        return lambda v: rankops.soft_rank(v, method=group, tau=s["tau"])
    if group == "sinkhorn":
        kw = {"epsilon": s["epsilon"], "tol": s["tol"], "max_iter": s["max_iter"], "num_targets": targets(n, s)}
        return lambda v: rankops.soft_sort(v, implicit=False, **kw)
    if group == "sinkhorn-defaults":
        return rankops.soft_rank
    if group in ("large-softsort", "large-neuralsort"):
        return lambda v: rankops.soft_rank(v, method=group[len("large-"):], tau=s["tau"])
    if group == "large-quantile":
        return lambda v: rankops.soft_quantile(v, s["q"])
    if group == "large-topk":
        return lambda v: rankops.soft_topk_mask(v, min(s["k"], n))
    raise ValueError(group)


def _cotangent(group: str, w, n: int, s: dict):
    """``w`` cut to the output's shape."""
    if group == "sinkhorn":
        return w[:, : targets(n, s)].copy()
    return w[:, 0].copy() if group == "large-quantile" else w


def _small(n: int) -> int:
    return min(n, 256)  # warm-up size: large enough for k and m, cheap at every n


def _torch_case(make: Callable[[int], Callable[[Any], Any]], x, w) -> Case:
    import torch

    def fwd_bwd(f, xt, wt):
        v = xt.clone().requires_grad_(True)
        (wt * f(v)).sum().backward()
        return v.grad

    n = x.shape[-1]
    xt, wt, f = torch.from_numpy(x), torch.from_numpy(w), make(n)
    small = make(_small(n))
    with torch.no_grad():  # warm-up: lazy imports and one-time set-up do not count
        out = small(xt[:1, : _small(n)])
    fwd_bwd(small, xt[:1, : _small(n)], torch.ones_like(out))

    def fwd():
        with torch.no_grad():
            return f(xt)

    return Case({"fwd": lambda: fwd, "fb": lambda: (lambda: fwd_bwd(f, xt, wt))}, lambda out: out.detach().numpy())


def _jax_case(make: Callable[[int], Callable[[Any], Any]], x, w) -> Case:
    import jax
    import jax.numpy as jnp
    import numpy as np

    (jnp.ones(4) + 1).block_until_ready()  # warm-up: runtime and thread pools set up before any baseline
    f = make(x.shape[-1])
    xj, wj = jnp.asarray(x), jnp.asarray(w)

    def fwd():
        compiled = jax.jit(f).lower(xj).compile()
        return lambda: compiled(xj).block_until_ready()

    def fb():  # w is an argument, not a constant baked into the program
        compiled = jax.jit(jax.grad(lambda v, c: jnp.sum(c * f(v)))).lower(xj, wj).compile()
        return lambda: compiled(xj, wj).block_until_ready()

    return Case({"fwd": fwd, "fb": fb}, np.asarray)


def _numpy_case(make: Callable[[int], Callable[[Any], Any]], x, w, group: str, s: dict) -> Case:
    import numpy as np

    import rankops

    n = x.shape[-1]
    fun = make(n)
    make(_small(n))(x[:1, : _small(n)])  # warm-up
    # rankops.vjp takes the operator and its options, not a closure
    if group in ("softsort", "neuralsort"):
        op, kw = rankops.soft_rank, {"method": group, "tau": s["tau"]}
    else:
        op, kw = rankops.soft_sort, {"epsilon": s["epsilon"], "tol": s["tol"], "max_iter": s["max_iter"],
                                     "num_targets": targets(n, s), "implicit": False}

    def fb():
        _, vjp_fn = rankops.vjp(op, x, **kw)
        return vjp_fn(w)[0]

    return Case({"fwd": lambda: (lambda: fun(x)), "fb": lambda: fb}, np.asarray)


def _paper(group: str, s: dict) -> Callable[[int], Callable[[Any], Any]]:
    import torch

    from .permutations import paper_neural_sort, paper_soft_sort

    paper = paper_soft_sort if group == "softsort" else paper_neural_sort

    def rank(v):  # P(-v) is the ascending matrix of v; ranks = P^T @ (1..n), as rankops computes them
        p = paper(-v[..., None], s["tau"])
        return torch.arange(1, v.shape[-1] + 1, dtype=v.dtype) @ p

    return lambda n: rank


def _ott(s: dict) -> Callable[[int], Callable[[Any], Any]]:
    from ott.initializers.linear.initializers import DefaultInitializer
    from ott.tools import soft_sort

    # zero initial potentials, as rankops: at m = n `sort` would otherwise pick its sorting
    # initializer, whose own loop reverse-mode autodiff cannot go through
    kw = {"epsilon": s["epsilon"], "threshold": s["tol"], "max_iterations": s["max_iter"], "implicit_diff": None,
          "initializer": DefaultInitializer()}
    return lambda n: (lambda v: soft_sort.sort(v, axis=-1, num_targets=targets(n, s), **kw))


def _dense(s: dict) -> Callable[[int], Callable[[Any], Any]]:
    import torch

    def floor(v):
        y = torch.linspace(0.0, 1.0, v.shape[-1], dtype=v.dtype)
        p = torch.softmax(-((v[..., :, None] - y) ** 2) / 1e-2, dim=-1)
        return p @ torch.arange(1, v.shape[-1] + 1, dtype=v.dtype)

    return lambda n: floor


def _torchsort(s: dict) -> Callable[[int], Callable[[Any], Any]]:
    import torchsort

    return lambda n: (lambda v: torchsort.soft_rank(v, regularization_strength=s["tau"]))


def build(group: str, contender: str, n: int, batch: int, s: dict) -> Case:
    """The case of one contender of one group at size n (imports only what it needs)."""
    x, w = seeded_inputs(batch, n)
    w = _cotangent(group, w, n, s)

    def ours(m: int) -> Callable[[Any], Any]:
        return _rankops_op(group, m, s)

    if contender == "rankops-numpy":
        return _numpy_case(ours, x, w, group, s)
    if contender == "rankops-torch":
        return _torch_case(ours, x, w)
    if contender == "rankops-jax":
        return _jax_case(ours, x, w)
    if contender == "paper-torch":
        return _torch_case(_paper(group, s), x, w)
    if contender == "torchsort":
        return _torch_case(_torchsort(s), x, w)
    if contender == "dense-torch":
        return _torch_case(_dense(s), x, w)
    if contender == "ott-jax":
        return _jax_case(_ott(s), x, w)
    raise ValueError(f"unknown contender {contender!r}")
