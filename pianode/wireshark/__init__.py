"""Wireshark support: the Lua dissector shipped with pianode and decrypted pcapng exports.

* :data:`DISSECTOR_PATH` — ``pianode.lua``, a dissector for Wireshark 4.x (Pia,
  LAN browse, the simulated LDN discovery channel, PRUDP v0/v1/Lite).  Its
  tables are generated from ``protocols/`` (:mod:`pianode.wireshark.tables`).
* :mod:`pianode.wireshark.export` — ``pianode decode --decrypted-pcap``.
* :func:`plugin_dir` — where ``pianode wireshark install`` copies the dissector.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["DISSECTOR_PATH", "plugin_dir"]

DISSECTOR_PATH = Path(__file__).with_name("pianode.lua")


def plugin_dir(environ: dict[str, str] | None = None) -> Path:
    """The personal Lua plugin folder of the installed Wireshark, where it loads Lua scripts from at start.

    When tshark is installed it is asked (``tshark -G folders``, "Personal Lua
    Plugins"), so whatever rule the installed version follows is respected.
    Otherwise: on Linux and macOS Wireshark 4.x takes it from ``$HOME``
    (``~/.local/lib/wireshark/plugins``; ``XDG_CONFIG_HOME`` moves its
    configuration folder, not this one), on Windows ``%APPDATA%\\Wireshark\\plugins``.
    """
    env = dict(os.environ if environ is None else environ)
    # tshark lists one folder a line: a HOME (or APPDATA) with a line break in it comes out cut at
    # the break, naming another folder than the one Wireshark loads from; then the rule below holds.
    if not any(c in env.get(name, "") for name in ("HOME", "APPDATA") for c in "\r\n"):
        asked = _ask_tshark(env)
        if asked is not None:
            return asked
    if os.name == "nt" and env.get("APPDATA"):
        return Path(env["APPDATA"]) / "Wireshark" / "plugins"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".local" / "lib" / "wireshark" / "plugins"


def _ask_tshark(env: dict[str, str]) -> Path | None:
    tshark = shutil.which("tshark", path=env.get("PATH"))
    if tshark is None:
        return None
    try:
        out = subprocess.run([tshark, "-G", "folders"], capture_output=True, text=True, env=env, timeout=20,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == "Personal Lua Plugins" and value.strip():
            return Path(value.strip())
    return None
