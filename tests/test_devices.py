"""Values and gradients stay on the input's device: JAX with two CPU devices, the input on the second (issue 31).

XLA's device count is fixed when JAX starts, so the check runs in a
subprocess started with ``XLA_FLAGS=--xla_force_host_platform_device_count=2``
(and the suite's quick XLA compilation, from the root conftest: 6 s, not 12).
Every conformance case is called on ``jax.devices()[1]``: eagerly (an array
made without ``device=`` would land on device 0 there) and under ``jax.jit``,
value and gradient. The default run takes one case per core family; the
rest run under ``-m exhaustive``. (array-api-strict's non-default devices
are in every conformance check already.) The same two-device process checks
``jax.shard_map`` with its default ``check_vma`` (``_check_shard_map``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = r"""
import json, sys
import conftest  # the suite's JAX start: x64 and its quick compilation, with this process's XLA_FLAGS kept
import jax, jax.numpy as jnp, numpy as np
from conformance.operators import CASES

names, sharded, long_rows = json.loads(sys.argv[1])
devices = jax.devices()
assert len(devices) == 2, devices
second = devices[1]
x = jax.device_put(jnp.asarray(np.random.default_rng(0).normal(size=(3, 8))), second)

def total(case, v):
    return sum(jnp.sum(a) for a in jax.tree_util.tree_leaves(case(v)) if jnp.issubdtype(a.dtype, jnp.floating))

report = {}
for case in CASES:
    if not case.primary or (names and case.name not in names):
        continue
    eager = jax.tree_util.tree_leaves(case(x))
    # the jitted value and gradient in one program: one compilation
    jitted, grad = jax.jit(lambda v: (case(v), jax.grad(lambda u: total(case, u))(v)))(x)
    report[case.name] = sorted({str(d) for a in (*eager, *jax.tree_util.tree_leaves(jitted), grad) for d in a.devices()})

# jax.shard_map with its default check_vma over both devices: each method's soft_rank against the unsharded one
import rankops
from jax.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((2,), ("b",))
shard_map = {}
SHARDED = {"sinkhorn-unrolled": dict(method="sinkhorn", implicit=False), "permutahedron-float32": dict(method="permutahedron"),
           "permutahedron-lp": dict(method="permutahedron", regularization="lp", p=1.35)}
# rows past _jax_scans.SCAN_BLOCK (the blocked scans); the p-norm's past 128, where its rank takes the one-block guess,
# a branch that returns constants where the other returns the shard's rows, and its rounds the extensions (from 64);
# ``long_rows``: every method's so
LENGTH = {"permutahedron-lp": 160}
for method in sharded:
    xn = np.random.default_rng(0).normal(size=(4, LENGTH.get(method, 160 if long_rows else 40)))
    xs = jax.device_put(jnp.asarray(xn), NamedSharding(mesh, P("b")))
    op = lambda v: rankops.soft_rank(v, **SHARDED.get(method, dict(method=method)))
    mapped = jax.shard_map(op, mesh=mesh, in_specs=P("b"), out_specs=P("b"))
    def value_and_grad(f):
        return jax.jit(lambda v: (f(v), jax.grad(lambda u: jnp.sum(f(u) ** 2))(v)))

    single = method.endswith("-float32")  # float32 rows: on a CPU the JAX adapter's packed sort
    try:
        value, grad = value_and_grad(mapped)(xs.astype(jnp.float32) if single else xs)
    except Exception as exc:
        shard_map[method] = f"{type(exc).__name__}: {str(exc)[:200]}"
        continue
    options = SHARDED.get(method, dict(method=method))
    if single:  # the unsharded float32 program
        plain_value, plain_grad = value_and_grad(op)(jnp.asarray(xn, dtype=jnp.float32))
    elif options.get("implicit", True):  # the unsharded reference without a compilation: NumPy, by the same rules
        plain_value, vjp_fn = rankops.vjp(rankops.soft_rank, xn, **options)
        (plain_grad,) = vjp_fn(2 * plain_value)
    else:  # unrolled: NumPy differentiates by the implicit rule, so the reference is JAX's own
        plain_value, plain_grad = value_and_grad(op)(jnp.asarray(xn))
    shard_map[method] = [float(np.max(np.abs(np.asarray(value) - np.asarray(plain_value))) / max(1.0, np.max(np.abs(np.asarray(plain_value))))),
                         float(np.max(np.abs(np.asarray(grad) - np.asarray(plain_grad))) / np.max(np.abs(np.asarray(plain_grad)))),
                         str(value.sharding.spec)]
print(json.dumps({"second": str(second), "report": report, "shard_map": shard_map}))
"""

# one per core family: the transport solver, isotonic regression, LapSum's scans, the row-softmax permutations
QUICK = ["soft_rank[sinkhorn]", "soft_rank[permutahedron]", "soft_rank[lapsum]", "softsort"]
# under shard_map, one per kind of loop or rule: the transport solver's forward rule and rounds, the pooling
# loop, the blocked scans, the p-norm's guess; every method, Sinkhorn unrolled too, under -m exhaustive
SHARDED_QUICK = ["sinkhorn", "permutahedron", "lapsum", "permutahedron-float32", "permutahedron-lp"]
SHARDED = ["permutahedron", "lapsum", "softsort", "neuralsort", "diffsort", "sinkhorn", "sinkhorn-unrolled", "permutahedron-float32",
           "permutahedron-lp"]


def _placements(names: list[str], sharded: list[str], long_rows: bool) -> dict:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps([names, sharded, long_rows])], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("names", "sharded", "long_rows"), [
    pytest.param(QUICK, SHARDED_QUICK, False, id="quick"),
    pytest.param([], SHARDED, True, id="all", marks=pytest.mark.exhaustive)])
def test_values_and_gradients_stay_on_the_second_jax_device(names, sharded, long_rows):
    """``long_rows``: every method's shard_map on rows of 160 (the routes of long rows), the quick run on rows of 40."""
    found = _placements(names, sharded, long_rows)
    assert set(found["report"]) >= set(names) and found["report"], found
    wrong = {name: where for name, where in found["report"].items() if where != [found["second"]]}
    assert wrong == {}, f"left {found['second']}: {wrong}"
    _check_shard_map(found["shard_map"], sharded)  # the same two-device process



def _check_shard_map(report: dict, sharded: list[str]) -> None:
    """``jax.shard_map`` (``check_vma`` on) over two devices, every method (Sinkhorn implicit and unrolled; the
    permutahedron also on float32 rows, whose sort on a CPU is the JAX adapter's packed one, and its p-norm rank on
    rows of 160, the one-block guess's): a route's outputs vary as the other's do, a loop's carry varies as
    its body does, a rule's residuals and missing tangents vary as its outputs do; values and gradients equal the
    unsharded ones (each relative to its largest, or 1; float32 against the unsharded float32 program), the output
    stays sharded."""
    assert sorted(report) == sorted(sharded), report
    for method in sharded:
        assert isinstance(report[method], list), (method, report[method])
        value_error, grad_error, spec = report[method]
        # float32: against the unsharded float32 program
        value_tolerance, grad_tolerance = (1e-6, 1e-5) if method.endswith("-float32") else (1e-12, 1e-11)
        assert value_error <= value_tolerance and grad_error <= grad_tolerance and spec.startswith(("P('b'", "PartitionSpec('b'")), (method, report[method])
