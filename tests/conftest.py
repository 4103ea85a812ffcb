"""The quick run of every docs-generating command (``python -m benchmarks.docs --quick``), shared by the ``scripts`` tests."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class GeneratedDocs:
    """What ``benchmarks.docs --quick`` left under ``out``: the pages, the figures (``out/docs/img``), each command's output."""

    returncode: int
    log: str
    out: Path
    outputs: dict

    def command(self, command_start: str) -> str:
        """The one generating command that starts with ``command_start``."""
        found = [c for c in self.outputs if c.startswith(command_start)]
        assert len(found) == 1, (command_start, list(self.outputs))
        return found[0]

    def stdout(self, command_start: str) -> str:
        """The output of the one generating command that starts with ``command_start``."""
        command = self.command(command_start)
        assert self.outputs[command]["returncode"] == 0, (command, self.log[-4000:])
        return self.outputs[command]["stdout"]

    def figures(self, command: str) -> list[Path]:
        """Where the quick run put the figures ``command`` writes (its ``docs/img/...`` arguments)."""
        return [self.out / word for word in command.split() if word.startswith("docs/img/")]


@pytest.fixture(scope="session")
def generated_docs(tmp_path_factory, worker_id) -> GeneratedDocs:
    """One quick run per test session, whichever pytest-xdist worker asks first (the others wait for it and read it)."""
    for module in ("torch", "jax", "sklearn", "matplotlib"):
        pytest.importorskip(module)
    from filelock import FileLock  # a dependency of torch

    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    out, done = shared / "generated-docs", shared / "generated-docs.json"
    with FileLock(str(shared / "generated-docs.lock")):
        if not done.exists():
            out.mkdir(exist_ok=True)
            proc = subprocess.run([sys.executable, "-m", "benchmarks.docs", "--quick", "--jobs", "2", "--output", str(out)],
                                  cwd=ROOT, capture_output=True, text=True, timeout=3600)
            done.write_text(json.dumps({"returncode": proc.returncode, "log": proc.stdout + proc.stderr}))
    run = json.loads(done.read_text())
    outputs = json.loads((out / "outputs.json").read_text()) if (out / "outputs.json").exists() else {}
    return GeneratedDocs(run["returncode"], run["log"], out, outputs)
