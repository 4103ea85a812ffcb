"""Conformance fixtures; backend selection lives in the repository's root conftest."""

from __future__ import annotations

import pytest

from .operators import CASES, Case


@pytest.hookimpl(tryfirst=True)  # before the root conftest deselects the opt-in tiers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a backend that compiles per option set, an option variant's checks beyond ``every_variant`` ones go to the ``exhaustive`` tier.

    JAX compiles each operator variant for each check's shape, dtype and
    transformation; the checks are the same array-API code whatever the
    option (descending, block, top-k...), and run on every variant on the
    other backends. On JAX every (operator, method) pair's primary variant runs
    every check, and every variant its ``every_variant`` checks (values
    against NumPy); ``pytest -m exhaustive`` runs the rest (.ci/run's second step).
    A check marked ``eager_backends`` is exhaustive on such a backend for every variant (the root conftest).
    So are a ready loss's hostile inputs there (``test_properties``): a loss
    is array arithmetic over the operators, whose own hostile inputs run on
    JAX in the default tier, and its value and gradient on JAX are checked by
    its own tests; the default tier keeps its hostile inputs on every other backend.
    """
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        op, backend = params.get("op"), next((params[f] for f in ("backend", "autodiff_backend", "eager_backend", "jax_backend") if f in params), None)
        if not hasattr(backend, "compiles"):  # no backend, or none selected for this fixture (pytest's empty-parameter set)
            backend = None
        if backend is not None and backend.compiles and str(getattr(params.get("spec"), "name", "")).startswith("losses."):
            item.add_marker(pytest.mark.exhaustive)
            continue
        if not isinstance(op, Case) or backend is None or op.primary or not backend.compiles or item.get_closest_marker("every_variant"):
            continue
        item.add_marker(pytest.mark.exhaustive)


@pytest.fixture(params=CASES, ids=lambda op: op.name)
def op(request):
    """Every registered operator (tests may narrow it with their own parametrize)."""
    return request.param


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Counts of the inputs the property suite tried, per backend (docs/reliability.md quotes them)."""
    import json
    import os

    from .strategies import TRIED

    if not TRIED:
        return
    backends = sorted({b for b, _ in TRIED})
    whats = sorted({w for _, w in TRIED}, key=lambda w: (not w.startswith(("inputs", "rows", "gradients")), w))
    terminalreporter.write_sep("=", "property suite: inputs tried per backend")
    terminalreporter.write_line(f"{'':34}" + "".join(f"{b:>18}" for b in backends))
    for what in whats:
        terminalreporter.write_line(f"{what:34}" + "".join(f"{TRIED.get((b, what), 0):>18}" for b in backends))
    path = os.environ.get("RANKOPS_PROPERTY_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump({b: {w: TRIED.get((b, w), 0) for w in whats} for b in backends}, f, indent=1)


# -- pytest-xdist: each worker counts its own inputs; the controller adds them up -----------------


def pytest_sessionfinish(session):
    import json

    from .strategies import TRIED

    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker
        workeroutput["rankops_tried"] = json.dumps([[b, w, c] for (b, w), c in TRIED.items()])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    import json

    from .strategies import TRIED

    for b, w, c in json.loads(getattr(node, "workeroutput", {}).get("rankops_tried", "[]")):
        TRIED[(b, w)] += c
