"""The examples run end to end in their ``--quick`` mode (what CI can afford) and print sensible tables."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_suquan_kendall_quick(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("torch")
    plot = tmp_path / "targets.png"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "suquan_kendall.py"), "--quick", "--plot", str(plot)],
                          capture_output=True, text=True, timeout=600, check=True)
    accuracy = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\| ([^|]+?) \| (\d\.\d+) ± \d\.\d+ \|$", proc.stdout, flags=re.M)}
    assert set(accuracy) == {"raw pixels", "quantile normalized (fixed target)", "SUQUAN (learned target)",
                             "Kendall kernel SVM", "linear SVM, raw pixels", "RBF SVM, raw pixels"}, proc.stdout
    assert min(accuracy.values()) > 0.3, accuracy  # 10 classes: chance is 0.1
    # the kernel is invariant to each image's contrast curve: with 5 images per class it beats raw pixels
    assert accuracy["Kendall kernel SVM"] > accuracy["linear SVM, raw pixels"], accuracy
    assert plot.stat().st_size > 1000
