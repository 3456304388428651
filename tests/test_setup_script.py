"""The README's test command runs on a fresh machine: ``scripts/setup`` installs tshark, as root or via sudo.

The script runs here with stand-ins for ``id``, ``sudo``, ``apt-get`` and ``debconf-set-selections``
that only log how they were called (nothing is installed), and with a ``PATH`` that has no tshark.
``.ci/run`` must run exactly the README's test command, which calls the script.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SETUP = ROOT / "scripts" / "setup"


def _stub(bin_dir: pathlib.Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/bash\n{body}\n")
    path.chmod(0o755)


def _run_setup(tmp_path: pathlib.Path, uid: int, *, sudo: bool = True, tshark: bool = False) -> tuple[int, str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    record = f'echo "$(basename "$0") $*" >> {log}'
    _stub(bin_dir, "id", f"echo {uid}")
    _stub(bin_dir, "apt-get", record)
    _stub(bin_dir, "debconf-set-selections", f"{record}; cat >/dev/null")
    if sudo:
        _stub(bin_dir, "sudo", f'{record}\n[ "$1" = -n ] && shift\n[ "$1" = true ] && exit 0\nexec "$@"')
    if tshark:
        _stub(bin_dir, "tshark", "exit 0")
    for tool in ("env", "basename", "cat"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    out = subprocess.run(["/bin/bash", str(SETUP)], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
                         env={"PATH": str(bin_dir), "HOME": str(tmp_path)})  # fmt: skip
    return out.returncode, out.stderr, log.read_text() if log.exists() else ""


def test_as_root_it_installs_tshark_with_apt_get_quietly(tmp_path: pathlib.Path) -> None:
    code, err, calls = _run_setup(tmp_path, uid=0)
    assert code == 0 and err == ""
    lines = calls.splitlines()
    assert "sudo" not in calls
    assert lines[-1] == "apt-get install -y -qq --no-install-recommends tshark"
    assert "apt-get update -qq" in lines


def test_as_a_user_it_goes_through_sudo(tmp_path: pathlib.Path) -> None:
    code, err, calls = _run_setup(tmp_path, uid=1000)
    assert code == 0 and err == ""
    assert "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tshark" in calls
    assert calls.splitlines()[-1] == "apt-get install -y -qq --no-install-recommends tshark"


def test_nothing_happens_when_tshark_is_there(tmp_path: pathlib.Path) -> None:
    code, err, calls = _run_setup(tmp_path, uid=0, tshark=True)
    assert (code, err, calls) == (0, "", "")


def test_without_root_or_sudo_it_says_so_in_one_line(tmp_path: pathlib.Path) -> None:
    code, err, calls = _run_setup(tmp_path, uid=1000, sudo=False)
    assert code == 0 and calls == ""
    assert err.splitlines() == [
        "scripts/setup: not root and no usable sudo: run 'sudo apt-get install tshark' once (the tshark checks will fail)"
    ]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```sh\n(.+?)\n```", readme)
    test_command = next(c for c in commands if "pytest" in c)
    assert test_command.startswith("scripts/setup && ")
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == test_command
    assert "test_record.py" not in (ROOT / ".ci" / "run").read_text()
    assert os.access(SETUP, os.X_OK) and os.access(ROOT / ".ci" / "run", os.X_OK)


@pytest.mark.parametrize("name", ["LICENSE"])
def test_license_file_matches_pyproject(name: str) -> None:
    text = (ROOT / name).read_text()
    assert text.startswith("MIT License")
    assert 'license = { text = "MIT" }' in (ROOT / "pyproject.toml").read_text()
