"""Layers: the import graph of src/webagents has no circle, type-only imports included.

The graph is read from the source (ast), not from what Python happens to import: every
`import` and `from ... import`, those under `if TYPE_CHECKING:` and inside functions too,
relative imports resolved, and a package's `__init__` a module of its own. A name imported
from a package counts as an import of the submodule when a submodule has that name.
Importing `a.b` runs `a/__init__` first, but that edge is left out: every package whose
`__init__` names its own submodules would otherwise be a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "webagents"


def _modules(package: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    found: dict[str, tuple[Path, bool]] = {}
    for file in sorted(package.rglob("*.py")):
        parts = list(file.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (file, is_package)
    return found


def _imported(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: set[str]
) -> set[str]:
    """The modules of the package an import statement loads."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names} & modules
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, *([node.module] if node.module else [])])
    else:
        source = node.module or ""
    # `from a import b`: the submodule a.b where there is one, else a name of a itself.
    named = {f"{source}.{alias.name}" for alias in node.names}
    loaded = named & modules
    if loaded != named:
        loaded.add(source)
    return loaded & modules


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (file, is_package) in modules.items():
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), str(file))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name].update(_imported(node, name, is_package, set(modules)) - {name})
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def describe(graph: dict[str, set[str]], circle: list[str]) -> str:
    members = set(circle)
    return "\n".join(
        f"  {module} -> {', '.join(sorted(graph[module] & members))}" for module in circle
    )


def check_no_circle(package: Path) -> None:
    graph = import_graph(package)
    found = circles(graph)
    if found:
        pytest.fail(
            "the import graph has a circle; make the imports flow one way:\n"
            + "\n".join(f"{len(c)} modules:\n{describe(graph, c)}" for c in found),
            pytrace=False,
        )


def test_layers_src_webagents_has_no_import_circle() -> None:
    check_no_circle(SRC)


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_layers_the_agent_files_data_imports_nothing_of_the_runtime() -> None:
    assert _reachable(import_graph(SRC), "webagents.agent_spec") == {"webagents.caller"}


def test_layers_skills_never_import_the_agent_the_loop_or_the_loader() -> None:
    graph = import_graph(SRC)
    above = {"webagents.agent", "webagents._loop", "webagents.agent_file"}
    reaching = {
        module: sorted(_reachable(graph, module) & above)
        for module in graph
        if module.startswith("webagents.skills") and _reachable(graph, module) & above
    }
    assert reaching == {}


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_layers_a_circle_through_a_type_only_import_is_named(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from .agent import Agent\n",
            "pkg/agent.py": "from .skills.base import Skill\n",
            "pkg/leaf.py": "import pkg.agent\n",
            "pkg/skills/__init__.py": "",
            "pkg/skills/base.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from ..agent import Agent\n"
            ),
        },
    )
    graph = import_graph(package)
    assert graph == {
        "pkg": {"pkg.agent"},
        "pkg.agent": {"pkg.skills.base"},
        "pkg.leaf": {"pkg.agent"},
        "pkg.skills": set(),
        "pkg.skills.base": {"pkg.agent"},
    }
    assert circles(graph) == [["pkg.agent", "pkg.skills.base"]]
    with pytest.raises(pytest.fail.Exception) as caught:
        check_no_circle(package)
    assert str(caught.value) == (
        "the import graph has a circle; make the imports flow one way:\n"
        "2 modules:\n"
        "  pkg.agent -> pkg.skills.base\n"
        "  pkg.skills.base -> pkg.agent"
    )


def test_layers_a_package_init_and_its_submodules_make_a_circle(tmp_path: Path) -> None:
    """`from . import sub` in `__init__`, and the submodule importing its package back."""
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/cli/__init__.py": "from . import run\n",
            "pkg/cli/run.py": "def main() -> None:\n    from pkg.cli import group\n",
        },
    )
    assert circles(import_graph(package)) == [["pkg.cli", "pkg.cli.run"]]


def test_layers_one_way_imports_are_no_circle(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "from .agent import Agent\nfrom .spec import Spec\n",
            "pkg/agent.py": "from .spec import Spec\nfrom . import spec\n",
            "pkg/spec.py": "import json\n",
        },
    )
    assert import_graph(package) == {
        "pkg": {"pkg.agent", "pkg.spec"},
        "pkg.agent": {"pkg.spec"},
        "pkg.spec": set(),
    }
    check_no_circle(package)
