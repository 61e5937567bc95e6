"""Run every fault-injection case and write its measured outcome to ``docs/reliability.md``.

    .venv/bin/python bench/reliability_table.py

Each case is a test marked ``fault`` whose docstring's first line says what must happen (the fault,
then ``->`` and the required outcome). This runs them with pytest, reads the JUnit report, and
writes one table row per case: the fault, what must happen, whether it did, and how long it took.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "reliability.md"


def docstrings() -> dict[tuple[str, str], str]:
    """(module path, test name) -> first docstring line, for every test function under tests/."""
    found: dict[tuple[str, str], str] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        tree = ast.parse(path.read_text())
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                doc = ast.get_docstring(node) or node.name.removeprefix("test_").replace("_", " ")
                found[(module, node.name)] = doc.splitlines()[0]
    return found


def fault_cases(env: dict[str, str]) -> set[tuple[str, str]]:
    """(module, test name) of every test marked ``fault``."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-m", "fault", "tests"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    cases = set()
    for line in out.splitlines():
        path, sep, name = line.partition("::")
        if sep and path.endswith(".py"):
            cases.add((path.removesuffix(".py").replace("/", "."), name))
    return cases


def main() -> int:
    """``--junit PATH`` reuses a report of a run that included the fault cases instead of rerunning them."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TINKER_TELEMETRY": "0"}
    if len(sys.argv) == 3 and sys.argv[1] == "--junit":
        report = Path(sys.argv[2])
    else:
        report = Path(tempfile.mkdtemp(prefix="reliability-")) / "junit.xml"
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-m", "fault", f"--junitxml={report}", "tests"],
            cwd=ROOT, env=env, check=False,
        )  # fmt: skip
    faults = fault_cases(env)
    docs = docstrings()
    rows = []
    for case in ET.parse(report).getroot().iter("testcase"):
        module, name = case.get("classname", ""), case.get("name", "")
        if (module, name) not in faults:
            continue
        base = name.split("[")[0]
        doc = docs.get((module, base), base)
        fault, _, required = doc.partition("->")
        if "[" in name:  # a parametrized case: say which variant (e.g. the stock or the concurrent runner)
            fault = f"{fault.strip()} ({name.split('[', 1)[1].rstrip(']')})"
        failed = case.find("failure") is not None or case.find("error") is not None
        skipped = case.find("skipped") is not None
        outcome = "FAILED" if failed else "skipped" if skipped else "as required"
        rows.append(f"| {fault.strip()} | {required.strip() or '-'} | {outcome} | {float(case.get('time', 0)):.0f} s |")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(
        "# Reliability: fault-injection cases and their measured outcome\n\n"
        "Produced by `.venv/bin/python bench/reliability_table.py` (real processes on 127.0.0.1, "
        f"{len(rows)} cases, on this project's shared 2-core machine; times are per case).\n\n"
        "| fault | what must happen | outcome | time |\n| --- | --- | --- | --- |\n" + "\n".join(rows) + "\n"
    )
    print(OUT.read_text())
    return 0 if all("as required" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
