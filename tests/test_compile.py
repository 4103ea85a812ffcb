"""torch.compile(fullgraph=True) beyond the conformance variant (conformance/test_compiled.py): ties, losses, options, the early exit.

Compiled code keeps the cores' data-dependent loops: the pooling rounds (on
a GPU: on a CPU a permutahedron's or isotonic fit is one ``rankops::eager``
node, its rounds and windows eager code) and the Sinkhorn iterations run as
torch's ``while_loop`` (stopping where eager stops) where no gradient flows
through them; a differentiated Sinkhorn loop
is replayed eagerly by its backward (``rankops::eager``), as is the
conjugate gradient of the implicit backward. A sorting network's layers are
one ``scan`` in the forward graph, its backward one ``rankops::eager`` node.
Compiling takes 5-30 s per case: these run under ``-m compiled`` (.ci/run's
second step), except the op's own checks, which compile nothing.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import rankops  # noqa: E402
from rankops.sinkhorn import ConvergenceWarning  # noqa: E402

_RAGGED = torch.tensor([[True, True, False, True, False, True], [True] * 3 + [False] * 3])
_LABELS = torch.tensor([[2.0, 0.0, 1.0, 1.0, 0.0, 3.0], [0.0, 1.0, 2.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
CASES = {
    "soft_rank[lapsum]": lambda x: rankops.soft_rank(x, method="lapsum"),
    "soft_rank[softsort]": lambda x: rankops.soft_rank(x, method="softsort"),
    "soft_rank[permutahedron]": lambda x: rankops.soft_rank(x, method="permutahedron"),
    "soft_sort[permutahedron]": lambda x: rankops.soft_sort(x, method="permutahedron", descending=True),
    "soft_topk_mask[lapsum]": lambda x: rankops.soft_topk_mask(x, 3.5, method="lapsum"),
    "isotonic_regression": lambda x: rankops.isotonic_regression(x),
    "losses.spearman_loss": lambda x: rankops.losses.spearman_loss(x, torch.flip(x, (-1,)), method="permutahedron"),
    "soft_rank[diffsort, odd_even, gaussian]": lambda x: rankops.soft_rank(x, method="diffsort", distribution="gaussian", descending=True),
    "losses.topk_cross_entropy[bitonic, m=4]": lambda x: rankops.losses.topk_cross_entropy(
        x, torch.tensor([1, 4]), [0.5, 0.5], network="bitonic", m=4),
    "soft_rank[sinkhorn, implicit]": lambda x: rankops.soft_rank(x, implicit=True, tol=1e-12, max_iter=5000),
    "soft_rank[sinkhorn, max_iter=25]": lambda x: rankops.soft_rank(x, max_iter=25, epsilon=0.01),
    # unrolled: the backward replays the iterations and the differentiated polish eagerly
    "soft_sort[sinkhorn, unrolled]": lambda x: rankops.soft_sort(x, implicit=False, tol=1e-6),
    "soft_quantile[sinkhorn, implicit]": lambda x: rankops.soft_quantile(x, 0.3, implicit=True, tol=1e-12, max_iter=5000),
    "losses.spearman_loss[sinkhorn]": lambda x: rankops.losses.spearman_loss(x, torch.flip(x, (-1,)), method="sinkhorn", tol=1e-12, max_iter=5000),
    # the p-norm regularizer at its default p = 4/3 (Cardano's root, the top-k's binary search over breakpoints)
    "soft_rank[permutahedron, lp]": lambda x: rankops.soft_rank(x, method="permutahedron", regularization="lp"),
    "soft_topk_mask[permutahedron, lp]": lambda x: rankops.soft_topk_mask(x, 2.5, method="permutahedron", regularization="lp"),
    "soft_topk_magnitude[lp]": lambda x: rankops.soft_topk_magnitude(x, 2.5, regularization="lp"),
    # ragged rows: the mask enters each hand-written backward as an array argument
    "soft_rank[lapsum, mask]": lambda x: rankops.soft_rank(x, method="lapsum", mask=_RAGGED),
    "soft_sort[diffsort, bitonic, mask]": lambda x: rankops.soft_sort(x, method="diffsort", network="bitonic", mask=_RAGGED),
    "soft_sort[sinkhorn, mask]": lambda x: rankops.soft_sort(x, mask=_RAGGED, tol=1e-12, max_iter=5000),
    "losses.ndcg_loss[neuralsort, mask]": lambda x: rankops.losses.ndcg_loss(x, torch.ones_like(x), 2, mask=_RAGGED, method="neuralsort"),
    # learning to rank: graded labels with ties, ragged lists
    "losses.listnet_loss[mask]": lambda x: rankops.losses.listnet_loss(x, _LABELS, mask=_RAGGED),
    "losses.listmle_loss[mask]": lambda x: rankops.losses.listmle_loss(x, _LABELS, mask=_RAGGED),
    "losses.ranknet_loss[weight_by_diff]": lambda x: rankops.losses.ranknet_loss(x, _LABELS, weight_by_diff=True),
    "losses.lambda_loss[ndcgLoss2PP, k, mask]": lambda x: rankops.losses.lambda_loss(
        x, _LABELS, weighing_scheme="ndcgLoss2PP", k=4, mask=_RAGGED),
    "losses.approx_ndcg_loss[mask]": lambda x: rankops.losses.approx_ndcg_loss(x, _LABELS, mask=_RAGGED),
    # the Sinkhorn scaling: one loop op forward, its iterations replayed eagerly backward (rankops::eager)
    "losses.neural_ndcg_loss[mask]": lambda x: rankops.losses.neural_ndcg_loss(x, _LABELS, k=3, mask=_RAGGED),
    "losses.neural_ndcg_loss[transposed]": lambda x: rankops.losses.neural_ndcg_loss(x, _LABELS, transposed=True),
    "losses.smooth_ap_loss[mask]": lambda x: rankops.losses.smooth_ap_loss(x, _LABELS, temperature=0.5, mask=_RAGGED),
}


def _value_and_grad(f, x0):
    x = x0.clone().requires_grad_()
    y = f(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), g


def _cached_call_warnings(caught: list) -> list[str]:
    """Dynamo's warnings of a call into a ``functools.lru_cache`` (array-api-compat's type tests, which the cores keep
    torch tensors from: ``_compat.namespace``, ``_compat.cumulative_sum``)."""
    return [str(w.message)[:200] for w in caught if "lru_cache" in str(w.message)]


def _assert_compiled_is_eager(f, x0):
    """``f`` compiled whole gives eager's value and gradient of its sum."""
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        compiled = _value_and_grad(torch.compile(f, fullgraph=True), x0)
    eager = _value_and_grad(f, x0)
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-10, atol=1e-12)


def test_no_sequence_in_the_library_is_indexed_by_a_comparison():
    """torch 2.11's dynamo raises inside its trace on a tuple indexed by a bool, ``POLISHED[bits >= 64]`` (CPython
    and torch 2.13 take the bool as 0 or 1): a graph break at each call, which ``fullgraph=True`` refuses, and which
    broke every Sinkhorn operator there (18 breaks in ``explain``, on a CPU and on a GPU). The library indexes by
    an int; this suite's torch is newer, so the rule is read from the source."""
    import ast
    import pathlib

    found = []
    for path in sorted(pathlib.Path(rankops.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            index = node.slice if isinstance(node, ast.Subscript) else None
            if isinstance(index, (ast.Compare, ast.BoolOp)) or (isinstance(index, ast.UnaryOp)
                                                                 and isinstance(index.op, ast.Not)):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, found


@pytest.mark.compiled
@pytest.mark.parametrize("name", list(CASES))
def test_compiles_whole_with_eager_values_and_gradients(name):
    f = CASES[name]
    # ties and a sorted stretch: the pooling rounds have work to do
    x0 = torch.tensor([[0.3, -1.2, 2.5, 0.7, 0.7, 1.9], [3.0, 2.0, 1.0, 0.0, -1.0, 0.5]], dtype=torch.float64)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        # torch's own notes while it compiles (autograd.Function, torch.jit deprecations in inductor's imports)
        # are recorded and let be, and max_iter=25 stops short of tol on purpose (a loop that runs out, compiled)
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", ConvergenceWarning)
        compiled = _value_and_grad(torch.compile(f, fullgraph=True), x0)
        eager = _value_and_grad(f, x0)
    # Dynamo warns once per call site into a functools.lru_cache (array-api-compat's type tests): the cores
    # tell torch tensors apart before those tests, so a compiled call prints none
    assert not _cached_call_warnings(caught)
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-10, atol=1e-12)


# a changed shape is a valid call for the cases whose only array is x, and for these ragged ones given a mask and
# labels of each call's shape
_RAGGED_CASES = {
    # the default softness reads each row's valid count (softness._narrowest); the p-norm top-k its k-th position
    "soft_rank[lapsum, mask]": lambda x, m, y: rankops.soft_rank(x, method="lapsum", mask=m),
    "soft_rank[permutahedron, mask]": lambda x, m, y: rankops.soft_rank(x, method="permutahedron", mask=m),
    "soft_topk_mask[permutahedron, lp, mask]": lambda x, m, y: rankops.soft_topk_mask(
        x, 1.5, method="permutahedron", regularization="lp", mask=m),
    "soft_sort[diffsort, bitonic, mask]": lambda x, m, y: rankops.soft_sort(x, method="diffsort", network="bitonic", mask=m),
    # NeuralSort's row sums in blocks of columns (the adapter's scan_blocks)
    "losses.neural_ndcg_loss[mask]": lambda x, m, y: rankops.losses.neural_ndcg_loss(x, y, k=3, mask=m),
}
_RESHAPED_CASES = {
    **{name: (lambda x, m, y, f=f: f(x)) for name, f in CASES.items()
       if "mask" not in name.split("[")[-1] and name.startswith(("soft_", "isotonic", "losses.spearman"))},
    **_RAGGED_CASES,
}


@pytest.mark.compiled
@pytest.mark.parametrize("name", list(_RESHAPED_CASES))
def test_compiled_operators_follow_a_changing_shape(name):
    """A training step compiled once, then called with a new batch size and then a new row length (ragged lists whose
    longest length changes): torch.compile traces the changed sizes as symbols (automatic dynamic shapes), and the
    operator must still be captured whole and give eager's values and gradients. The top-k in magnitude, the
    default softness of masked rows and the masked p-norm top-k did not (array-api-compat's clip tests two Python
    bounds with ``math.isnan``, which a trace refuses for a symbolic n - 1), nor the masked NeuralSort losses
    (``divmod`` of a symbolic n)."""
    _assert_follows_shapes(_RESHAPED_CASES[name], ((2, 6), (3, 6), (3, 9)))


@pytest.mark.compiled
@pytest.mark.parametrize("name", list(_RESHAPED_CASES))
def test_compiled_operators_with_every_size_a_symbol(name):
    """``torch.compile(dynamic=True)``: sizes, and floats derived from them or read from modules, are symbols from
    the first call on. A loop's body (torch's ``while_loop`` and ``scan``) may close over no symbolic float, and
    array-api-compat's ``clip`` tests a Python bound with ``math.isnan``: Sinkhorn's polish (its tolerance),
    diffsort's network (``math.pi``, made a symbol by the softness; the clipped comparator argument) and the masked
    NeuralSort losses (the scaling's clipped floor) failed to compile."""
    _assert_follows_shapes(_RESHAPED_CASES[name], ((2, 6), (3, 9)), dynamic=True)


def _assert_follows_shapes(f, shapes, dynamic=None):
    """``f(x, mask, labels)`` compiled once and called at each shape gives eager's values and gradients."""
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    generator = torch.Generator().manual_seed(0)
    for shape in shapes:
        x0 = torch.randn(shape, generator=generator, dtype=torch.float64)
        mask = (torch.rand(shape, generator=generator) > 0.3) | (torch.arange(shape[-1]) < 2)
        labels = torch.randint(0, 4, shape, generator=generator).to(torch.float64)
        with warnings.catch_warnings():
            # torch's notes while it traces; max_iter=25 stops short of tol on purpose
            warnings.simplefilter("ignore", UserWarning)
            warnings.simplefilter("ignore", ConvergenceWarning)
            got = _value_and_grad(lambda x: compiled(x, mask, labels), x0)
            want = _value_and_grad(lambda x: f(x, mask, labels), x0)
        torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-12, equal_nan=True)
        torch.testing.assert_close(got[1], want[1], rtol=1e-10, atol=1e-12, equal_nan=True)


_FLOAT_OPTIONS = {
    "softsort, tau": (lambda x, v: rankops.soft_rank(x, method="softsort", tau=v), (0.5, 0.7)),
    # p picks the solver: a closed form, then Newton's steps in the pooling loop
    "lp, p": (lambda x, v: rankops.soft_rank(x, method="permutahedron", regularization="lp", p=v), (1.5, 1.3)),
    # a parameter of the eager op that runs the Sinkhorn iterations (rankops::eager)
    "sinkhorn, epsilon": (lambda x, v: rankops.soft_rank(x, epsilon=v), (0.3, 0.4)),
    "lapsum, k": (lambda x, v: rankops.soft_topk_mask(x, v, method="lapsum"), (2.5, 3.5)),
}


@pytest.mark.compiled
@pytest.mark.parametrize("name", list(_FLOAT_OPTIONS))
def test_a_compiled_call_takes_another_float_option(name):
    """Called again with another float, torch.compile traces that argument symbolically (a ``SymFloat``, which
    passes as a float): the options' checks, the eager op's parameters and the loops' closures cannot hold one, and
    ``_compat.concrete_number`` specializes it (a guard on its value: each value its own graph)."""
    f, values = _FLOAT_OPTIONS[name]
    x0 = torch.tensor([[0.3, -1.2, 2.5, 0.7, 0.7, 1.9], [3.0, 2.0, 1.0, 0.0, -1.0, 0.5]], dtype=torch.float64)
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")  # dynamo's tracing is what is checked
    for v in values:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            got = _value_and_grad(lambda x: compiled(x, v), x0)
        want = _value_and_grad(lambda x: f(x, v), x0)
        torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got[1], want[1], rtol=1e-10, atol=1e-12)


@pytest.mark.compiled
def test_compiled_sinkhorn_stops_where_eager_stops():
    """The iterations run as a while_loop with eager's stopping test: the same count, not max_iter."""
    x0 = torch.tensor([[0.3, -1.2, 2.5, 0.7, 1.9], [3.0, 2.0, 1.0, 0.0, -1.0]], dtype=torch.float64)
    cost = (x0[..., :, None] - x0[..., None, :]) ** 2

    def solve(c):
        res = rankops.sinkhorn(c, epsilon=0.5, tol=1e-9, max_iter=10_000)
        return res.plan, res.n_iter

    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        plan, n_iter = torch.compile(solve, fullgraph=True)(cost)
    want_plan, want_n = solve(cost)
    assert 0 < want_n < 10_000
    assert int(n_iter) == want_n
    torch.testing.assert_close(plan, want_plan, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("most, steps", [(6, 4), (3, 3)])
def test_repeat_while_takes_the_steps_its_test_allows(most, steps):
    """The adapters' guarded loop (the Sinkhorn polish): steps while the test holds, at most ``most``; compiled it is
    one ``while_loop`` whose test is the caller's (captured with ``aot_eager``: no code generation), eagerly and on
    NumPy a loop of guarded steps. From 0, each step adds 1 to three entries: their sum passes 10 after 4 steps."""
    import array_api_compat.numpy as np_xp
    import array_api_compat.torch as xp
    import numpy as np

    from rankops._lib._adapters import get_adapter

    def run(xp_, x):
        count = xp_.zeros((), dtype=x.dtype)
        return get_adapter(xp_).repeat_while(xp_, lambda s: xp_.sum(s[0]) < 10, lambda s: (s[0] + 1, s[1] + 1), (x, count), most)

    torch._dynamo.reset()
    compiled = torch.compile(lambda x: run(xp, x), backend="aot_eager", fullgraph=True)(torch.zeros(3, dtype=torch.float64))
    for x, count in (compiled, run(xp, torch.zeros(3, dtype=torch.float64)), run(np_xp, np.zeros(3))):
        assert float(count) == steps
        assert np.asarray(x).tolist() == [float(steps)] * 3


def test_an_eager_node_reads_values_in_compiled_code():
    """``reads_in_eager_node``: a function that ``eagerly`` runs reads real tensors, in eager code and in a compiled
    graph (the ``rankops::eager`` node), so the p-norm merge rounds take the blocks as entries there."""
    import array_api_compat.torch as xp

    from rankops._lib._adapters import get_adapter

    def reads(x):
        return torch.ones(()) if get_adapter(xp).reads_in_eager_node(x) else torch.zeros(())

    torch._dynamo.reset()
    x = torch.zeros(3)
    assert float(reads(x)) == 1.0
    assert float(torch.compile(reads, backend="aot_eager", fullgraph=True)(x)) == 1.0


def test_eager_op_runs_a_named_function():
    """``rankops::eager``, the node a compiled graph holds for a loop it cannot trace: the named function's outputs, new arrays."""
    from rankops._lib._adapters._torch import _eager

    p = torch.rand(2, 4, 4, dtype=torch.float64)
    r, s = p.sum(-1), p.sum(-2)
    got = _eager("rankops._solvers.implicit:_blocked_solve", repr({"max_iter": 50}), [p, r, s], [1, 2])
    import array_api_compat.torch as xp

    from rankops._solvers.implicit import _blocked_solve

    want = _blocked_solve(xp, p, r, s, max_iter=50)
    assert len(got) == 2
    for g, w_ in zip(got, want):
        torch.testing.assert_close(g, w_, rtol=0, atol=0)
        assert g.data_ptr() not in (p.data_ptr(), r.data_ptr(), s.data_ptr())


def test_eager_op_checks_the_promised_shapes():
    """An output that is not shaped as promised (the compiled graph was planned for that shape) is an error, not a silent mismatch."""
    from rankops._lib._adapters._torch import _eager

    p = torch.rand(2, 4, 4, dtype=torch.float64)
    r, s = p.sum(-1), p.sum(-2)
    with pytest.raises(AssertionError, match="returned"):
        _eager("rankops._solvers.implicit:_blocked_solve", repr({"max_iter": 50}), [p, r, s], [0, 2])


@pytest.mark.compiled
def test_compiled_pooling_on_one_padded_row():
    """One row whose length is not a power of two (the merge rounds pad it, then slice): the skipped and the
    run branch of the merge rounds agree on strides (a stride-1024 slice of one row once broke tracing)."""
    x0 = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0, 0.5]], dtype=torch.float64)
    f = lambda x: rankops.soft_rank(x, method="permutahedron", strength=0.1)  # noqa: E731
    _assert_compiled_is_eager(f, x0)


def _graph_sizes(f, x0, *, aot=True):
    """Nodes of the forward and backward graphs AOT autograd makes of ``f`` (loop bodies included), compiling nothing;
    ``aot=False``: of the one graph dynamo captures (a custom rule's forward and backward as its subgraphs)."""
    from torch._dynamo.backends.common import aot_autograd

    sizes = []

    def count(gm, example_inputs):
        sizes.append(sum(len(m.graph.nodes) for m in gm.modules() if isinstance(m, torch.fx.GraphModule)))
        return gm if aot else gm.forward

    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        backend = aot_autograd(fw_compiler=count, bw_compiler=count) if aot else count
        _value_and_grad(torch.compile(f, fullgraph=True, backend=backend), x0)
    return sizes


@pytest.mark.compiled
@pytest.mark.parametrize("network", ["odd_even", "bitonic"])
def test_compiled_network_is_one_loop_over_its_layers(network):
    """A sorting network under torch.compile is a scan over its layers, forward and backward: its graphs are the
    same size at 16 and 64 wires (16 and 64 layers odd-even, 10 and 21 bitonic), where unrolled ones grow with them."""

    def f(x):
        return rankops.soft_rank(x, method="diffsort", network=network)

    small, large = (_graph_sizes(f, torch.randn(2, n, dtype=torch.float64)) for n in (16, 64))
    assert len(small) == 2 and small == large, (small, large)


@pytest.mark.compiled
@pytest.mark.parametrize("name", ["soft_topk_mask[permutahedron, lp]", "soft_topk_magnitude[lp]"])
def test_compiled_top_k_search_is_one_loop_over_its_steps(name):
    """The top-k's binary search over 2n breakpoints is one ``while_loop`` under torch.compile: the graphs are the
    same size at n = 8 and 10^5 (4 and 18 steps), where steps traced one by one grew them by a few nodes each (and
    the compile time with them: the magnitude at n = 10^5 took 2.4x its time at n = 1000)."""
    small, large = (_graph_sizes(CASES[name], torch.randn(2, n, dtype=torch.float64), aot=False) for n in (8, 100_000))
    assert len(small) == 1 and small == large, (small, large)


@pytest.mark.compiled
def test_compiled_network_matrix_has_eager_gradient_at_many_blocks():
    """The matrix's backward carries its columns in blocks, a loop of loops (5 blocks of 52 columns at n = 256):
    compiled, it runs as one eager op and gives eager's gradient (a scan op inside the backward graph did not:
    inductor reused a donated buffer, and the gradient was off by 20x its size)."""
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(2, 256, dtype=torch.float64, generator=gen)
    w = torch.randn(2, 256, 256, dtype=torch.float64, generator=gen)

    def f(x):
        return rankops.diffsort(x, network="bitonic") * w

    _assert_compiled_is_eager(f, x0)


_FITS = {
    "soft_rank[permutahedron]": ("isotonic:_pooled_fit", CASES["soft_rank[permutahedron]"]),
    "soft_rank[permutahedron, kl]": ("isotonic:_pooled_fit", lambda x: rankops.soft_rank(x, method="permutahedron", regularization="kl")),
    "soft_sort[permutahedron]": ("isotonic:_pooled_fit", CASES["soft_sort[permutahedron]"]),
    "isotonic_regression": ("isotonic:_pooled_fit", CASES["isotonic_regression"]),
    "soft_rank[permutahedron, lp]": ("pnorm:fitted_blocks", CASES["soft_rank[permutahedron, lp]"]),
    "soft_sort[permutahedron, lp, p=3/2]": ("pnorm:fitted_blocks", lambda x: rankops.soft_sort(
        x, method="permutahedron", regularization="lp", p=1.5)),
}
_X_FIT = torch.tensor([[0.3, -1.2, 2.5, 0.7, 0.7, 1.9], [3.0, 2.0, 1.0, 0.0, -1.0, 0.5]], dtype=torch.float64)


def _loops_and_eager_nodes(f, x0):
    """The loop ops (``while_loop``, ``cond``) and the functions of the ``rankops::eager`` nodes in the graphs dynamo
    captures of ``f``'s forward and backward (subgraphs included), compiling nothing."""
    found = []

    def record(gm, example_inputs):
        for m in gm.modules():
            if isinstance(m, torch.fx.GraphModule):
                for node in m.graph.nodes:
                    if node.op == "call_function" and str(node.target) in ("while_loop", "cond"):
                        found.append(str(node.target))
                    elif node.op == "call_function" and str(node.target) == "rankops.eager":
                        found.append(node.args[0].removeprefix("rankops._cores."))
        return gm.forward

    _value_and_grad(torch.compile(f, fullgraph=True, backend=record), x0)
    return found


@pytest.mark.parametrize("name", list(_FITS))
def test_a_cpu_graph_runs_the_fit_as_one_eager_node(name):
    """On a CPU a permutahedron's (and isotonic regression's) fit is one ``rankops::eager`` node, whose rounds and
    windows read values as eager code does."""
    fit, f = _FITS[name]
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _loops_and_eager_nodes(f, _X_FIT) == [fit]
    assert not _cached_call_warnings(caught)


# each fit's graph traced once more (1-4 s each): isotonic regression's in the default run, every fit's under -m compiled
@pytest.mark.parametrize("name", [n if n == "isotonic_regression" else pytest.param(n, marks=pytest.mark.compiled) for n in _FITS])
def test_a_gpu_graph_loops_over_the_pooling_rounds(name, monkeypatch):
    """Where reading values does not pay (a GPU, ``windows.pays`` False) a fit's pooling rounds are a ``while_loop``
    of the graph and the merge rounds an eager node behind a ``cond``; dynamo prints no warning while it traces them."""
    from rankops._cores import windows

    fit, f = _FITS[name]
    monkeypatch.setattr(windows, "pays", lambda v: False)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        on_gpu = _loops_and_eager_nodes(f, _X_FIT)
    assert "while_loop" in on_gpu and fit not in on_gpu, on_gpu
    # the traced rounds print no warning (p = 3/2's sort, through array-api-compat's cumulative_sum, printed five)
    assert not _cached_call_warnings(caught)


@pytest.mark.compiled
@pytest.mark.parametrize("name", list(_FITS))
def test_compiled_fit_loops_where_reading_does_not_pay(name, monkeypatch):
    """The fit's pooling rounds compiled (a GPU's graph: ``windows.pays`` False) give eager's values and gradients."""
    from rankops._cores import windows

    monkeypatch.setattr(windows, "pays", lambda v: False)
    _assert_compiled_is_eager(_FITS[name][1], _X_FIT)


@pytest.mark.compiled
def test_compiled_p_norm_rank_of_rows_long_enough_for_the_guess_where_reading_does_not_pay(monkeypatch):
    """Rows of 300 (past ``one_block.SHORTEST``) at strength 1, one block each: where reading values does not pay (a
    GPU's graph) the p-norm rank takes :func:`rankops._cores.one_block.guessed_in_graph`, whose rounds sit behind a
    ``cond``; compiled whole it gives eager's value and gradient."""
    from rankops._cores import windows

    monkeypatch.setattr(windows, "pays", lambda v: False)
    x = torch.randn(2, 300, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    _assert_compiled_is_eager(lambda a: rankops.soft_rank(a, method="permutahedron", regularization="lp", p=1.5, strength=1.0), x)


@pytest.mark.compiled
@pytest.mark.parametrize("regularization", [dict(regularization="lp", p=4 / 3), dict(regularization="kl")], ids=["p=4/3", "kl"])
def test_compiled_rounds_give_tied_entries_one_rank_where_reading_does_not_pay(regularization, monkeypatch):
    """Float32 rows of 135 whose three largest entries tie, one row masked, in a GPU's graph (``windows.pays``
    False): inductor's generated kernels compute the blocks' roots in the pooling rounds, where a root evaluated
    again at each entry by a vectorized loop and its scalar tail may round 1 ulp apart and split a block (as
    JAX's default compilation did: tests/test_default_compilation.py). NumPy's float64 fit, to float32's rounding,
    and the ties one rank."""
    import numpy as np

    from rankops._cores import windows

    from .test_default_compilation import tied_top_rows

    x, mask = tied_top_rows(135)
    kw = dict(method="permutahedron", strength=0.3, **regularization)
    want = rankops.soft_rank(x, mask=mask, **kw)
    monkeypatch.setattr(windows, "pays", lambda v: False)
    on = torch.as_tensor(mask)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        got = torch.compile(lambda z: rankops.soft_rank(z, mask=on, **kw), fullgraph=True)(torch.as_tensor(x, dtype=torch.float32))
    got = got.numpy()
    np.testing.assert_allclose(got[mask], want[mask], rtol=0, atol=1e-3)  # ranks up to 135: about 3e-5 apart
    np.testing.assert_array_equal(got[:, -3:], np.broadcast_to(got[:, -1:], (2, 3)))


@pytest.mark.compiled
@pytest.mark.parametrize("pays", [True, False])
def test_compiled_merge_rounds_on_a_row_past_the_pooling_cap(pays, monkeypatch):
    """A row that pools one block per round (1, 2, ..., 30, -1000: 30 rounds, past the cap of 4 ceil(log2 31) = 20)
    finishes in the merge rounds, which a GPU's compiled code runs eagerly in one op (rankops::eager) after its
    compiled pooling rounds (``pays`` False), and a CPU's in the eager node of the whole fit: scipy's fit."""
    import numpy as np
    from scipy.optimize import isotonic_regression

    from rankops._cores import windows

    monkeypatch.setattr(windows, "pays", lambda v: pays)
    y = torch.tensor([[*range(1, 31), -1000.0], [float(v) for v in range(31)]], dtype=torch.float64)
    want = torch.tensor(np.array([isotonic_regression(r).x for r in y.numpy()]), dtype=torch.float64)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        got = torch.compile(rankops.isotonic_regression, fullgraph=True)(y)
    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-12)


def _inlined_reads(fn, *args):
    """How many times ``fn``'s graph reads its inputs once every value is expanded into each of its uses, as
    inductor's code generation inlines a pointwise value into every consumer; a sum is a buffer of its own (a
    reduction is always realized) and counts as one read."""
    from torch.fx.experimental.proxy_tensor import make_fx

    reads = {}
    for node in make_fx(fn)(*args).graph.nodes:
        used = []
        torch.fx.node.map_arg((node.args, node.kwargs), used.append)
        count = 1 if node.op == "placeholder" else sum(reads.get(a, 0) for a in used)
        if node.op == "output":
            return count
        reads[node] = 1 if node.target is torch.ops.aten.sum.dim_IntList else count


def test_the_closed_forms_read_their_inputs_few_times_once_inlined():
    """The p-norm's closed forms stay small once inductor inlines every value into each of its uses: guards around
    each power of Cardano's root read its inputs 1,075,347 times so (and its fused kernel took minutes to generate:
    the default p = 4/3 rank did not compile in 15 minutes), the top-k's binary search with lo, hi and their midpoint
    2,657,203 times at n = 1000, doubling with each step. Now 169, and 113 growing by a few reads per step."""
    import array_api_compat.torch as xp

    from rankops._cores.breakpoints import search_breakpoints
    from rankops._cores.powers import cubic_root
    from rankops._lib._adapters import get_adapter

    assert _inlined_reads(lambda p, q: cubic_root(xp, p, q), torch.rand(4, 8), torch.randn(4, 8)) <= 200
    reads = []
    for n in (1000, 100_000):
        top = torch.arange(n).expand(3, n)
        bottom = top + n

        def search(t, b, k):
            return search_breakpoints(xp, get_adapter(xp), t, b, lambda j: torch.sum(torch.where(b <= j, 1.0, 0.0), -1, keepdim=True), k)

        reads.append(_inlined_reads(search, top, bottom, torch.full((3, 1), 2.0)))
    assert reads[0] <= 200 and reads[1] <= reads[0] + 100, reads


@pytest.mark.compiled
def test_compiled_threshold_splits_run_in_one_eager_node_where_reading_does_not_pay(monkeypatch):
    """At p = 1.4 (no power sums) a row the pooling rounds leave goes to threshold splits: in a GPU's graph
    (``windows.pays`` False) one ``rankops::eager`` node behind the rounds' ``cond`` (traced into the graph, their
    levels' loops took the compile from 12 s to 70 s), with eager's values and gradients."""
    from rankops._cores import windows

    monkeypatch.setattr(windows, "pays", lambda v: False)
    e = 0.4
    i = torch.arange(1.0, 65.0, dtype=torch.float64)
    x = torch.stack([e * 32.0 ** (e - 1.0) * i, torch.linspace(-1.0, 1.0, 64, dtype=torch.float64) ** 3])

    def f(a):
        return rankops.soft_rank(a, method="permutahedron", regularization="lp", p=1.4, strength=1.0)

    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert "pnorm:_split_fit" in _loops_and_eager_nodes(f, x)
    _assert_compiled_is_eager(f, x)
