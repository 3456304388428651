"""``pianode wireshark install`` where HOME holds a line break: tshark's folder list is one folder a
line, so the folder it names there is cut at the break; the dissector went into another folder
(the part before the break) than the one Wireshark loads plugins from."""

from __future__ import annotations

from pathlib import Path

import pytest
from wireshark_tools import pianode

from pianode.wireshark import plugin_dir


def test_install_with_a_line_break_in_home_goes_where_wireshark_looks(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "two\nlines"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    status, out, err = pianode("wireshark", "install")
    assert status == 0, err
    want = home / ".local" / "lib" / "wireshark" / "plugins" / "pianode.lua"
    assert want.is_file()
    assert not (tmp_path / "two").exists()  # nothing beside it, under the part before the break
    assert plugin_dir() / "pianode.lua" == want
    assert out.count("\n") == 1 and "two\\x0alines" in out  # one line, the break shown escaped
