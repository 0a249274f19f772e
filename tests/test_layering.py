"""Package layering rules, computed from the source with `ast` (nothing is imported to check them).

- `streaming` never imports `foundry`; `stackbase` (the neutral safety layer under both) imports neither; the
  model never imports `torch.distributed`.
- The import graph of `src/` has no cycles, between modules or between packages (`foundry.<pkg>` and
  `streaming.<pkg>` as nodes). Every `import` statement counts, function-local ones included: an import
  moved into a function to dodge a cycle still runs, so it is still an edge. Imports under
  `if TYPE_CHECKING:` are excluded: they never run, so they are not runtime edges (annotations only).
- No module imports another module's private name (`from a.b import _x`, or `a.b._x` on an imported
  module). A package's own `__init__` importing from its submodules is the package's business, not a
  cross-module use.
- No component imports `foundry.tasks`: the tasks wire components together, never the other way round.
  Components are every `foundry` module outside `foundry.tasks`, `foundry.config` (the schema) included.
- `streaming` is folded by concern: its top level holds only `STREAMING_TOP` (so it does not regrow);
  `streaming.util` imports nothing of `streaming`; `streaming.loader` builds on `streaming.reader`, never the
  reverse; and a `reader` or `loader` module outside `STREAMING_FACES` (the machinery behind
  `StreamingDataset` / `StreamingDataLoader`) is imported only from its own package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOTS = ("foundry", "streaming", "stackbase")
TOP = "foundry.tasks"
"""The wiring: the one foundry package allowed to import every other (only `train.py`, outside `src/`, imports it)."""
STREAMING_TOP = {"__init__.py", "__main__.py", "safepath.py"}
"""The only modules at `src/streaming/`'s top level: the package (lazy public names), `python -m streaming`, and
`safepath`, an alias of `streaming.util.safepath` at the path SECURITY.md names."""
STREAMING_FACES = {
    "streaming.reader": {"dataset", "stream", "local", "world", "batch_read"},
    "streaming.loader": {"dataloader"},
}
"""The modules of `streaming.reader` / `streaming.loader` that other packages may import: the public classes
(`StreamingDataset`, `Stream`, `LocalDataset`, `World`, `StreamingDataLoader` and its collator types) and the
batch read path (`ColumnBatch`, read by the loader's workers and foundry's collator). The rest is internal."""


@dataclass(frozen=True)
class Import:
    """One runtime import: the module it names and the names it takes from it (empty for `import m`)."""

    importer: str
    module: str
    names: tuple[str, ...]
    line: int


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for root in ROOTS for p in sorted(SRC.joinpath(root).rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of `tree` (function bodies included) except the body of `if TYPE_CHECKING:` blocks."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for node in child.orelse:
                yield node
                yield from _runtime_nodes(node)
            continue
        yield child
        yield from _runtime_nodes(child)


def _absolute(importer: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    is_package = _modules()[importer].name == "__init__.py"
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join([*base, *([node.module] if node.module else [])])


@cache
def _imports(module: str) -> tuple[Import, ...]:
    tree = ast.parse(_modules()[module].read_text(), filename=str(_modules()[module]))
    found: list[Import] = []
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(module, alias.name, (), node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            found.append(Import(module, _absolute(module, node), names, node.lineno))
    return tuple(found)


def _ours(name: str) -> str | None:
    """The longest prefix of the dotted `name` that is one of our modules (None for third-party)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in _modules():
            return ".".join(parts[:end])
    return None


def _targets(imp: Import) -> set[str]:
    """Our modules that `imp` loads by name (`from pkg import submodule` loads the submodule)."""
    base = _ours(imp.module)
    if base is None:
        return set()
    subs = {f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in _modules()}
    return subs | {base} if len(subs) < len(imp.names) or not imp.names else subs


def _module_graph() -> dict[str, set[str]]:
    return {m: {t for imp in _imports(m) for t in _targets(imp)} - {m} for m in _modules()}


def _package(module: str) -> str:
    """`foundry.train.loop` -> `foundry.train`; a top-level module (`foundry.config`) is its own node."""
    return ".".join(module.split(".")[:2])


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in _module_graph().items():
        edges = graph.setdefault(_package(module), set())
        edges.update(_package(t) for t in targets if _package(t) != _package(module))
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle path per strongly connected component of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_path_within(graph, c) for c in components]


def _path_within(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first node, as `[a, b, ..., a]`."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    raise AssertionError(f"not a cycle: {component}")


def _evidence(src: str, dst: str, node: Callable[[str], str]) -> str:
    """The first import statement behind the edge `src -> dst` (`node` maps a module to its graph node)."""
    for module in _modules():
        if node(module) == src:
            for imp in _imports(module):
                if any(node(t) == dst for t in _targets(imp)):
                    return f"{module}:{imp.line}"
    return "?"


def _format_cycles(graph: dict[str, set[str]], node: Callable[[str], str]) -> str:
    """Each cycle's path, then every edge among the nodes on it or on cycles through them, with its import."""
    lines = ["import cycles (each edge names the import statement behind it):"]
    for cycle in _cycles(graph):
        lines.append("  " + " -> ".join(cycle))
        members = {m for m in graph if m in _reach(graph, cycle[0]) and cycle[0] in _reach(graph, m)}
        edges = sorted((a, b) for a in members for b in graph[a] & members)
        lines.extend(f"    {a} -> {b}: {_evidence(a, b, node)}" for a, b in edges)
    return "\n".join(lines)


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_cycle_finder_reports_the_path():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]


def test_type_checking_imports_are_not_runtime_edges():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\nelse:\n    import b\n"
    )
    imported = {alias.name for n in _runtime_nodes(tree) if isinstance(n, ast.Import) for alias in n.names}
    assert imported == {"b"}


def test_no_module_import_cycles():
    graph = _module_graph()
    assert _cycles(graph) == [], _format_cycles(graph, lambda m: m)


def test_no_package_import_cycles():
    graph = _package_graph()
    assert _cycles(graph) == [], _format_cycles(graph, _package)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_package_init(importer: str, module: str) -> bool:
    """True when `importer` is a package `__init__` and `module` one of that package's submodules."""
    return _modules()[importer].name == "__init__.py" and module.startswith(importer + ".")


def _private_from_imports(module: str) -> list[str]:
    return [
        f"{module}:{imp.line} imports {name} from {imp.module}"
        for imp in _imports(module)
        if _ours(imp.module) is not None
        and imp.module != module
        and not _own_package_init(module, imp.module)
        for name in imp.names
        if _is_private(name)
    ]


def _module_aliases(module: str) -> dict[str, str]:
    """Local names bound to our modules: `import a.b` (binds `a`), `import a.b as x`, `from a import b`."""
    tree = ast.parse(_modules()[module].read_text())
    aliases: dict[str, str] = {}
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in _modules():
                    aliases[alias.asname] = alias.name
                elif _ours(alias.name):
                    aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node)
            for alias in node.names:
                if f"{base}.{alias.name}" in _modules():
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
    return aliases


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _private_attribute_uses(module: str) -> list[str]:
    aliases = _module_aliases(module)
    found = []
    for node in ast.walk(ast.parse(_modules()[module].read_text())):
        chain = _dotted(node) if isinstance(node, ast.Attribute) else None
        if not chain or chain[0] not in aliases:
            continue
        prefix, attr = ".".join([aliases[chain[0]], *chain[1:-1]]), chain[-1]
        if prefix in _modules() and prefix != module and _is_private(attr):
            found.append(f"{module}:{node.lineno} uses {prefix}.{attr}")
    return found


def test_no_module_imports_another_modules_private_name():
    offenders = [o for m in _modules() for o in (*_private_from_imports(m), *_private_attribute_uses(m))]
    assert offenders == [], (
        "private names used across modules (make them public or move them):\n" + "\n".join(offenders)
    )


def test_no_component_imports_tasks():
    offenders = [
        f"{imp.importer}:{imp.line} imports {imp.module}"
        for module in _modules()
        if module.split(".")[0] == "foundry" and _package(module) != TOP
        for imp in _imports(module)
        if any(_package(t) == TOP for t in _targets(imp))
    ]
    assert offenders == [], "components must not import foundry.tasks (the wiring):\n" + "\n".join(offenders)


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_streaming_never_imports_foundry_statically():
    offenders = [
        str(p.relative_to(SRC))
        for p in SRC.joinpath("streaming").rglob("*.py")
        if any(m == "foundry" or m.startswith("foundry.") for m in _imported_modules(p))
    ]
    assert offenders == []


def test_stackbase_imports_neither_package():
    offenders = [
        str(p.relative_to(SRC))
        for p in SRC.joinpath("stackbase").rglob("*.py")
        for m in _imported_modules(p)
        if m.split(".")[0] in ("foundry", "streaming")
    ]
    assert offenders == []


def test_streaming_import_does_not_load_foundry():
    code = (
        "import sys, streaming, streaming.writers.mds, streaming.reader.local\n"
        "assert not any(m == 'foundry' or m.startswith('foundry.') for m in sys.modules), 'foundry loaded'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_streaming_top_level_holds_only_the_allowed_modules():
    found = {p.name for p in SRC.joinpath("streaming").glob("*.py")}
    assert found == STREAMING_TOP, (
        f"src/streaming/ top level: {sorted(found - STREAMING_TOP)} not allowed, {sorted(STREAMING_TOP - found)} "
        "missing; a module belongs in a sub-package (reader, loader, util, ...), see streaming/__init__.py"
    )


def test_streaming_safepath_only_aliases_util():
    assert _module_graph()["streaming.safepath"] == {"streaming.util.safepath"}


def _streaming_imports(importers: Callable[[str], bool]) -> Iterator[tuple[Import, str]]:
    """Each runtime import by a module matching `importers`, with each `streaming` module it loads."""
    for module in _modules():
        if importers(module):
            for imp in _imports(module):
                for target in _targets(imp):
                    if target.split(".")[0] == "streaming":
                        yield imp, target


def test_streaming_util_imports_nothing_of_streaming():
    offenders = [
        f"{imp.importer}:{imp.line} imports {target}"
        for imp, target in _streaming_imports(lambda m: m.startswith("streaming.util."))
        if not target.startswith("streaming.util")
    ]
    assert offenders == [], "streaming.util is the leaf under streaming:\n" + "\n".join(offenders)


def test_streaming_reader_never_imports_the_loader():
    offenders = [
        f"{imp.importer}:{imp.line} imports {target}"
        for imp, target in _streaming_imports(lambda m: _package(m) == "streaming.reader")
        if _package(target) == "streaming.loader"
    ]
    assert offenders == [], "the loader builds on the reader, not the reverse:\n" + "\n".join(offenders)


def test_reader_and_loader_internals_stay_in_their_package():
    offenders = [
        f"{imp.importer}:{imp.line} imports {target}"
        for imp, target in _streaming_imports(lambda m: True)
        if _package(target) in STREAMING_FACES
        and target != _package(target)
        and _package(imp.importer) != _package(target)
        and target.split(".")[2] not in STREAMING_FACES[_package(target)]
    ]
    assert offenders == [], (
        "internal reader/loader modules imported from outside their package (import a face, STREAMING_FACES, "
        "or add one):\n" + "\n".join(offenders)
    )


def test_streaming_is_ours_not_mosaicml():
    import streaming

    assert Path(streaming.__file__).resolve().is_relative_to(SRC)


def test_models_never_import_torch_distributed():
    models = SRC / "foundry" / "models"
    offenders = [
        str(p.relative_to(SRC))
        for p in models.rglob("*.py")
        if any(m.startswith("torch.distributed") for m in _imported_modules(p))
    ]
    assert offenders == []
