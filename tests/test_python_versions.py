"""The oldest Python pyproject.toml admits (3.10) can run the code: grammar and exception groups.

The suite runs on one interpreter (3.11 and later), so syntax and names that 3.10 lacks went unnoticed:
``except*`` made ``pianode mesh`` a SyntaxError traceback on 3.10, and ``BaseExceptionGroup`` (a built-in
from 3.11, the ``exceptiongroup`` backport before, which trio installs there) a NameError on an error path.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for d in ("pianode", "protocols", "scripts") for p in (ROOT / d).rglob("*.py"))


def _oldest() -> tuple[int, int]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    m = re.fullmatch(r">=\s*3\.(\d+)", spec.strip())
    assert m, spec
    return 3, int(m.group(1))


def test_the_sources_are_found() -> None:
    assert len(SOURCES) > 100 and _oldest() == (3, 10)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_oldest_admitted_python_parses_it(path: Path) -> None:
    ast.parse(path.read_text(), filename=str(path), feature_version=_oldest())


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_exception_groups_come_from_the_backport_before_3_11(path: Path) -> None:
    tree = ast.parse(path.read_text())
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} & {"BaseExceptionGroup", "ExceptionGroup"}
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "exceptiongroup"
                for a in n.names}
    assert used <= imported, f"{path.name} uses {sorted(used - imported)} without the exceptiongroup import for 3.10"
