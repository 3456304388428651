"""``pianode wireshark path|install`` and the ``--decrypted-pcap`` flag's errors."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from wireshark_tools import TSHARK_TIMEOUT, pianode, tshark

from pianode.wireshark import DISSECTOR_PATH, plugin_dir


def test_path_prints_the_shipped_dissector() -> None:
    status, out, err = pianode("wireshark", "path")
    assert status == 0 and err == ""
    assert Path(out.strip()) == DISSECTOR_PATH
    assert DISSECTOR_PATH.is_file() and DISSECTOR_PATH.read_text().startswith("-- pianode.lua")


def test_install_copies_where_wireshark_loads_lua_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          captures: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # moves the configuration, not the plugins
    status, out, err = pianode("wireshark", "install")
    assert status == 0, err
    target = plugin_dir() / "pianode.lua"
    assert str(target) in out
    assert target.read_bytes() == DISSECTOR_PATH.read_bytes()
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    folders = subprocess.run([tshark(), "-G", "folders"], capture_output=True, text=True, env=env,
                             timeout=TSHARK_TIMEOUT, check=True).stdout
    lua_dirs = [line.split("\t")[-1].strip() for line in folders.splitlines()
                if line.startswith("Personal Lua Plugins")]
    assert lua_dirs == [str(plugin_dir())]
    # Without tshark on PATH the folder is worked out the same way Wireshark does.
    assert plugin_dir({"HOME": str(home), "PATH": ""}) == Path(lua_dirs[0])
    # Without -X: Wireshark finds the installed plugin on its own.
    proc = subprocess.run([tshark(), "-n", "-r", str(captures / "nDPI-nintendo.pcap"), "-Y", "frame.number == 1",
                           "-T", "fields", "-e", "pia.connection_id"],
                          capture_output=True, text=True, env=env, timeout=TSHARK_TIMEOUT, check=False)
    assert proc.returncode == 0 and proc.stdout.split() == ["86"], proc.stderr
    # Installing again replaces the copy.
    assert pianode("wireshark", "install")[0] == 0


def test_install_dir_option_and_its_errors(tmp_path: Path) -> None:
    status, out, _ = pianode("wireshark", "install", "--dir", str(tmp_path / "plugins"))
    assert status == 0 and (tmp_path / "plugins" / "pianode.lua").is_file()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    status, out, err = pianode("wireshark", "install", "--dir", str(blocker))
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "not a folder" in err and "Traceback" not in err


@pytest.mark.parametrize("home", ["", "relative/home"])
def test_install_without_an_absolute_home_says_so_and_writes_nothing(
    home: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HOME empty or relative (and tshark's answer then relative): the plugin folder is not known, so nothing
    is copied into wherever the command happens to run (it was, with exit 0)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", home)
    status, out, err = pianode("wireshark", "install")
    assert status == 2 and out == "", (status, out, err)
    assert err.count("\n") == 1 and "HOME" in err and "--dir" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["wireshark"], ["wireshark", "nonsense"]])
def test_bad_wireshark_arguments_are_one_line_status_2(argv: list[str]) -> None:
    status, out, err = pianode(*argv)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err


def test_decrypted_pcap_errors(tmp_path: Path, captures: Path) -> None:
    src = str(captures / "mgba-uds-frames.jsonl")
    for target in (tmp_path, tmp_path / "missing" / "out.pcapng"):
        status, out, err = pianode("decode", src, "--version", "4.10", "--decrypted-pcap", str(target))
        assert status == 2 and out == "", err
        assert err.count("\n") == 1 and err.startswith("pianode decode: --decrypted-pcap") and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # no partial file left behind


def test_decrypted_pcap_of_a_file_that_is_no_capture(tmp_path: Path) -> None:
    bogus = tmp_path / "not-a-capture.bin"
    bogus.write_bytes(b"\x00\x01\x02 definitely not pcap" * 10)
    out = tmp_path / "out.pcapng"
    status, stdout, err = pianode("decode", str(bogus), "--decrypted-pcap", str(out))
    assert status == 2 and stdout == "" and err.count("\n") == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-a-capture.bin"]
