"""The dependency direction of the hexagon, checked on the source and on a fresh interpreter."""

from __future__ import annotations

import ast
import re
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


def import_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports in ``graph`` (module -> the modules it imports), as ``[a, b, ..., a]``; None if none."""
    finished: set[str] = set()

    def visit(name: str, chain: list[str]) -> list[str] | None:
        if name in chain:
            return [*chain[chain.index(name) :], name]
        if name in finished:
            return None
        for imported in sorted(graph.get(name, set())):
            circle = visit(imported, [*chain, name])
            if circle:
                return circle
        finished.add(name)
        return None

    return next((circle for name in sorted(graph) if (circle := visit(name, []))), None)


def test_use_cases_import_each_other_without_a_circle() -> None:
    circle = import_circle({path.stem: use_case_imports(path) for path in use_case_modules()})
    assert circle is None, "import circle: " + " -> ".join(circle or [])


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


@pytest.mark.parametrize("path", modules("adapters"), ids=lambda p: str(p.relative_to(ROOT)))
def test_adapters_do_not_depend_on_the_app(path: Path) -> None:
    assert "app" not in imported_roots(path)


def module_name(path: Path) -> str:
    """``adapters.agl.store`` for ``adapters/agl/store.py``, ``adapters.agl`` for ``adapters/agl/__init__.py``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def adapters_imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The adapters modules ``path`` (module ``name``) imports: at its top, in functions, or by ``import_module``.

    ``from package import module`` counts as the module; the packages above an imported module are not
    counted (importing ``adapters.local.losses`` runs ``adapters/local/__init__.py`` first, as any import does).
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y, from .. import z
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                imported.add(submodule if submodule in known else base)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            imported.add(node.args[0].value)
    return (imported & known) - {name}


def adapters_import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in modules("adapters")}
    return {name: adapters_imports(path, name, set(paths)) for name, path in paths.items()}


def test_adapters_modules_import_each_other_without_a_circle() -> None:
    """Imports inside functions count: a lazy import that closes a circle is a circle too."""
    graph = adapters_import_graph()
    assert "adapters.runner.entry" in graph["adapters.agl.store_process"]  # the graph sees the adapters' imports
    circle = import_circle(graph)
    assert circle is None, "import circle among adapters modules: " + " -> ".join(circle or [])


def test_the_circle_check_finds_a_circle_through_an_import_inside_a_function(tmp_path: Path) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circle(graph) == ["a", "b", "c", "a"]
    assert import_circle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    lazy = tmp_path / "lazy.py"
    lazy.write_text("def later() -> None:\n    from pkg.sub import store\n    from . import other\n")
    known = {"pkg.sub", "pkg.sub.store", "pkg.sub.other", "pkg.sub.lazy"}
    assert adapters_imports(lazy, "pkg.sub.lazy", known) == {"pkg.sub.store", "pkg.sub.other"}


def test_every_adapters_module_sits_in_the_folder_of_its_system() -> None:
    """One subpackage per outside system, each saying in its ``__init__.py`` which system and which ports."""
    adapters = ROOT / "adapters"
    assert [p.name for p in adapters.glob("*.py")] == ["__init__.py"]
    folders = [p for p in adapters.rglob("*") if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))]
    assert {"agl", "runner", "endpoint", "tinker", "cookbook", "local", "files"} <= {p.name for p in folders}
    for folder in folders:
        init = folder / "__init__.py"
        assert init.is_file(), f"{folder.relative_to(ROOT)} is not a package"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init.relative_to(ROOT)} has no docstring"


NAMED_MODULE = re.compile(r"(adapters(?:\.\w+)+)(?::\w+)?")


@pytest.mark.parametrize("package", ["adapters", "app", "tests", "bench", "examples"])
def test_modules_named_in_strings_exist(package: str) -> None:
    """``python -m adapters...`` command lines, ``import_module``, logger names, ``module:attribute`` references."""
    for path in modules(package):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                match = NAMED_MODULE.fullmatch(node.value)
                if match:
                    module = ROOT / match.group(1).replace(".", "/")
                    assert module.with_suffix(".py").is_file() or (module / "__init__.py").is_file(), (
                        f"{path.relative_to(ROOT)} names {node.value!r}, which is no module"
                    )


def test_importing_the_whole_domain_pulls_no_heavy_module() -> None:
    """Import time itself is measured in ``bench/bench_reconstruction.py``, not asserted here."""
    code = "import sys, domain.trajectory, domain.groups, domain.batching; print(','.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    loaded = {m.split(".")[0] for m in out.strip().split(",")}
    assert "pydantic" in loaded
    assert not loaded & HEAVY
