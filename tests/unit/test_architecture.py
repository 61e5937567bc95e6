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
USE_CASES = {
    "app/rollouts.py",
    "app/group_rollouts.py",
    "app/evaluation.py",
    "app/training.py",
    "app/async_training.py",
}
"""The application's use cases: they run on ports and domain data only."""
FACES_AND_ROOTS = {
    "app/agl_algorithm.py",  # the agl.Trainer face: an Agent-lightning Algorithm over the training loop
    "app/agl_tinker_compat.py",  # the original example's training entry points (Config, main, ...)
    "app/compat.py",  # the seed-compatible face
    "app/console.py",  # the CLI's terminal side
    "app/demo_agent.py",  # an agent, written as users write them
    "app/launch.py",  # the composition root
}
"""The only app modules that may touch the libraries and the adapters."""


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
def test_app_modules_reach_libraries_only_through_adapters(path: Path) -> None:
    if str(path.relative_to(ROOT)) in FACES_AND_ROOTS:
        return
    assert not imported_roots(path) & HEAVY
    assert "adapters" not in imported_roots(path)


@pytest.mark.parametrize("name", sorted(USE_CASES))
def test_use_cases_import_only_domain_ports_other_use_cases_and_the_standard_library(name: str) -> None:
    path = ROOT / name
    assert path.is_file(), f"{name} is listed as a use case but does not exist"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        for module in names:
            root = module.split(".")[0]
            use_case = module.replace(".", "/") + ".py" in USE_CASES
            assert root in sys.stdlib_module_names or root in {"domain", "ports"} or use_case, (
                f"{name} imports {module}"
            )


def test_every_listed_face_or_root_exists() -> None:
    assert all((ROOT / name).is_file() for name in FACES_AND_ROOTS)


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
