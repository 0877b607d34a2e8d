"""Layers: the import graph of src/webagents has no circle, type-only imports included.

The graph is read from the source (ast), not from what Python happens to import: every
`import` and `from ... import`, those under `if TYPE_CHECKING:` and inside functions too,
relative imports resolved, and a package's `__init__` a module of its own. A name imported
from a package counts as an import of the submodule when a submodule has that name.

Importing `a.b.c` runs `a/__init__` and `a/b/__init__` first, so a module that imports it
depends on those too: the graph has those edges, save to the importer's own packages (they
are loaded before it, and every package whose `__init__` names its own submodules would
otherwise be a circle). The same graph collapsed to packages (a module counted as its
package, `__init__` included) has no circle either: two packages that import each other are
an import-order hazard even when no two of their modules do. The modules directly in
`webagents/` are the layers themselves and count one by one.

The portal's packages are layered as webagents/portal/__init__.py says (PORTAL_LAYERS):
each imports only from the layers below it, so an import that goes up is named even before
it closes a circle.
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


def _ancestors(module: str) -> set[str]:
    """`a` and `a.b` for `a.b.c`: the packages importing it loads first."""
    parts = module.split(".")
    return {".".join(parts[:end]) for end in range(1, len(parts))}


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, with the packages above them
    (but not its own: those are loaded before it)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (file, is_package) in modules.items():
        own = _ancestors(name) | ({name} if is_package else set())
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), str(file))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                loaded = _imported(node, name, is_package, set(modules))
                above = set().union(*map(_ancestors, loaded)) & set(modules) - own
                graph[name].update((loaded | above) - {name})
    return graph


def package_graph(package: Path) -> dict[str, set[str]]:
    """The import graph collapsed to packages: unit -> the units its modules import.

    A package without subpackages is one unit, its `__init__` included. The modules directly
    in a package that has subpackages (`webagents/agent.py`, `webagents/skills/base.py`) are
    the layers between those subpackages and count one by one; its `__init__` is a unit too.
    """
    modules = _modules(package)
    packages = {name for name, (_, is_package) in modules.items() if is_package}
    parents = {name.rpartition(".")[0] for name in packages}

    def unit(module: str) -> str:
        enclosing = module if modules[module][1] else module.rpartition(".")[0]
        return module if enclosing in parents else enclosing

    graph: dict[str, set[str]] = {unit(name): set() for name in modules}
    for module, targets in import_graph(package).items():
        graph[unit(module)].update({unit(target) for target in targets} - {unit(module)})
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


def check_no_circle(package: Path, *, packages: bool = False, leave_out: str = "") -> None:
    """Fail naming every circle; `leave_out`: a package whose own circles are not looked at
    (those with a member outside it still are)."""
    graph = package_graph(package) if packages else import_graph(package)
    found = [
        circle
        for circle in circles(graph)
        if not (leave_out and all(_within(member, leave_out) for member in circle))
    ]
    if found:
        what = "packages" if packages else "modules"
        pytest.fail(
            f"the import graph of {what} has a circle; make the imports flow one way:\n"
            + "\n".join(f"{len(c)} {what}:\n{describe(graph, c)}" for c in found),
            pytrace=False,
        )


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_layers_src_webagents_has_no_import_circle() -> None:
    check_no_circle(SRC)


def test_layers_src_webagents_has_no_import_circle_among_packages() -> None:
    check_no_circle(SRC, packages=True, leave_out="webagents.portal")


def test_layers_the_portals_feature_packages_have_no_import_circle() -> None:
    check_no_circle(SRC, packages=True)


# The portal's layers, lowest first, as webagents/portal/__init__.py describes them: names
# relative to the portal ("" is its own `__init__`), a package's name covering its modules.
PORTAL_LAYERS: tuple[tuple[str, ...], ...] = (
    ("", "errors", "scope", "storable", "json_body", "body_limit", "static", "settings", "db"),
    ("embeddings",),
    ("tokens",),
    ("web",),
    ("accounts", "refusal"),
    ("agents", "cli_login"),
    ("chats", "memory"),
    ("connect",),
    ("app", "background", "admin"),
)


def _layer_of(name: str, layers: tuple[tuple[str, ...], ...]) -> tuple[int, str] | None:
    """The layer of a unit (its index) and the member that holds it."""
    for index, members in enumerate(layers):
        for member in members:
            if name == member or (member and name.startswith(member + ".")):
                return index, member
    return None


def check_layers(package: Path, root: str, layers: tuple[tuple[str, ...], ...]) -> None:
    """Fail naming every import of a unit of `root` (a package under `package`) that goes up
    its layers, or across to another member of its layer (the first layer, the base,
    excepted: its members may use each other), and every unit that is in no layer."""
    graph = package_graph(package)
    if not any(_within(unit, root) for unit in graph):
        pytest.fail(f"{package} has no package {root}", pytrace=False)
    breaches: list[str] = []
    for unit in sorted(graph):
        if not _within(unit, root):
            continue
        name = unit.removeprefix(root).removeprefix(".")
        found = _layer_of(name, layers)
        if found is None:
            breaches.append(f"  {unit} is in no layer: add it to the layer it belongs to")
            continue
        layer, member = found
        for target in sorted(graph[unit]):
            if not _within(target, root):
                continue
            target_found = _layer_of(target.removeprefix(root).removeprefix("."), layers)
            if target_found is None:
                continue  # named as in no layer
            target_layer, target_member = target_found
            if target_layer > layer or (target_layer == layer > 0 and target_member != member):
                where = "above" if target_layer > layer else "beside"
                breaches.append(f"  {unit} -> {target}: {target_member} is {where} it")
    if breaches:
        pytest.fail(
            f"the layers of {root} are broken; import only from the layers below:\n"
            + "\n".join(breaches),
            pytrace=False,
        )


def test_layers_the_portals_packages_import_only_from_the_layers_below() -> None:
    check_layers(SRC, "webagents.portal", PORTAL_LAYERS)


def test_layers_an_import_up_the_layers_is_named(tmp_path: Path) -> None:
    """An import upward, one across a layer, and a module in no layer each fail; within the
    base, and downward, none does."""
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/portal/__init__.py": "",
            "pkg/portal/errors.py": "from .settings import X\n",
            "pkg/portal/settings.py": "import json\n",
            "pkg/portal/accounts/__init__.py": "",
            "pkg/portal/accounts/auth.py": "from ..errors import E\nfrom ..agents.pages import P\n",
            "pkg/portal/agents/__init__.py": "",
            "pkg/portal/agents/pages.py": "from ..accounts.auth import A\n",
            "pkg/portal/chats/__init__.py": "",
            "pkg/portal/chats/api.py": "from ..memory import M\nfrom ..agents import pages\n",
            "pkg/portal/memory/__init__.py": "",
            "pkg/portal/stray.py": "",
        },
    )
    layers = (("", "errors", "settings"), ("accounts",), ("agents",), ("chats", "memory"))
    with pytest.raises(pytest.fail.Exception) as caught:
        check_layers(package, "pkg.portal", layers)
    assert str(caught.value) == (
        "the layers of pkg.portal are broken; import only from the layers below:\n"
        "  pkg.portal.accounts -> pkg.portal.agents: agents is above it\n"
        "  pkg.portal.chats -> pkg.portal.memory: memory is beside it\n"
        "  pkg.portal.stray is in no layer: add it to the layer it belongs to"
    )
    with pytest.raises(pytest.fail.Exception, match=r"has no package pkg\.chat$"):
        check_layers(package, "pkg.chat", layers)
    # Each import downward (or within the base) once the upward one is gone and the layers
    # name every module and put memory below chats.
    (package / "portal" / "accounts" / "auth.py").write_text("from ..errors import E\n")
    check_layers(package, "pkg.portal", (*layers[:3], ("stray", "memory"), ("chats",)))


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
        "pkg.agent": {"pkg.skills", "pkg.skills.base"},
        "pkg.leaf": {"pkg.agent"},
        "pkg.skills": set(),
        "pkg.skills.base": {"pkg.agent"},
    }
    assert circles(graph) == [["pkg.agent", "pkg.skills.base"]]
    with pytest.raises(pytest.fail.Exception) as caught:
        check_no_circle(package)
    assert str(caught.value) == (
        "the import graph of modules has a circle; make the imports flow one way:\n"
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


def test_layers_importing_a_module_depends_on_the_packages_above_it(tmp_path: Path) -> None:
    """A skill package whose `__init__` loads the skill, and a sync the skill uses that
    imports one module of the skill's package: no two modules import each other, but
    importing `sync` alone runs `skill/__init__`, which imports `sync` half made."""
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/skill/__init__.py": "from .main import Skill\n",
            "pkg/skill/main.py": "from ..link.sync import Sync\n",
            "pkg/skill/notes.py": "import json\n",
            "pkg/link/__init__.py": "",
            "pkg/link/sync.py": "from ..skill.notes import json\n",
        },
    )
    graph = import_graph(package)
    assert graph == {
        "pkg": set(),
        "pkg.link": set(),
        "pkg.link.sync": {"pkg.skill", "pkg.skill.notes"},
        "pkg.skill": {"pkg.skill.main"},
        "pkg.skill.main": {"pkg.link", "pkg.link.sync"},
        "pkg.skill.notes": set(),
    }
    assert circles(graph) == [["pkg.link.sync", "pkg.skill", "pkg.skill.main"]]


def test_layers_two_packages_importing_each_other_are_a_circle(tmp_path: Path) -> None:
    """No module circle (nor one through a package's `__init__`), but the two packages each
    use the other: collapsed to packages, a circle."""
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/base.py": "import json\n",
            "pkg/skill/__init__.py": "",
            "pkg/skill/main.py": "from ..link.chats import send\n",
            "pkg/skill/protocol.py": "import json\n",
            "pkg/link/__init__.py": "",
            "pkg/link/chats.py": "from ..skill.protocol import json\nfrom .. import base\n",
        },
    )
    check_no_circle(package)
    assert package_graph(package) == {
        "pkg": set(),
        "pkg.base": set(),
        "pkg.link": {"pkg.base", "pkg.skill"},
        "pkg.skill": {"pkg.link"},
    }
    with pytest.raises(pytest.fail.Exception) as caught:
        check_no_circle(package, packages=True)
    assert str(caught.value) == (
        "the import graph of packages has a circle; make the imports flow one way:\n"
        "2 packages:\n"
        "  pkg.link -> pkg.skill\n"
        "  pkg.skill -> pkg.link"
    )
    check_no_circle(package, packages=True, leave_out="pkg")


def _test_modules_imported(file: Path) -> set[str]:
    """The `test_*` modules a file imports (their last name part), relative imports too."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), str(file))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            candidates = [source, *(f"{source}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(
            name.rpartition(".")[2]
            for name in candidates
            if name.rpartition(".")[2].startswith("test_")
        )
    return found


def test_layers_no_test_module_imports_another_test_module() -> None:
    """Shared helpers live in conftest.py or a helper module (not named `test_*`): a test
    file can change without breaking another, and running one loads no other's tests."""
    tests = Path(__file__).resolve().parent
    importing = {
        str(file.relative_to(tests)): sorted(found)
        for file in sorted(tests.rglob("*.py"))
        if (found := _test_modules_imported(file))
    }
    assert importing == {}
