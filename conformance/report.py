"""The property suite's counts as the Markdown table of docs/reliability.md.

    python -m conformance.report counts.json [more.json ...]

Each file is one ``RANKOPS_PROPERTY_REPORT`` written by a run of
conformance/test_properties.py; several (one per backend, say) are added up
per backend. Rows are ordered as the terminal summary orders them, with a
total column.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

ORDER = ("numpy", "array_api_strict", "torch", "jax", "dask", "cupy")


def merge(paths: list[str]) -> dict[str, Counter]:
    """Per backend, the counts of every file added up."""
    merged: dict[str, Counter] = {}
    for path in paths:
        with open(path) as f:
            for backend, counts in json.load(f).items():
                merged.setdefault(backend, Counter()).update(counts)
    return merged


def table(merged: dict[str, Counter]) -> str:
    backends = sorted(merged, key=lambda b: ORDER.index(b) if b in ORDER else len(ORDER))
    whats = sorted({w for c in merged.values() for w in c}, key=lambda w: (not w.startswith(("inputs", "rows", "gradients")), w))
    lines = ["| | " + " | ".join(backends) + " | total |", "|---|" + "---:|" * (len(backends) + 1)]
    for what in whats:
        row = [merged[b].get(what, 0) for b in backends]
        lines.append(f"| {what} | " + " | ".join(f"{c:,}" for c in row) + f" | {sum(row):,} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print(table(merge(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
