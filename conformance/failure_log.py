"""A pytest plugin: with ``RANKOPS_FAILURE_LOG`` set, each failure's traceback goes to that file as it happens.

pytest writes tracebacks only in its final summary, which a run stopped by a
time limit (``.ci/gpu``'s steps) never reaches. The root ``conftest.py``
loads this plugin for every run of the suite; ``pytest -p
conformance.failure_log`` loads it elsewhere.
"""

from __future__ import annotations

import os

import pytest


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Append a failed report's node id, phase and traceback to ``$RANKOPS_FAILURE_LOG``.

    Under pytest-xdist the hook runs in each worker and again in the
    controlling process for the report the worker sends: only the controller
    writes, so each failure is written once and one file gathers every
    worker's.
    """
    path = os.environ.get("RANKOPS_FAILURE_LOG")
    if path and report.failed and "PYTEST_XDIST_WORKER" not in os.environ:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")
