"""``pytest conformance --backend NAME``: one backend's conformance suite collects and runs (docs/testing.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_one_backend_collects_its_checks_and_no_other():
    # one backend leaves the JAX-only fixture (and JAX alone the eager-backend one) with no backend at all: pytest
    # then gives its tests an empty parameter set, which the tier marking must pass over, not read as a backend
    name = "numpy"
    done = subprocess.run([sys.executable, "-m", "pytest", "conformance", "--backend", name, "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # test_backends.py reports every backend's install, selected or not
    ids = [line for line in done.stdout.splitlines() if "::" in line and "test_backends.py" not in line]
    assert len(ids) > 300
    others = {"numpy", "torch", "jax", "dask", "array_api_strict"} - {name}
    assert not [i for i in ids if any(f"[{o}" in i or f"-{o}]" in i or f"-{o}-" in i for o in others)]
