"""The private core: namespace resolution, dtype rules, axis handling, the demo."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

import rankops
from rankops.__main__ import main, run_demo
from rankops._lib._calls import INPUT, LEVELS, REDUCED, VALUE, prepare
from rankops._lib._backends import BACKENDS, get_backend


def test_prepare_moves_axis_last_and_back_without_copying_data():
    x = np.arange(24.0).reshape(2, 3, 4)
    p = prepare(x, axis=1)
    assert p.x.shape == (2, 4, 3) and p.n == 3 and p.axis == 1
    assert np.shares_memory(p.x, x)  # a view: nothing is copied or written


def test_prepare_dtype_rules():
    assert prepare(np.array([1, 2])).x.dtype == np.float64
    assert prepare(np.array([True])).x.dtype == np.float64
    p16 = prepare(np.array([1.0], dtype=np.float16))
    assert p16.x.dtype == np.float32 and p16.out_dtype == np.float16


@pytest.mark.parametrize("axis", [0, 1, -1, (0, 2), (1, 2), (0, 1, 2)])
def test_layout_maps_every_role_both_ways(axis):
    """Layout.to_core / to_caller against np.moveaxis + reshape, and each the other's inverse."""
    x = np.arange(24.0, dtype=np.float16).reshape(2, 3, 4)
    axes = tuple(sorted(a % 3 for a in ((axis,) if isinstance(axis, int) else axis)))
    batch = tuple(x.shape[a] for a in range(3) if a not in axes)
    p = prepare(x, axis=axis)
    lay = p.layout
    expected = np.moveaxis(x, axes, tuple(range(-len(axes), 0))).reshape(batch + (-1,)).astype(np.float32)
    np.testing.assert_array_equal(p.x, expected)
    np.testing.assert_array_equal(lay.to_caller(p.x), x)  # INPUT: the gradient of x lands in x's layout
    assert lay.to_caller(p.x, VALUE).dtype == np.float16  # outputs go back to the caller's dtype
    # an output of another length (num_targets = 5) or of quantile levels: one axis at the first operator axis
    for role, m in ((VALUE, 5), (LEVELS, p.n)):
        out = np.arange(math.prod(batch) * m, dtype=np.float32).reshape(batch + (m,))
        caller = lay.to_caller(out, role)
        np.testing.assert_array_equal(caller, np.moveaxis(out, -1, axes[0]))
        back = lay.to_core(caller, role)
        assert back.dtype == np.float32
        np.testing.assert_array_equal(back, out)
    reduced = np.ones(batch, dtype=np.float32)
    np.testing.assert_array_equal(lay.to_core(lay.to_caller(reduced, REDUCED), REDUCED), reduced)
    assert lay.to_core(x, INPUT).shape == expected.shape


def test_core_imports_no_framework():
    """Importing rankops and running it on NumPy loads neither torch nor jax."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, rankops\n"
        "rankops.soft_rank(np.arange(5.0), method='softsort'); rankops.softsort(np.arange(3.0), hard=True)\n"
        "bad = [m for m in ('torch', 'jax', 'dask', 'cupy', 'array_api_strict') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_torch_calls_leave_torch_broadcast_shapes_alone(monkeypatch):
    """array-api-compat's ``broadcast_arrays`` on torch calls ``torch.broadcast_shapes``, whose first call imports
    SymPy (two seconds of a user's first soft rank): the operators that broadcast work out the shape themselves."""
    torch = pytest.importorskip("torch")

    def refuse(*shapes):
        raise AssertionError("torch.broadcast_shapes called")

    monkeypatch.setattr(torch, "broadcast_shapes", refuse)
    x = torch.randn(2, 6, dtype=torch.float64)
    for kw in ({"regularization": "kl"}, {"regularization": "lp", "p": 1.5}):
        rankops.soft_rank(x, method="permutahedron", **kw)
    rankops.isotonic_regression(x, weights=torch.ones(6, dtype=torch.float64))
    rankops.soft_kendall_tau(x, x[:1])
    with pytest.raises(ValueError, match="broadcastable"):
        rankops.soft_kendall_tau(x, x[:, :4])


def test_get_backend_unknown():
    with pytest.raises(ValueError, match="unknown backend"):
        get_backend("tensorflow")


def test_cupy_skips_cleanly_without_gpu():
    reason = get_backend("cupy").unavailable_reason()
    try:
        import cupy

        has_gpu = cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        has_gpu = False
    assert (reason is None) == has_gpu


@pytest.mark.scripts  # the whole demo, every method on every backend and device: an example's run
def test_demo_runs_every_installed_backend():
    out = io.StringIO()
    assert run_demo(out=out, size=(2, 30), repeats=1) == 0  # the timing at a tiny size
    text = out.getvalue()
    for b in BACKENDS:
        assert b.name in text
    assert "0 failure(s)" in text
    assert "no autodiff" not in text  # every backend shows a gradient (rankops.vjp without autodiff)
    for method in rankops.sorting.METHODS:  # every method: values on each backend, and one line of times
        assert sum(line.split()[2:3] == [method] for line in text.splitlines()) == sum(len(b.devices()) for b in BACKENDS
                                                                                       if b.unavailable_reason() is None)
        assert any(line.startswith(method) and line.count(" ms") >= 2 for line in text.splitlines())


def test_demo_exits_nonzero_when_a_backend_fails(monkeypatch):
    """A backend whose call raises is reported and turns the exit status to 1."""
    real = rankops.soft_sort

    def broken_off_numpy(x, **kw):
        if not isinstance(x, np.ndarray):
            raise RuntimeError("simulated backend failure")
        return real(x, **kw)

    monkeypatch.setattr(rankops, "soft_sort", broken_off_numpy)
    out = io.StringIO()
    assert run_demo(["numpy", "array_api_strict"], out=out, size=None) == 1
    assert "FAILED: RuntimeError: simulated backend failure" in out.getvalue()


def test_demo_cli_selects_backend(capsys):
    assert main(["--backend", "numpy", "--size", "2", "20"]) == 0
    text = capsys.readouterr().out
    assert "numpy" in text and "torch" not in text


def test_public_names():
    for name in ("soft_rank", "soft_sort", "softsort", "neuralsort"):
        assert callable(getattr(rankops, name))


def test_the_backend_protocol_names_each_method_required_or_a_speed_up():
    """Every method of the adapter protocol is in exactly one of its two parts, and the backends with their own
    autodiff (torch, JAX) override every autodiff and loop method of the required part."""
    import inspect

    from rankops._lib._adapters import _generic

    methods = {n for n, v in vars(_generic.PortableAdapter).items() if inspect.isfunction(v) and not n.startswith("_")}
    required, speed_ups = set(_generic.REQUIRED), set(_generic.SPEED_UPS)
    assert not required & speed_ups
    assert methods == required | speed_ups, (methods - required - speed_ups, required | speed_ups - methods)
    for name in ("torch", "jax"):
        pytest.importorskip(name)
        adapter = type(rankops._lib._adapters.get_adapter(get_backend(name).namespace()))
        assert adapter.autodiff
        own = {n for cls in adapter.__mro__ if cls is not _generic.PortableAdapter and cls is not object for n in vars(cls)}
        assert {"stop_gradient", "custom_vjp", "autodiff_vjp", "is_concrete", "iterate", "repeat", "unless", "scan_blocks"} <= own


def test_one_word_for_a_backend():
    """The library an array comes from is a *backend* everywhere in the source; *host* means only the CPU side of
    a device (a host sync, a host callback), so a reader meets one word per idea."""
    import pathlib
    import re

    root = pathlib.Path(rankops.__file__).parent
    cpu_side = re.compile(r"\bhosts? (sync|syncs|callback|callbacks|reads?)\b")
    found = [f"{p.relative_to(root)}:{i}: {line.strip()}" for p in sorted(root.rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\bhost(s|'s|s')?\b", cpu_side.sub("", line), re.IGNORECASE)
             or re.search(r"\bbackends? (sync|syncs|callback|callbacks)\b", line)]  # the CPU side under the other word
    assert not found, "\n".join(found)


def test_iterate_freezes_a_settled_problem_only_while_another_goes_on():
    """:func:`rankops._lib._loops.iterate` keeps a settled problem's state while others go on (each step adds 1 until
    the problem reaches its target): targets 3 and 6 end at 3 and 6, the first frozen for the three rounds the second
    goes on; a lone problem that goes on has nothing to freeze, and the freeze is not called at all."""
    import array_api_compat.numpy as xp

    from rankops._lib import _loops

    for targets in ([3.0, 6.0], [4.0]):
        goal = np.array(targets)[:, None]  # a row per problem, as the solvers' states
        calls = []

        def freeze(xp, done, old, new, calls=calls):
            calls.append(done.tolist())
            return _loops.freeze_rows(xp, done, old, new)

        state, _, _ = _loops.iterate(xp, lambda ops, s: (s[0] + 1.0,), goal, (np.zeros_like(goal),),
                                     error=lambda ops, s: s[0][:, 0] < ops[:, 0], freeze=freeze, max_iter=10, tol=0.0,
                                     check_every=1)
        np.testing.assert_array_equal(state[0], goal)
        # two problems: frozen rounds while the second goes on from 3 to 6; one problem: no call
        assert ([c for c in calls if any(c)] == [[True, False]] * 3) if len(targets) == 2 else calls == [], calls
