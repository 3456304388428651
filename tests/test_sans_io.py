"""protocols/ stays sans-IO: no I/O, clock or event-loop imports anywhere in it."""

from __future__ import annotations

import ast
import pathlib

FORBIDDEN = {"trio", "socket", "asyncio", "time", "logging", "select", "selectors", "anyio"}
ROOT = pathlib.Path(__file__).resolve().parents[1] / "protocols"


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_protocols_imports_no_io_modules() -> None:
    files = sorted(ROOT.rglob("*.py"))
    assert files, "protocols/ has no modules"
    offenders = {str(p.relative_to(ROOT)): sorted(_imports(p) & FORBIDDEN) for p in files}
    assert {k: v for k, v in offenders.items() if v} == {}
