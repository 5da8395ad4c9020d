"""The layers point down: CLI and API (`kernelwright/`) -> `graphs/` -> `agents/` -> `tools/` -> `evaluators/`.

Every import in the source folders is parsed (not executed) and checked:
- nothing imports a layer above its own;
- LangGraph is imported only by `graphs/` and the CLI/API layer (the roles' decisions need none of it);
- no private name (`_x`) crosses a module boundary, by import or by attribute (`module._x`).
The checker is tested on sources that break each rule, so this test can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"evaluators": 0, "tools": 1, "agents": 2, "graphs": 3, "kernelwright": 4}
"""folder (= package kernelwright.<folder>, or kernelwright itself) -> height"""
DATA = {"prompts"}
"""packages of data that any layer may read"""
LANGGRAPH_OK = {"graphs", "kernelwright"}


def _package_of(module: str) -> str | None:
    """'kernelwright.agents.roles' -> 'agents'; 'kernelwright.api' -> 'kernelwright'; non-ours -> None."""
    parts = module.split(".")
    if parts[0] != "kernelwright":
        return None
    if len(parts) > 1 and (parts[1] in LAYERS or parts[1] in DATA):
        return parts[1]
    return "kernelwright"


def _resolve(folder: str, file_module: str, level: int, module: str | None) -> str:
    """The absolute module name of a relative import inside kernelwright.<folder>."""
    base = ["kernelwright"] + ([] if folder == "kernelwright" else [folder]) + file_module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def violations(folder: str, file_module: str, source: str) -> list[str]:
    """Every rule the source of kernelwright.<folder>.<file_module> breaks, one line each."""
    found: list[str] = []
    here = LAYERS[folder]
    tree = ast.parse(source)
    ours: dict[str, str] = {}  # local name -> our module it is bound to

    def check_target(module: str, names: list[str], line: int) -> None:
        top = module.split(".")[0]
        if top == "langgraph" and folder not in LANGGRAPH_OK:
            found.append(f"line {line}: {folder}/ imports langgraph")
        pkg = _package_of(module)
        if pkg is None or pkg in DATA:
            return
        if LAYERS[pkg] > here:
            found.append(f"line {line}: {folder}/ imports {module} (layer {pkg}/ is above it)")
        this = _resolve(folder, file_module, 1, None) + "." + file_module.split(".")[-1]
        for n in names:
            if n.startswith("_") and not n.startswith("__") and module != this:
                found.append(f"line {line}: imports the private name {n} from {module}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                check_target(a.name, [], node.lineno)
                if a.name.startswith("kernelwright"):
                    ours[a.asname or a.name.split(".")[0]] = a.name if a.asname else "kernelwright"
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(folder, file_module, node.level, node.module) if node.level else (node.module or "")
            names = [a.name for a in node.names]
            if module == "kernelwright":  # `from kernelwright import prompts`: each name is a package of ours
                for n in names:
                    check_target(f"kernelwright.{n}", [], node.lineno)
            else:
                check_target(module, names, node.lineno)
            if _package_of(module) is not None:
                for a in node.names:  # `from kernelwright.agents import roles`: roles may be a module
                    check_target(f"{module}.{a.name}", [], node.lineno) if _package_of(f"{module}.{a.name}") != \
                        _package_of(module) else None
                    ours[a.asname or a.name] = f"{module}.{a.name}"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in ours and node.attr.startswith("_") and not node.attr.startswith("__"):
                found.append(f"line {node.lineno}: uses the private {node.value.id}.{node.attr}")
    return found


def _sources() -> list[tuple[str, str, Path]]:
    out = []
    for folder in LAYERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            out.append((folder, ".".join(rel.parts), path))
    return out


def test_every_import_points_down() -> None:
    sources = _sources()
    assert len(sources) > 40 and {f for f, _, _ in sources} == set(LAYERS)
    problems = [f"{path.relative_to(ROOT)}: {v}" for folder, mod, path in sources
                for v in violations(folder, mod, path.read_text())]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("folder, module, source, words", [
    ("agents", "roles", "from kernelwright.graphs.state import Context\n", "layer graphs/ is above"),
    ("tools", "evaluation", "from kernelwright.agents import llm\n", "layer agents/ is above"),
    ("evaluators", "compare", "import kernelwright.tools.runstore\n", "layer tools/ is above"),
    ("agents", "roles", "from ..graphs import nodes\n", "layer graphs/ is above"),
    ("tools", "runstore", "from kernelwright.api import start_run\n", "layer kernelwright/ is above"),
    ("agents", "roles", "from langgraph.runtime import Runtime\n", "imports langgraph"),
    ("graphs", "optimize", "from kernelwright.agents.roles import _failure\n", "private name _failure"),
    ("graphs", "optimize", "from kernelwright.agents import roles\nroles._failure(1)\n", "private roles._failure"),
])
def test_the_checker_catches_an_upward_import(folder: str, module: str, source: str, words: str) -> None:
    found = violations(folder, module, source)
    assert any(words in v for v in found), found


@pytest.mark.parametrize("folder, module, source", [
    ("graphs", "optimize", "from kernelwright.agents import roles\nfrom langgraph.graph import StateGraph\n"),
    ("agents", "roles", "from kernelwright.tools.runstore import Run\nfrom . import llm\nfrom .archive import Archive\n"),
    ("kernelwright", "api", "from kernelwright.graphs.optimize import builder\n"),
    ("evaluators", "evaluator", "from .compare import compare\nfrom kernelwright import prompts\n"),
    ("tools", "coding", "from dataclasses import dataclass\n"),
])
def test_the_checker_allows_downward_imports(folder: str, module: str, source: str) -> None:
    assert violations(folder, module, source) == []
