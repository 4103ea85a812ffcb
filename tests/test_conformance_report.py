"""``python -m conformance.report``: the property suite's counts files as the table of docs/reliability.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_report_adds_up_files_per_backend_in_the_documented_order(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"torch": {"inputs": 1200, "row ties": 3}, "numpy": {"inputs": 5, "failed": 2}}))
    second.write_text(json.dumps({"numpy": {"inputs": 100000, "rows": 7}}))
    out = subprocess.run([sys.executable, "-m", "conformance.report", str(first), str(second)], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "| | numpy | torch | total |"  # numpy before torch, whatever the files' order
    assert out[1] == "|---|---:|---:|---:|"
    # inputs / rows / gradients first, then the rest alphabetically; numbers with thousands separators
    assert out[2:] == ["| inputs | 100,005 | 1,200 | 101,205 |", "| rows | 7 | 0 | 7 |", "| failed | 2 | 0 | 2 |",
                       "| row ties | 0 | 3 | 3 |"]


def test_report_without_files_prints_its_usage_and_exits_2():
    done = subprocess.run([sys.executable, "-m", "conformance.report"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "python -m conformance.report" in done.stderr
