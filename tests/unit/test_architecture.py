"""The dependency direction of the hexagon, checked on the source and on a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"agentlightning", "tinker", "tinker_cookbook", "torch", "litellm", "transformers", "openai", "httpx"}
IO = {"socket", "subprocess", "urllib", "http", "requests", "asyncio", "os", "pathlib", "shutil", "sqlite3"}
COMPOSITION_ROOTS = {
    "app/compat.py",
    "app/console.py",
    "app/demo_agent.py",
    "app/launch.py",
    "app/training.py",
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", modules("domain"), ids=lambda p: p.name)
def test_domain_imports_nothing_of_ours_nor_heavy_nor_io(path: Path) -> None:
    roots = imported_roots(path)
    assert not roots & {"ports", "adapters", "app"}
    assert not roots & HEAVY
    assert not roots & IO


@pytest.mark.parametrize("path", modules("ports"), ids=lambda p: p.name)
def test_ports_import_only_domain(path: Path) -> None:
    roots = imported_roots(path)
    assert not roots & {"adapters", "app"}
    assert not roots & HEAVY


@pytest.mark.parametrize("path", modules("app"), ids=lambda p: p.name)
def test_app_use_cases_reach_libraries_only_through_adapters(path: Path) -> None:
    if str(path.relative_to(ROOT)) in COMPOSITION_ROOTS:
        return
    assert not imported_roots(path) & HEAVY


@pytest.mark.parametrize("path", modules("adapters"), ids=lambda p: p.name)
def test_adapters_do_not_depend_on_the_app(path: Path) -> None:
    assert "app" not in imported_roots(path)


def test_importing_the_whole_domain_pulls_no_heavy_module() -> None:
    """Import time itself is measured in ``bench/bench_reconstruction.py``, not asserted here."""
    code = "import sys, domain.trajectory, domain.groups, domain.batching; print(','.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    loaded = {m.split(".")[0] for m in out.strip().split(",")}
    assert "pydantic" in loaded
    assert not loaded & HEAVY
