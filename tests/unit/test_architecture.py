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
APP = ROOT / "app"
USE_CASES = APP / "usecases"
"""The application's use cases: they run on ports and domain data only."""
FACES = APP / "faces"
"""How people and programs drive the use cases: they may touch the libraries and the adapters."""
COMPOSITION_ROOT = APP / "launch.py"
"""The one place that binds adapters to ports: it may touch everything."""
DEMO_AGENT = APP / "demo" / "agent.py"
"""An agent, written as users write them: it may touch the libraries, never the adapters."""
LIGHT_FACES = {FACES / "cli.py", FACES / "preflight.py", FACES / "report.py"}
"""Faces that run before anything heavy is imported (the CLI's parsing, its pre-flight checks, a report)."""


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def imported_modules(path: Path) -> list[str]:
    """Every absolute module ``path`` imports, at its top or inside a function."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


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


def may_touch_libraries(path: Path) -> bool:
    """Faces, the composition root and the demo agent; every other app module reaches libraries through adapters."""
    return (path.is_relative_to(FACES) and path not in LIGHT_FACES) or path in {COMPOSITION_ROOT, DEMO_AGENT}


def may_touch_adapters(path: Path) -> bool:
    return (path.is_relative_to(FACES) and path not in LIGHT_FACES) or path == COMPOSITION_ROOT


@pytest.mark.parametrize("path", modules("app"), ids=lambda p: str(p.relative_to(APP)))
def test_app_modules_reach_libraries_only_through_adapters(path: Path) -> None:
    if not may_touch_libraries(path):
        assert not imported_roots(path) & HEAVY
    if not may_touch_adapters(path):
        assert "adapters" not in imported_roots(path)


def use_case_modules() -> list[Path]:
    return sorted(USE_CASES.glob("*.py"))


@pytest.mark.parametrize("path", use_case_modules(), ids=lambda p: p.name)
def test_use_cases_import_only_domain_ports_other_use_cases_and_the_standard_library(path: Path) -> None:
    for module in imported_modules(path):
        root = module.split(".")[0]
        use_case = module == "app.usecases" or module.startswith("app.usecases.")
        assert root in sys.stdlib_module_names or root in {"domain", "ports"} or use_case, (
            f"{path.relative_to(ROOT)} imports {module}"
        )


def use_case_imports(path: Path) -> set[str]:
    """The use cases ``path`` imports, by module name (``steps`` for ``app.usecases.steps``)."""
    packaged = [  # from app.usecases import steps
        f"app.usecases.{alias.name}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "app.usecases" and node.level == 0
        for alias in node.names
    ]
    prefix = "app.usecases."
    return {m.removeprefix(prefix).split(".")[0] for m in [*imported_modules(path), *packaged] if m.startswith(prefix)}


def test_use_cases_import_each_other_without_a_circle() -> None:
    graph = {path.stem: use_case_imports(path) for path in use_case_modules()}
    finished: set[str] = set()

    def visit(name: str, chain: list[str]) -> None:
        assert name not in chain, "import circle: " + " -> ".join([*chain[chain.index(name) :], name])
        if name in finished:
            return
        for imported in sorted(graph.get(name, set())):
            visit(imported, [*chain, name])
        finished.add(name)

    for name in sorted(graph):
        visit(name, [])


LOOPS_AND_STEPS = ("training", "async_training", "steps")


def test_both_training_loops_build_on_steps_and_only_the_synchronous_one_dispatches_to_the_other() -> None:
    """``steps`` is what both loops share; ``run_training`` hands an asynchronous run to ``async_training``."""
    training, async_training, steps = (use_case_imports(USE_CASES / f"{name}.py") for name in LOOPS_AND_STEPS)
    assert "steps" in training and "steps" in async_training
    assert "training" not in async_training
    assert not steps & {"training", "async_training"}


def test_the_use_cases_named_by_the_architecture_exist() -> None:
    names = {p.stem for p in use_case_modules()}
    assert {"rollouts", "group_rollouts", "evaluation", "steps", "training", "async_training"} <= names
    assert all((FACES / name).is_file() for name in ("cli.py", "preflight.py", "report.py"))
    assert COMPOSITION_ROOT.is_file() and DEMO_AGENT.is_file()


def test_every_app_folder_says_what_it_is_for() -> None:
    for folder in (APP, USE_CASES, FACES, APP / "demo"):
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder.relative_to(ROOT)} is not a package"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init.relative_to(ROOT)} has no docstring"


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
