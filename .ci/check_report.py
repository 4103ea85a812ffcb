"""Fail unless the JUnit report shows tests passing on every required backend.

Usage: python .ci/check_report.py REPORT.xml BACKEND [BACKEND ...]
Prints, per backend, how many conformance and unit tests passed and were skipped,
then the test-seconds per file (docs/testing.md keeps that table).
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET


def main(path: str, required: list[str]) -> int:
    cases = list(ET.parse(path).getroot().iter("testcase"))
    counts: dict[tuple[str, str], dict[str, int]] = {}
    total = 0
    for case in cases:
        total += 1
        suite = "conformance" if case.get("classname", "").startswith("conformance") else "tests"
        outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else (
            "skipped" if case.find("skipped") is not None else "passed")
        params = re.search(r"\[(.*)\]$", case.get("name", ""))
        ids = re.split(r"[-\[\]]", params.group(1)) if params else []
        for b in required:
            if b in ids:
                c = counts.setdefault((suite, b), {"passed": 0, "skipped": 0, "failed": 0})
                c[outcome] += 1
    print(f"{'suite':<12} {'backend':<17} {'passed':>7} {'skipped':>8} {'failed':>7}")
    ok = total > 0
    for suite in ("conformance", "tests"):
        for b in required:
            c = counts.get((suite, b), {"passed": 0, "skipped": 0, "failed": 0})
            print(f"{suite:<12} {b:<17} {c['passed']:>7} {c['skipped']:>8} {c['failed']:>7}")
            if suite == "conformance" and c["passed"] == 0:
                print(f"ci: no conformance test passed on {b}", file=sys.stderr)
                ok = False
    print(f"{total} test cases in the report")
    print("\n".join(per_file(cases)))
    return 0 if ok else 1


def per_file(cases: list[ET.Element]) -> list[str]:
    """Markdown rows: each test file's test count and test-seconds (summed over workers), slowest first."""
    seconds: dict[str, float] = {}
    count: dict[str, int] = {}
    for case in cases:
        parts = case.get("classname", "").split(".")
        if parts[-1][:1].isupper():  # a test class: the module is the part before it
            parts = parts[:-1]
        name = "/".join(parts) + ".py"
        seconds[name] = seconds.get(name, 0.0) + float(case.get("time", 0))
        count[name] = count.get(name, 0) + 1
    rows = ["| file | tests | test-seconds |", "|---|---:|---:|"]
    rows += [f"| `{f}` | {count[f]:,} | {seconds[f]:,.0f} |" for f in sorted(seconds, key=seconds.get, reverse=True)]
    rows.append(f"| total | {sum(count.values()):,} | {sum(seconds.values()):,.0f} |")
    return rows


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
