"""The layout ARCHITECTURE.md describes: rooms on floors, imports only downward, no circles, small modules."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: The floor of each room (ARCHITECTURE.md, "Layers"); a module may import its own floor and those below.
FLOORS = {
    "protocols": 1,
    "pianode.mesh": 2,
    "pianode.mesh.node": 3,
    "pianode.mesh.udp": 3,
    "pianode.mesh.mmsg": 3,
    "pianode.mesh.group_listener": 3,
    "pianode.prudp": 3,
    "pianode.capture": 3,
    "pianode.lan": 4,
    "pianode.ldn": 4,
    "pianode.sim": 5,
    "pianode.relay": 5,
    "pianode.wireshark": 5,
    "pianode.bench": 6,
    "pianode.cli": 7,
    "pianode": 8,  # the package itself, __main__ and the 0.1 aliases
}
#: The node's sans-IO parts: state machines that take `now`, never the event loop or a socket.
SANS_IO_FORBIDDEN = {"trio", "socket", "asyncio", "time", "select", "selectors", "anyio"}


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for top in ("pianode", "protocols"):
        for path in sorted((ROOT / top).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


MODULES = _modules()


def _imports(name: str, path: pathlib.Path) -> set[str]:
    """Every project module *name* imports, anywhere in it (functions and TYPE_CHECKING blocks too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _floor(name: str) -> int:
    best = max((room for room in FLOORS if name == room or name.startswith(room + ".")), key=len)
    return FLOORS[best]


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_inventory_is_complete() -> None:
    assert "pianode.mesh.session" in MODULES and "protocols.pia.packet" in MODULES
    assert all(_floor(name) for name in MODULES)


def test_no_import_circle() -> None:
    assert _strongly_connected(GRAPH) == []


def test_a_circle_would_be_found() -> None:
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["pianode.mesh.wire"].add("pianode.mesh.session")
    assert any({"pianode.mesh.session", "pianode.mesh.wire"} <= set(c) for c in _strongly_connected(graph))


def test_no_module_imports_a_higher_floor() -> None:
    upward = sorted(
        f"{name} (floor {_floor(name)}) imports {target} (floor {_floor(target)})"
        for name, targets in GRAPH.items()
        for target in targets
        if _floor(target) > _floor(name)
    )
    assert upward == []


@pytest.mark.parametrize(
    "name", sorted(n for n in MODULES if n.startswith("pianode.mesh.") and _floor(n) == FLOORS["pianode.mesh"])
)
def test_the_node_parts_are_sans_io(name: str) -> None:
    tree = ast.parse(MODULES[name].read_text())
    used = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    used |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    assert used & SANS_IO_FORBIDDEN == set()


def test_modules_and_classes_stay_small() -> None:
    big = []
    for name, path in MODULES.items():
        source = path.read_text()
        lines = source.count("\n") + 1
        if lines > 900:
            big.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > 600:
                    big.append(f"{name}.{node.name}: {size} lines")
    assert big == []
