"""Backend selection shared by tests/ and conformance/.

``pytest --backend torch --backend jax`` restricts the run; by default every
usable backend is collected, and the ones not usable here (not installed, or
CuPy without a GPU) are reported once each, as a skip that gives the reason
(``conformance/test_backends.py``). Set
``RANKOPS_REQUIRE_BACKENDS=numpy,torch,...`` (CI does) to turn such a skip
into a failure, so that a missing install can never pass silently.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.util import find_spec
from typing import Any


def _share_bytecode_within_the_run() -> str | None:
    """Where ``PYTHONDONTWRITEBYTECODE`` is set (this project's CI machine sets it), the first process of a run
    writes its imports' bytecode to a directory of its own (``PYTHONPYCACHEPREFIX``), which its pytest-xdist
    workers and the subprocesses its tests start inherit and read; that process removes the directory when the
    run ends (``pytest_unconfigure``). Nothing is written beside the sources. Returns the directory, or None in
    every other process and where bytecode is written (or kept from being written) as the user set it.

    Without bytecode, every process of a run compiles the modules it imports (torch, JAX, SciPy, Dask) from
    source: about twice as long as reading them (docs/testing.md, "A run shares its bytecode")."""
    if not sys.dont_write_bytecode or sys.pycache_prefix is not None or os.environ.get("PYTHONPYCACHEPREFIX"):
        return None
    # in memory where Linux offers it: writing to this machine's disk made importing torch 70% slower than not writing
    prefix = tempfile.mkdtemp(prefix="rankops-test-bytecode-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix, sys.dont_write_bytecode = prefix, False
    return prefix


_BYTECODE = _share_bytecode_within_the_run()

# The test suite's XLA compilation (docs/testing.md). Compiling, not running, is most of a JAX
# test's time: thousands of small programs, each run on a few numbers. JAX's
# `jax_disable_most_optimizations` skips XLA's optimisation passes, and XLA's CPU code generator
# without its newer fusion emitters compiles the rest 2.3x faster (twelve soft-rank / quantile /
# permutahedron / isotonic / LapSum / top-k programs and their gradients: 8.8 s -> 3.9 s on
# jaxlib 0.10.2). Codegen in one piece: XLA splits a program's code generation over threads, which on
# this suite's one worker per core only contend with the other worker (ten soft-rank, isotonic and
# quantile programs on one core: 7.2-7.9 s -> 5.6-5.7 s). XLA exits the process on a flag it does
# not know (before pytest can print a word: a GPU machine's newer jaxlib did), and jaxlib adds and
# drops such flags between releases: the flags are tried once per run, in a subprocess.
# The probe starts before this module's other imports, and runs beside them.
_TEST_XLA_FLAGS = ("--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")
# set by the first process of a run, whose pytest-xdist workers inherit it: whether XLA takes them
_FLAGS_TAKEN = "RANKOPS_TEST_XLA_FLAGS_TAKEN"


def _ask_whether_xla_takes_test_flags() -> subprocess.Popen | None:
    """A subprocess that starts JAX with ``_TEST_XLA_FLAGS`` (its exit status is the answer), where this run has not
    asked yet; None where it has, or JAX is absent or compiles as users do (``RANKOPS_JAX_OPTIMIZE``)."""
    if _FLAGS_TAKEN in os.environ or os.environ.get("RANKOPS_JAX_OPTIMIZE") or find_spec("jax") is None:
        return None
    env = {**os.environ, "XLA_FLAGS": " ".join(_TEST_XLA_FLAGS), "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen([sys.executable, "-c", "import jax; jax.devices()"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


_FLAGS_PROBE = _ask_whether_xla_takes_test_flags()

import pytest  # noqa: E402

from conformance.memory import (  # noqa: E402
    MAPPINGS_BETWEEN_GROUPS,
    MAPPINGS_WITHIN_A_GROUP,
    defer_full_collections,
    release_compiled_programs,
)
from rankops._lib._backends import BACKENDS, device_label, get_backend  # noqa: E402

# each failure's traceback written as it happens, where RANKOPS_FAILURE_LOG names a file (.ci/gpu sets it)
pytest_plugins = ("conformance.failure_log",)


def _xla_takes_test_flags() -> bool:
    """Whether this jaxlib's XLA starts with ``_TEST_XLA_FLAGS``: the answer of the probe started on this module's
    import (once per run: the first process asks)."""
    if _FLAGS_TAKEN not in os.environ:
        taken = _FLAGS_PROBE is not None and _FLAGS_PROBE.wait(timeout=120) == 0
        os.environ[_FLAGS_TAKEN] = "1" if taken else "0"
    return os.environ[_FLAGS_TAKEN] == "1"


def _start_jax_for_tests(jax: Any) -> None:
    """x64 (float64 for finite differences), and the test-time compilation, set before JAX's backend starts.

    XLA reads ``XLA_FLAGS`` once, when the backend starts: the flags are set
    for that moment only, so subprocesses (the demo, the benchmark smoke run)
    keep JAX's default compilation; flags the caller set come last and win.
    ``RANKOPS_JAX_OPTIMIZE=1`` runs the suite under JAX's default, optimised
    compilation instead.
    """
    jax.config.update("jax_enable_x64", True)
    if os.environ.get("RANKOPS_JAX_OPTIMIZE"):
        return
    jax.config.update("jax_disable_most_optimizations", True)
    if not _xla_takes_test_flags():
        return
    before = os.environ.get("XLA_FLAGS")
    os.environ["XLA_FLAGS"] = " ".join((*_TEST_XLA_FLAGS, before or ""))
    try:
        jax.devices()
    finally:
        if before is None:
            del os.environ["XLA_FLAGS"]
        else:
            os.environ["XLA_FLAGS"] = before


try:
    import jax
except ImportError:
    pass
else:
    _start_jax_for_tests(jax)


# a test process's full collections only where it drops JAX's programs (conformance/memory.py)
defer_full_collections()

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One pytest-xdist worker per core: torch's OpenMP pool would otherwise put two
    # threads per worker on each core, and its small-block loops slow down badly.
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The run is over: what the process holds is frozen out of the cycle collector (``gc.freeze``) before pytest's own
    exit-time full collection (which looks for exceptions raised in finalizers), which in a worker would rescan every
    program it compiled: 5 s at the end of README's run, on both workers, before their processes may exit."""
    gc.freeze()
    if _BYTECODE is not None:
        shutil.rmtree(_BYTECODE, ignore_errors=True)


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


def _named(config: pytest.Config) -> set[str]:
    """Backends the caller asked for by name (``--backend``, ``RANKOPS_REQUIRE_BACKENDS``)."""
    return set(config.getoption("--backend") or ()) | _required()


def _required() -> set[str]:
    return {n.strip() for n in os.environ.get("RANKOPS_REQUIRE_BACKENDS", "").split(",") if n.strip()}


def pytest_configure(config: pytest.Config) -> None:
    missing = {n: get_backend(n).unavailable_reason() for n in sorted(_required())}
    missing = {n: r for n, r in missing.items() if r is not None}
    if missing:
        raise pytest.UsageError(f"RANKOPS_REQUIRE_BACKENDS names unusable backends: {missing}")
    _compute_dask_in_the_calling_thread()


def _compute_dask_in_the_calling_thread() -> None:
    """Dask's tests compute on its synchronous scheduler.

    The tests' graphs are a few chunks of (3, 2, 7)-sized arrays: the threaded
    scheduler's pool only hands each task to a thread and back, and its threads
    contend with the other pytest-xdist worker on a 2-core machine. The values
    are the same on every scheduler (the tasks are the same NumPy calls);
    ``tests/test_distributed.py`` computes on a real cluster of processes, whose
    client sets itself as the scheduler while it is open.
    """
    try:
        import dask
    except ImportError:
        return
    dask.config.set(scheduler="synchronous")


# markers whose tests run only when ``-m`` names them (docs/testing.md)
_OPT_IN = ("scripts", "slow", "exhaustive", "compiled")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The opt-in tiers run when ``-m`` names them and are otherwise deselected (counted as such in pytest's summary).

    ``scripts``: whole example and benchmark scripts (minutes); ``slow``: the
    property suite's large tier (hours); ``exhaustive``: conformance's option
    variants through every check on JAX (conformance/conftest.py);
    ``compiled``: torch.compile of the operators (tests/test_compile.py).
    """
    for item in items:
        _mark_variants_beyond_the_kept_ones(item)
        _mark_eager_checks(item)
    markexpr = config.getoption("markexpr") or ""
    opted_out = [m for m in _OPT_IN if m not in markexpr]
    kept, dropped = [], []
    for item in items:
        (dropped if any(m in item.keywords for m in opted_out) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _mark_variants_beyond_the_kept_ones(item: pytest.Item) -> None:
    """``@pytest.mark.variants_on_jax(name=(kept values), ...)``: on a backend that compiles per option set (JAX), a
    case whose parameter ``name`` takes another value is ``exhaustive``.

    For a test parametrised over option values that are Python numbers or flags (a quantile level, a block
    size): JAX compiles a program for each, while the code is the same array-API code whatever the value, and
    runs for every value on the other backends; the kept values still trace each path under ``jit``.
    """
    marker = item.get_closest_marker("variants_on_jax")
    params = getattr(getattr(item, "callspec", None), "params", {})
    if marker is None or not _on_a_compiling_backend(item):
        return
    if any(name in params and params[name] not in kept for name, kept in marker.kwargs.items()):
        item.add_marker(pytest.mark.exhaustive)


def _mark_eager_checks(item: pytest.Item) -> None:
    """``@pytest.mark.eager_backends``: on a backend that compiles per shape and option set (JAX), the check is
    ``exhaustive``.

    For a check that the eager backends run in the default run, whose JAX case compiles programs of its own (a row
    length and option set each): rankops' own array code, the same on every backend (a rule, a conversion, a numeric
    reference), and the p-norm fits, float32 precisions and regressions on long and hostile rows. In the default run
    JAX's own routes (``jit``, ``grad``, ``vmap``, the fits that read no values) are conformance's, for every operator,
    and the tests written for JAX check its transforms (docs/testing.md, "Tiers and time").
    """
    if item.get_closest_marker("eager_backends") is not None and _on_a_compiling_backend(item):
        item.add_marker(pytest.mark.exhaustive)


# the backends that compile per shape and option set, by name (JAX)
_COMPILING = {b.name for b in BACKENDS if b.compiles}


def _on_a_compiling_backend(item: pytest.Item) -> bool:
    """Whether a test case runs on a backend that compiles per shape and option set: its parameter ids name one, as
    :func:`jax_scope` reads them (a backend fixture's id, ``"jax-cpu:0"``; a backend's name however a test passes it,
    ``"jax"``, ``"jax-jit"``, ``"p=3/2-jax-f32"``)."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and not _COMPILING.isdisjoint(callspec.id.split("-"))


# the parameter ids that name a backend's device, a dtype or a shard, not what a test is about
_NOT_A_SUBJECT = re.compile(r"jax|cpu:\d+|cuda:\d+|float\d+|\d+")


def jax_scope(nodeid: str) -> str | None:
    """``jax::<operator>`` for a conformance test on JAX, ``jax::<module>`` for another test on JAX, else None.

    Read from the node id alone (``path::name[ids]``), as pytest-xdist's
    controller, which schedules the tests, sees them.
    """
    path, _, rest = nodeid.partition("::")
    name, _, ids = rest.partition("[")
    tokens = ids[:-1].split("-") if ids.endswith("]") else []
    if "jax" not in tokens and "jax" not in name.lower():
        return None
    if not path.startswith("conformance/"):
        return f"jax::{path}"
    return "jax::" + "-".join(t for t in tokens if not _NOT_A_SUBJECT.fullmatch(t))


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist not installed: one process, nothing to schedule
    pass
else:

    class _JaxScopes(LoadScopeScheduling):
        """pytest-xdist's ``load`` schedule, with the tests of one operator on JAX (one module, outside conformance/) sent to one worker.

        JAX compiles every new function, shape and option set, and compiling is
        most of a JAX test's time: on one worker, the second test to need a
        compiled function finds it in that worker's cache. Every other test goes
        with the next few of its test function (``CHUNK``), a unit of work small
        enough that the workers finish together. (pytest-xdist's ``--dist loadgroup``
        would do this with marks, but it renames node ids in a way pytest 9.2
        no longer reads.)

        The controller shares the two cores with the workers, and pytest-xdist's
        scope schedule costs it per test: a message to a worker per unit, and a
        count over every unit a worker has been given (``_pending_of``) after each
        test, which grows with the run. Units of a few tests, and a worker's
        finished units dropped from its count, keep both small.
        """

        CHUNK = 16

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            self._scopes: dict[str, str] = {}
            self._sizes: dict[str, int] = {}

        def _split_scope(self, nodeid: str) -> str:
            scope = self._scopes.get(nodeid)
            if scope is None:  # first asked in collection order (``schedule``), so the chunks are the same on every call
                scope = jax_scope(nodeid)
                if scope is None:
                    function = nodeid.partition("[")[0]
                    count = self._sizes[function] = self._sizes.get(function, 0) + 1
                    scope = f"{function}#{(count - 1) // self.CHUNK}"
                self._scopes[nodeid] = scope
            return scope

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            nodeid = self.registered_collections[node][item_index]
            work, scope = self.assigned_work[node], self._split_scope(nodeid)
            work[scope][nodeid] = True
            if all(work[scope].values()):
                del work[scope]
            self._reschedule(node)

    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        return _JaxScopes(config, log) if config.getvalue("dist") == "load" else None


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    for b in _selected(config):
        reason = b.unavailable_reason()
        lines.append(f"rankops backend {b.name}: " + (f"{b.version}" if reason is None else f"not usable here ({reason})"))
    return lines


# Fixture name -> which backends it is parametrised over.
_BACKEND_FIXTURES = {
    "backend": lambda b: True,
    "autodiff_backend": lambda b: b.autodiff,
    "eager_backend": lambda b: not b.compiles,
    "jax_backend": lambda b: b.name == "jax",
    "torch_backend": lambda b: b.name == "torch",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise a backend fixture (and ``device`` jointly, when asked for).

    ``backend`` runs on every selected backend, ``autodiff_backend`` on those
    with autodiff (torch, JAX), ``eager_backend`` on those that do not compile
    per shape and option set (all but JAX), ``jax_backend`` on JAX alone,
    ``torch_backend`` on torch alone. A backend not
    usable here is left out (``conformance/test_backends.py`` reports it once,
    as a skip that gives the reason), unless the caller named it with
    ``--backend``: then each of its tests is a skip that gives the reason.
    A test whose every backend is left out is one skip, not an error.
    """
    names = [n for n in _BACKEND_FIXTURES if n in metafunc.fixturenames]
    if not names:
        return
    (name,) = names
    with_device = "device" in metafunc.fixturenames
    named = _named(metafunc.config)
    params = []
    for b in filter(_BACKEND_FIXTURES[name], _selected(metafunc.config)):
        reason = b.unavailable_reason()
        if reason is not None:
            if b.name in named:
                skip = pytest.mark.skip(reason=f"{b.name}: {reason}")
                params.append(pytest.param(*((b, None) if with_device else (b,)), id=b.name, marks=skip))
        elif with_device:
            params += [pytest.param(b, d, id=f"{b.name}-{device_label(d)}") for d in b.devices()]
        else:
            params.append(pytest.param(b, id=b.name))
    metafunc.parametrize((name, "device") if with_device else name, params)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After a test on JAX: drop compiled programs when the process holds too many memory mappings.

    XLA's CPU executables hold mappings while cached, and a worker that
    compiles thousands of programs once reached Linux's vm.max_map_count and
    segfaulted in XLA's next compile (conformance/memory.py).
    The budget is lower at the end of a test group (jax_scope) than within
    one, whose next tests would recompile what a clear drops. Counting reads a
    line per mapping, so only tests on JAX count.
    """
    scope = jax_scope(item.nodeid)
    if scope is None:
        return
    same_group = nextitem is not None and jax_scope(nextitem.nodeid) == scope
    release_compiled_programs(MAPPINGS_WITHIN_A_GROUP if same_group else MAPPINGS_BETWEEN_GROUPS)
