"""The learning-to-rank losses against allRank's own tests and float64 NumPy transcriptions of the reference code.

The references below follow allRank's implementations (Pobrotyn et al.,
the reference code of NeuralNDCG) step by step, one list at a time with
its padding cut off, sorting with NumPy: independent of rankops' pairwise
and masked formulations. allRank's own test cases and expected values are
translated in conventions only: its padded label -1 becomes ``mask=False``.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose

import rankops.losses as losses
from tests import reference
from tests.backends import CPU_BACKENDS
from tests.backends import on_backend

EPS = 1e-10
PAD = -1.0


def _softmax(z):
    e = np.exp(z - np.max(z))
    return e / e.sum()


def _logsig(z):
    return np.minimum(z, 0) - np.log1p(np.exp(-np.abs(z)))


# -- references: one list (1-D, padding removed), float64 -----------------------------------------------------------

def ref_listnet(s, t, eps=EPS):
    return -np.sum(_softmax(t) * np.log(_softmax(s) + eps))


def ref_binary_listnet(s, t, eps=EPS):
    q = t / (t.sum() if t.sum() != 0 else 1.0)
    return -np.sum(q * np.log(_softmax(s) + eps))


def ref_listmle(s, t, eps=EPS):
    order = np.argsort(-t, kind="stable")
    z = s[order] - np.max(s)
    tail = np.cumsum(np.exp(z)[::-1])[::-1]
    return np.sum(np.log(tail + eps) - z)


def ref_ranknet(s, t, weight_by_diff=False, weight_by_diff_powed=False):
    terms = []
    for i in range(len(s)):
        for j in range(len(s)):
            if t[i] > t[j]:
                w = abs(t[i] - t[j]) if weight_by_diff else abs(t[i] ** 2 - t[j] ** 2) if weight_by_diff_powed else 1.0
                terms.append(w * np.log1p(np.exp(-(s[i] - s[j]))))
    return np.mean(terms) if terms else 0.0


def ref_lambda(s, t, scheme=None, k=None, sigma=1.0, mu=10.0, natural=False, eps=EPS):
    """allRank's lambdaLoss on one list, ties of ``s`` in order of appearance."""
    n = len(s)
    order = np.argsort(-s, kind="stable")
    ps, ts = s[order], t[order]
    diffs = ts[:, None] - ts[None, :]
    chosen = np.ones((n, n), bool) if scheme == "ndcgLoss1" else diffs > 0
    kk = n if k is None else k
    top = np.zeros((n, n), bool)
    top[:kk, :kk] = True
    chosen &= top
    ts0, best = np.maximum(ts, 0), np.maximum(np.sort(t)[::-1], 0)
    D = np.log2(1.0 + np.arange(1, n + 1))
    max_dcg = max(np.sum(((2**best - 1) / D)[:kk]), eps)
    G = (2**ts0 - 1) / max_dcg
    pos = np.arange(1, n + 1)
    delta = np.abs(pos[:, None] - pos[None, :])
    with np.errstate(divide="ignore"):
        nd2 = np.abs(1 / np.log2(1.0 + delta) - 1 / np.log2(2.0 + delta))
    np.fill_diagonal(nd2, 0)
    nd2 = nd2 * np.abs(G[:, None] - G[None, :])
    lam = np.abs(1 / D[:, None] - 1 / D[None, :]) * np.abs(G[:, None] - G[None, :])
    w = {None: 1.0, "rankNet": 1.0, "ndcgLoss1": (G / D)[:, None], "ndcgLoss2": nd2, "lambdaRank": lam,
         "ndcgLoss2PP": mu * nd2 + lam, "rankNetWeightedByGTDiff": np.abs(ts0[:, None] - ts0[None, :]),
         "rankNetWeightedByGTDiffPowed": np.abs(ts0[:, None] ** 2 - ts0[None, :] ** 2)}[scheme]
    p = np.maximum(np.exp(_logsig(sigma * np.clip(ps[:, None] - ps[None, :], -1e8, 1e8))), eps)
    wp = np.maximum(p ** w, eps)
    log = np.log(wp) if natural else np.log2(wp)
    return -np.sum(log[chosen])


def ref_approx_ndcg(s, t, alpha=1.0, eps=EPS):
    n = len(s)
    g = 2 ** np.maximum(t, 0) - 1
    max_dcg = max(np.sum(np.sort(g)[::-1] / np.log2(2.0 + np.arange(n))), eps)
    pos = np.array([1 + sum(max(1 / (1 + np.exp(alpha * (s[i] - s[j]))), eps) for j in range(n) if j != i) for i in range(n)])
    return -np.sum(g / max_dcg / np.log2(1 + pos))


def _neuralsort(s, tau):
    n = len(s)
    a = np.abs(s[:, None] - s[None, :]).sum(axis=1)
    logits = ((n + 1 - 2 * np.arange(1, n + 1))[:, None] * s[None, :] - a[None, :]) / tau
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _sinkhorn_scaling(p, max_iter=50, tol=1e-6):
    for _ in range(max_iter):
        p = p / np.maximum(p.sum(axis=0, keepdims=True), EPS)
        p = p / np.maximum(p.sum(axis=1, keepdims=True), EPS)
        if np.max(np.abs(p.sum(axis=1) - 1)) < tol and np.max(np.abs(p.sum(axis=0) - 1)) < tol:
            break
    return p


def ref_neural_ndcg(s, t, temperature=1.0, powered=True, k=None, transposed=False, max_iter=50, tol=1e-6, noise=None,
                    beta=0.1, log_scores=True):
    n = len(s)
    kk = n if k is None else min(k, n)
    g = 2**t - 1 if powered else t
    disc = 1 / np.log2(np.arange(n) + 2.0)
    disc[kk:] = 0
    idcg = np.sum(np.sort(g)[::-1] * disc)
    values = []
    for z in ([s] if noise is None else [(np.log(s + abs(s.min()) + EPS) if log_scores else s + abs(s.min())) + beta * e
                                         for e in noise]):
        p = _sinkhorn_scaling(_neuralsort(z, temperature), max_iter, tol)
        dcg = np.sum(g * (p.T @ disc)) if transposed else np.sum((p @ g) * disc)
        values.append(0.0 if idcg == 0 else dcg / (idcg + EPS))
    return -np.mean(values)


def ref_smooth_ap(s, t, temperature=0.01):
    rel = t > 0
    if not rel.any():
        return 0.0
    sig = 1 / (1 + np.exp(-(s[None, :] - s[:, None]) / temperature))
    np.fill_diagonal(sig, 0)
    return 1 - np.mean([(1 + sig[i][rel].sum()) / (1 + sig[i].sum()) for i in np.flatnonzero(rel)])


# -- allRank's own test cases (tests/losses in allRank), padding as a mask ------------------------------------------

def _allrank(fun, y_pred, y_true, **options):
    s, t = np.array(y_pred, dtype=np.float64), np.array(y_true, dtype=np.float64)
    return float(fun(s[None], t[None], mask=(t != PAD)[None], **options)[0])


BCE = lambda d, w=1.0: float(np.mean(np.asarray(w) * np.log1p(np.exp(-np.asarray(d)))))  # noqa: E731  (BCEWithLogits, label 1)

ALLRANK_CASES = [
    # (loss, y_pred, y_true, options, expected)
    (losses.lambda_loss, [0.5, 0.3, 0.5, 1.0], [0.5, 0.3, 0.5, PAD], {"weighing_scheme": "ndcgLoss1"}, 2.9272110462),
    (losses.lambda_loss, [0.5, 0.3, 0.5, 1.0], [0.5, 0.3, 0.5, PAD], {"weighing_scheme": "ndcgLoss2PP"}, 1.1244146823),
    (losses.lambda_loss, [0.5, 0.3, 0.5, 1.0], [0.5, 0.3, 0.5, PAD], {"weighing_scheme": "rankNet", "reduction_log": "natural"},
     1.1962778568),
    (losses.approx_ndcg_loss, [0.5, 0.3, 0.5, 1.0], [0.5, 0.3, 0.5, PAD], {}, -0.8499219417),
    (losses.listmle_loss, [0.5, 0.3, 0.5], [1.0, 0.0, PAD], {}, 0.5981389284133911),
    (losses.listnet_loss, [0.5, 0.2], [1.0, 0.0], {"eps": 0.0}, -np.sum(_softmax(np.array([1.0, 0])) * np.log(_softmax(np.array([0.5, 0.2]))))),
    (losses.listnet_loss, [0.5, -1e30], [1.0, 0.0], {}, -np.sum(_softmax(np.array([1.0, 0])) * np.log(np.array([1.0, 0.0]) + EPS))),
    (losses.listnet_loss, [0.5, 0.2, 0.5], [1.0, 0.0, PAD], {}, -np.sum(_softmax(np.array([1.0, 0])) * np.log(_softmax(np.array([0.5, 0.2])) + EPS))),
    (losses.binary_listnet_loss, [0.5, 0.2], [1.0, 0.0], {"eps": 0.0}, -np.log(_softmax(np.array([0.5, 0.2]))[0])),
    (losses.binary_listnet_loss, [0.5, -1e30], [1.0, 0.0], {}, -np.log(1.0 + EPS)),
    (losses.binary_listnet_loss, [0.5, 0.2, 0.5], [1.0, 0.0, PAD], {}, -np.log(_softmax(np.array([0.5, 0.2]))[0] + EPS)),
    (losses.ranknet_loss, [0.5, 0.2], [1.0, 0.0], {}, BCE(0.3)),
    (losses.ranknet_loss, [0.2, 0.5], [1.0, 0.0], {}, BCE(-0.3)),
    (losses.ranknet_loss, [0.5, 0.2, 0.1], [1.0, 0.0, 0.0], {}, BCE([0.3, 0.4])),
    (losses.ranknet_loss, [0.2, 0.5], [0.0, 1.0], {}, BCE(0.3)),
    (losses.ranknet_loss, [0.2, 0.5], [0.0, 2.0], {}, BCE(0.3)),
    (losses.ranknet_loss, [0.5, 0.2, 0.66], [1.0, 0.0, PAD], {}, BCE(0.3)),
    (losses.ranknet_loss, [0.5, 0.2, 0.1], [2.0, 1.0, 0.0], {"weight_by_diff": True}, BCE([0.3, 0.4, 0.1], [1.0, 2.0, 1.0])),
    (losses.ranknet_loss, [0.5, 0.2, 0.1], [2.0, 1.0, 0.0], {"weight_by_diff_powed": True}, BCE([0.3, 0.4, 0.1], [3.0, 4.0, 1.0])),
]


def _ndcg(y_pred, y_true, k=None):
    """NDCG@k of distinct scores, powered gains (allRank's metric)."""
    s, t = np.array(y_pred), np.array(y_true)
    keep = t != PAD
    s, t = s[keep], t[keep]
    disc = 1 / np.log2(np.arange(len(t)) + 2.0)
    disc[(len(t) if k is None else k):] = 0
    return np.sum((2 ** t[np.argsort(-s)] - 1) * disc) / np.sum((2 ** np.sort(t)[::-1] - 1) * disc)


NEURAL_CASES = [  # allRank's test_neuralndcg: (y_pred, y_true, options); temperature 1e-4 unless given
    ([0.5, 0.2], [1.0, 0.0], {}),
    ([0.5, 0.2, 0.1, 0.4, 1.0, -1.0, 0.63], [1.0, 2.0, 2.0, 4.0, 1.0, 4.0, 3.0], {}),
    ([0.5, -1e30], [1.0, 0.0], {}),
    ([0.5, 0.2, 0.1, 0.4, 1.0, -1.0, 0.63, 1.0, 0.5, 0.3], [1.0, 2.0, 2.0, 4.0, 1.0, 4.0, 3.0, PAD, PAD, PAD], {"temperature": 1e-3}),
    ([0.5, 0.2, 0.1, 0.4, 1.0, -1.0, 0.63], [1.0, 2.0, 2.0, 4.0, 1.0, 4.0, 3.0], {"k": 3}),
]


@pytest.mark.parametrize("case", range(len(ALLRANK_CASES)))
def test_allranks_own_test_cases(case):
    fun, y_pred, y_true, options, expected = ALLRANK_CASES[case]
    # allRank's expectations were computed in float32: its own tests compare with pytest.approx's 1e-6
    assert _allrank(fun, y_pred, y_true, **options) == pytest.approx(expected, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("stochastic", [False, True])
@pytest.mark.parametrize("case", range(len(NEURAL_CASES)))
def test_allranks_neural_ndcg_test_cases(case, stochastic, transposed):
    y_pred, y_true, options = NEURAL_CASES[case]
    options = {"temperature": 1e-4, **options}
    if stochastic:
        options.update(stochastic=True, n_samples=1024, beta=0.001, key=0)
    got = _allrank(losses.neural_ndcg_loss, y_pred, y_true, transposed=transposed, **options)
    assert -got == pytest.approx(_ndcg(y_pred, y_true, options.get("k")), rel=1e-6)


# -- every loss against its reference, on every backend, with ties, padding and lists without a relevant item ----------

def _lists(seed, batch=6, n=7):
    rng = np.random.default_rng(seed)
    s = np.round(rng.normal(size=(batch, n)), 1)  # rounded: tied scores
    t = rng.integers(0, 4, size=(batch, n)).astype(np.float64)
    t[1] = 0.0  # no relevant item
    t[2, :3] = 2.0  # tied labels
    mask = np.ones((batch, n), bool)
    mask[3, 5:] = False  # trailing padding (allRank's layout)
    mask[4, [0, 3]] = False  # padding in the middle
    s[4, 0] = np.nan  # what padding holds changes nothing
    return s, t, mask


LOSSES = {
    "listnet": (losses.listnet_loss, ref_listnet, {}),
    "listnet_eps0": (losses.listnet_loss, lambda s, t: ref_listnet(s, t, 0.0), {"eps": 0.0}),
    "binary_listnet": (losses.binary_listnet_loss, ref_binary_listnet, {}),
    "listmle": (losses.listmle_loss, ref_listmle, {}),
    "ranknet": (losses.ranknet_loss, ref_ranknet, {}),
    "ranknet_diff": (losses.ranknet_loss, lambda s, t: ref_ranknet(s, t, weight_by_diff=True), {"weight_by_diff": True}),
    "ranknet_powed": (losses.ranknet_loss, lambda s, t: ref_ranknet(s, t, weight_by_diff_powed=True), {"weight_by_diff_powed": True}),
    "approx_ndcg": (losses.approx_ndcg_loss, lambda s, t: ref_approx_ndcg(s, t, 2.0), {"alpha": 2.0}),
    "neural_ndcg": (losses.neural_ndcg_loss, lambda s, t: ref_neural_ndcg(s, t, 0.5, k=4), {"temperature": 0.5, "k": 4}),
    "neural_ndcg_transposed": (losses.neural_ndcg_loss, lambda s, t: ref_neural_ndcg(s, t, 2.0, powered=False, transposed=True),
                               {"temperature": 2.0, "powered_relevancies": False, "transposed": True}),
    "smooth_ap": (losses.smooth_ap_loss, lambda s, t: ref_smooth_ap(s, t, 0.5), {"temperature": 0.5}),
}
LOSSES.update({
    f"lambda_{scheme}": (losses.lambda_loss, (lambda sc: lambda s, t: ref_lambda(s, t, sc, k=5, sigma=1.5, mu=3.0))(scheme),
                         {"weighing_scheme": scheme, "k": 5, "sigma": 1.5, "mu": 3.0})
    for scheme in losses.WEIGHING_SCHEMES
})


def _reference(ref, s, t, mask):
    return np.array([ref(s[b][mask[b]], t[b][mask[b]]) for b in range(len(s))])


@pytest.mark.parametrize("name", list(LOSSES))
def test_each_list_equals_the_reference_on_that_list_alone(name):
    fun, ref, options = LOSSES[name]
    s, t, mask = _lists(1)
    assert_allclose(fun(s, t, mask=mask, **options), _reference(ref, s, t, mask), rtol=1e-10, atol=1e-12)


@pytest.mark.eager_backends
@pytest.mark.parametrize("backend_name", CPU_BACKENDS[1:])
def test_every_loss_on_every_host_equals_numpy(backend_name):
    to, run = on_backend(backend_name)
    s, t, mask = _lists(2, batch=5, n=6)
    for name, (fun, _, options) in LOSSES.items():
        got = np.asarray(run(lambda a, b, m: fun(a, b, mask=m, **options), to(s), to(t), to(mask)))
        assert_allclose(got, fun(s, t, mask=mask, **options), rtol=1e-10, atol=1e-12, err_msg=name)


def test_no_valid_entry_is_nan_and_a_list_without_relevant_items_is_the_references_value():
    s, t = np.array([[0.3, 0.1, 0.2], [0.3, 0.1, 0.2]]), np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 2.0]])
    mask = np.array([[True, True, True], [False, False, False]])
    for name, (fun, ref, options) in LOSSES.items():
        got = fun(s, t, mask=mask, **options)
        assert np.isnan(got[1]), name
        assert got[0] == pytest.approx(ref(s[0], t[0]), abs=1e-12), name


def test_stochastic_neural_ndcg_averages_the_gumbel_draws_it_was_given():
    s, t, mask = _lists(3)
    s = np.where(mask, s, 0.0)
    noise = np.random.default_rng(11).gumbel(size=(8,) + s.shape)
    for log_scores in (True, False):
        got = losses.neural_ndcg_loss(s, t, stochastic=True, n_samples=8, key=11, beta=0.3, log_scores=log_scores, mask=mask)
        expected = [ref_neural_ndcg(s[b][mask[b]], t[b][mask[b]], noise=noise[:, b][:, mask[b]], beta=0.3, log_scores=log_scores)
                    for b in range(len(s))]
        assert_allclose(got, expected, rtol=1e-10)


def test_listmle_key_shuffles_tied_labels_only():
    s, t = np.array([[0.4, -0.2, 1.3, 0.1]]), np.array([[1.0, 1.0, 0.0, 1.0]])
    orders = {tuple(np.argsort(-t[0], kind="stable")), (3, 0, 1, 2), (1, 3, 0, 2), (0, 3, 1, 2), (1, 0, 3, 2), (3, 1, 0, 2)}
    values = {round(float(losses.listmle_loss(s, t, key=seed)[0]), 12) for seed in range(40)}
    expected = {round(float(np.sum(np.log(np.cumsum(np.exp(s[0][list(o)] - s.max())[::-1])[::-1] + EPS) - (s[0][list(o)] - s.max()))), 12)
                for o in orders}
    assert values == expected  # every order of the three tied items, and only those


def test_approx_ndcg_on_a_soft_rank_method_tends_to_ndcg():
    s, t = np.array([[0.5, 0.2, 0.1, 0.4, 1.0, -1.0, 0.63]]), np.array([[1.0, 2.0, 2.0, 4.0, 1.0, 4.0, 3.0]])
    for method, options in (("lapsum", {"softness": 1e-4}), ("permutahedron", {"strength": 1e-4})):
        got = losses.approx_ndcg_loss(s, t, method=method, **options)
        assert -got[0] == pytest.approx(_ndcg(s[0], t[0]), rel=1e-6)


@pytest.mark.parametrize("method", ["softsort", "sinkhorn", "diffsort"])
def test_neural_ndcg_on_another_relaxation_tends_to_ndcg(method):
    s, t = np.array([0.5, 0.2, 0.1, 0.4, 1.0, -1.0, 0.63]), np.array([1.0, 2.0, 2.0, 4.0, 1.0, 4.0, 3.0])
    options = {"softsort": {"temperature": 1e-4}, "sinkhorn": {"epsilon": 1e-3},
               "diffsort": {"steepness": 1e4}}[method]
    got = losses.neural_ndcg_loss(np.array(s), np.array(t), method=method, **options)
    assert -float(got) == pytest.approx(_ndcg(s, t), rel=1e-3 if method == "sinkhorn" else 1e-4)


def test_gradients_equal_central_differences_and_skip_padding():
    torch = pytest.importorskip("torch")
    s, t, mask = _lists(4)
    s = np.where(mask, s, 0.3) + 1e-3 * np.arange(s.shape[-1])  # no tied scores: LambdaLoss's positions jump there
    w = np.array([0.7, -1.3, 0.4, 1.1, 0.9, -0.5])
    for name, (fun, ref, options) in LOSSES.items():
        x = torch.tensor(s, requires_grad=True)
        (torch.sum(fun(x, torch.tensor(t), mask=torch.tensor(mask), **options) * torch.tensor(w))).backward()
        fd = np.zeros_like(s)
        for b in range(len(s)):
            keep = np.flatnonzero(mask[b])
            for i in keep:
                e = np.zeros(len(keep))
                e[list(keep).index(i)] = 1
                fd[b, i] = w[b] * reference.central_difference(lambda z: ref(z, t[b][keep]), s[b][keep], e)
        assert_allclose(x.grad.numpy(), fd, rtol=1e-5, atol=1e-7, err_msg=name)


def test_jax_gradients_equal_torch():
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    s, t, mask = _lists(5)
    for name, (fun, _, options) in LOSSES.items():
        x = torch.tensor(s, requires_grad=True)
        torch.sum(fun(x, torch.tensor(t), mask=torch.tensor(mask), **options)).backward()
        g = jax.jit(jax.grad(lambda a: fun(a, jax.numpy.asarray(t), mask=jax.numpy.asarray(mask), **options).sum()))(jax.numpy.asarray(s))
        assert_allclose(np.asarray(g), x.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


def test_pairwise_memory_is_quadratic_not_cubic():
    """A batch of 64 lists of 256: the pairs are 4 M entries, a cube would be 1 G; tracemalloc sees the peak."""
    import tracemalloc

    rng = np.random.default_rng(6)
    s, t = rng.normal(size=(64, 256)), rng.integers(0, 5, size=(64, 256)).astype(np.float64)
    for fun in (losses.ranknet_loss, losses.lambda_loss, losses.approx_ndcg_loss, losses.smooth_ap_loss):
        tracemalloc.start()
        fun(s, t)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 20 * 64 * 256 * 256 * 8, (fun.__name__, peak)


def test_bad_arguments_raise_clear_errors():
    s, t = np.zeros((2, 3)), np.zeros((2, 3))
    with pytest.raises(ValueError, match="weighing_scheme must be one of"):
        losses.lambda_loss(s, t, weighing_scheme="ndcgLoss1_scheme")
    with pytest.raises(ValueError, match="reduction_log"):
        losses.lambda_loss(s, t, reduction_log="ten")
    with pytest.raises(ValueError, match="k must be None or an int"):
        losses.lambda_loss(s, t, k=0)
    with pytest.raises(ValueError, match="method must be one of"):
        losses.neural_ndcg_loss(s, t, method="lapsum")
    with pytest.raises(ValueError, match="temperature must be > 0"):
        losses.neural_ndcg_loss(s, t, temperature=0.0)
    with pytest.raises(ValueError, match="method must be 'sigmoid'"):
        losses.approx_ndcg_loss(s, t, method="magic")
    with pytest.raises(TypeError, match="takes no options"):
        losses.approx_ndcg_loss(s, t, strength=0.1)
    with pytest.raises(ValueError, match="same shape"):
        losses.listnet_loss(s, t[:, :2])
    with pytest.raises(TypeError, match="bool"):
        losses.ranknet_loss(s, t, weight_by_diff=1)
    with pytest.raises(ValueError, match="temperature"):
        losses.smooth_ap_loss(s, t, temperature=-1.0)


def test_a_non_finite_valid_score_or_label_gives_a_nan_list_quietly_with_a_zero_gradient():
    """As every loss: NaN for that list alone, no NumPy RuntimeWarning (the suite makes them errors), gradient 0 there."""
    torch = pytest.importorskip("torch")
    s, t, mask = _lists(7)
    s, t = np.where(mask, s, 0.5), t.copy()
    s[0, 1], s[1, 2], t[2, 3], s[3, 0] = np.nan, np.inf, np.nan, -np.inf  # list 3's entry 0 is valid; list 4's padding holds NaN
    for name, (fun, _, options) in LOSSES.items():
        got = fun(s, t, mask=mask, **options)
        assert np.isnan(got[:4]).all() and np.isfinite(got[4:]).all(), name
        assert_allclose(got[4:], fun(s[4:], t[4:], mask=mask[4:], **options), rtol=0, atol=0, err_msg=name)
        x = torch.tensor(s, requires_grad=True)
        torch.nansum(fun(x, torch.tensor(t), mask=torch.tensor(mask), **options)).backward()
        assert (x.grad[:4] == 0).all() and torch.isfinite(x.grad).all(), name


def test_torch_func_transforms_and_empty_batches():
    """torch.func.grad equals autograd, torch.func.vmap equals the batch; a (0, n) batch has a (0,) value and gradient,
    on torch and under jax.jit."""
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    from torch.func import grad, vmap

    s, t, mask = _lists(8)
    s = np.where(mask, s, 0.1) + 1e-3 * np.arange(s.shape[-1])
    x, y, m = torch.tensor(s), torch.tensor(t), torch.tensor(mask)
    for name, (fun, _, options) in LOSSES.items():
        leaf = x.clone().requires_grad_(True)
        fun(leaf, y, mask=m, **options).sum().backward()
        torch.testing.assert_close(grad(lambda a: fun(a, y, mask=m, **options).sum())(x), leaf.grad, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(vmap(lambda a, b, c: fun(a, b, mask=c, **options))(x, y, m), fun(x, y, mask=m, **options),
                                   rtol=1e-10, atol=1e-12)
        empty = torch.zeros(0, 5, dtype=torch.float64, requires_grad=True)
        fun(empty, empty.detach(), **options).sum().backward()
        assert empty.grad.shape == (0, 5), name
        jnp = jax.numpy
        value, g = jax.jit(jax.value_and_grad(lambda a: fun(a, jnp.zeros((0, 5)), **options).sum()))(jnp.zeros((0, 5)))
        assert float(value) == 0.0 and g.shape == (0, 5), name
