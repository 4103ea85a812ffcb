"""Backend selection shared by tests/ and conformance/.

``pytest --backend torch --backend jax`` restricts the run; by default every
known backend is collected and the ones not usable here (not installed, or
CuPy without a GPU) are skipped with the reason. Set
``RANKOPS_REQUIRE_BACKENDS=numpy,torch,...`` (CI does) to turn such a skip
into a failure, so that a missing install can never pass silently.
"""

from __future__ import annotations

import os
import sys

import pytest

from rankops._lib._backends import BACKENDS, device_label, get_backend

try:  # float64 JAX arrays for finite differences; must precede any JAX work
    import jax

    jax.config.update("jax_enable_x64", True)
    # Compile time dominates JAX tests on tiny arrays; XLA's optimisation passes cost a
    # fifth of it. Values are compared with tolerances, and the benchmark smoke test and
    # the demo run rankops under JAX's default (optimised) compilation in subprocesses;
    # RANKOPS_JAX_OPTIMIZE=1 runs the whole suite optimised.
    if not os.environ.get("RANKOPS_JAX_OPTIMIZE"):
        jax.config.update("jax_disable_most_optimizations", True)
except ImportError:
    pass


if os.environ.get("PYTEST_XDIST_WORKER"):
    # One pytest-xdist worker per core: torch's OpenMP pool would otherwise put two
    # threads per worker on each core, and its small-block loops slow down badly.
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        action="append",
        default=None,
        choices=[b.name for b in BACKENDS],
        help="run backend-parametrised tests on this backend only (repeatable; default: all installed)",
    )


def _selected(config: pytest.Config) -> list:
    names = config.getoption("--backend")
    return [get_backend(n) for n in names] if names else list(BACKENDS)


def _required() -> set[str]:
    return {n.strip() for n in os.environ.get("RANKOPS_REQUIRE_BACKENDS", "").split(",") if n.strip()}


def pytest_configure(config: pytest.Config) -> None:
    missing = {n: get_backend(n).unavailable_reason() for n in sorted(_required())}
    missing = {n: r for n, r in missing.items() if r is not None}
    if missing:
        raise pytest.UsageError(f"RANKOPS_REQUIRE_BACKENDS names unusable backends: {missing}")


# markers whose tests run only when ``-m`` names them (docs/testing.md), with the reason shown otherwise
_OPT_IN = {
    "scripts": "end-to-end script run: select with `pytest -m scripts` (docs/testing.md)",
    "slow": "the 10^5-inputs property tier (hours of CPU): select with `pytest -m slow` (docs/testing.md)",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Script runs (``scripts``) take minutes and the large property tier (``slow``) hours: they run when ``-m`` selects them, and are listed as skipped otherwise."""
    markexpr = config.getoption("markexpr") or ""
    for marker, reason in _OPT_IN.items():
        if marker in markexpr:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    for b in _selected(config):
        reason = b.unavailable_reason()
        lines.append(f"rankops backend {b.name}: " + (f"{b.version}" if reason is None else f"skipped ({reason})"))
    return lines


# Fixture name -> which backends it is parametrised over.
_BACKEND_FIXTURES = {
    "backend": lambda b: True,
    "autodiff_backend": lambda b: b.autodiff,
    "jax_backend": lambda b: b.name == "jax",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise a backend fixture (and ``device`` jointly, when asked for).

    ``backend`` runs on every selected backend, ``autodiff_backend`` on those
    with autodiff (torch, JAX), ``jax_backend`` on JAX alone. Selected but
    unusable backends stay in the list as skips that give the reason.
    """
    names = [n for n in _BACKEND_FIXTURES if n in metafunc.fixturenames]
    if not names:
        return
    (name,) = names
    with_device = "device" in metafunc.fixturenames
    params = []
    for b in filter(_BACKEND_FIXTURES[name], _selected(metafunc.config)):
        reason = b.unavailable_reason()
        if reason is not None:
            skip = pytest.mark.skip(reason=f"{b.name}: {reason}")
            params.append(pytest.param(*((b, None) if with_device else (b,)), id=b.name, marks=skip))
        elif with_device:
            params += [pytest.param(b, d, id=f"{b.name}-{device_label(d)}") for d in b.devices()]
        else:
            params.append(pytest.param(b, id=b.name))
    metafunc.parametrize((name, "device") if with_device else name, params)



_MAPS = "/proc/self/maps"  # Linux; elsewhere no such per-process limit applies
_MAPS_BUDGET = 30_000  # about half of the default vm.max_map_count (65,530)


@pytest.fixture(autouse=True)
def _release_jax_executables():
    """Drop JAX's compiled executables once they hold too many memory mappings.

    XLA's CPU executables keep three mappings per compiled kernel for as long
    as their cache entries live, and a test run compiles thousands (hypothesis
    draws many shapes and options; eager JAX compiles each op per shape):
    one pytest-xdist worker used to reach Linux's ``vm.max_map_count`` and
    segfault in XLA's next compile. Clearing costs only recompiles.
    """
    yield
    jax = sys.modules.get("jax")
    if jax is not None and os.path.exists(_MAPS):
        with open(_MAPS, "rb") as maps:
            if maps.read().count(b"\n") > _MAPS_BUDGET:
                jax.clear_caches()
