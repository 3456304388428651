"""Wireshark support: the Lua dissector shipped with pianode and decrypted pcapng exports.

* :data:`DISSECTOR_PATH` — ``pianode.lua``, a dissector for Wireshark 4.x (Pia,
  LAN browse, the simulated LDN discovery channel, PRUDP v0/v1/Lite).  Its
  tables are generated from ``protocols/`` (:mod:`pianode.wireshark.tables`).
* :mod:`pianode.wireshark.export` — ``pianode decode --decrypted-pcap``.
* :func:`plugin_dir` — where ``pianode wireshark install`` copies the dissector.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DISSECTOR_PATH", "plugin_dir"]

DISSECTOR_PATH = Path(__file__).with_name("pianode.lua")


def plugin_dir(environ: dict[str, str] | None = None) -> Path:
    """The personal Lua plugin folder of Wireshark 4.x, where Lua scripts are loaded from at start.

    On Linux and macOS Wireshark takes it from ``$HOME`` (``~/.local/lib/wireshark/plugins``;
    unlike its configuration folder, ``XDG_CONFIG_HOME`` does not move it: ``tshark -G folders``
    prints it as "Personal Lua Plugins"); on Windows it is ``%APPDATA%\\Wireshark\\plugins``.
    """
    env = os.environ if environ is None else environ
    if os.name == "nt" and env.get("APPDATA"):
        return Path(env["APPDATA"]) / "Wireshark" / "plugins"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".local" / "lib" / "wireshark" / "plugins"
