"""The README's examples run, and print what their comments promise."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

README = (Path(__file__).parents[1] / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)


def test_readme_has_examples_for_each_framework():
    joined = "\n".join(BLOCKS)
    for needle in ("import numpy", "import torch", ".backward()", "import jax", "jax.jit", "jax.grad"):
        assert needle in joined


@pytest.mark.parametrize("code", BLOCKS, ids=[b.split("\n")[0] for b in BLOCKS])
def test_readme_example_runs(code):
    for module in re.findall(r"^import (\w+)", code, flags=re.M):
        pytest.importorskip(module)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    # The NumPy example states its results in comments: check them.
    for call, expected in re.findall(r"^(rankops\.\S+\(.*\))\s*#\s*~(\[[^(]*\])", code, flags=re.M):
        got = eval(call, namespace)
        np.testing.assert_allclose(got, np.array(eval(expected)), atol=0.05)


def test_readme_commands_pin_torch_and_run_both_suites():
    demo = re.search(r"<!-- demo-command -->\n```bash\n(.*)\n```", README).group(1)
    test = re.search(r"<!-- test-command -->\n```bash\n(.*)\n```", README).group(1)
    assert "torch==2.13.0" in demo and demo.endswith("-m rankops")
    assert "torch==2.13.0" in test and re.search(r"-m pytest (-n \d+ )?tests conformance$", test)
