"""``pianode wireshark path|install``: where the Lua dissector is, and copying it where Wireshark loads it.

``path`` prints the dissector's path (``tshark -X lua_script:$(pianode wireshark
path)`` loads it for one run).  ``install`` copies it into the personal Lua
plugin folder (:func:`pianode.wireshark.plugin_dir`, or ``--dir``) and prints
where it went; Wireshark loads it at its next start.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from pianode.cli.common import CliError, check_output_dir, printable

__all__ = ["add_parser", "run_install", "run_path"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "wireshark",
        help="the Wireshark Lua dissector for Pia and PRUDP: print its path or install it",
        description="pianode ships a Lua dissector for Wireshark 4.x (Pia, LAN browse, PRUDP v0/v1/Lite).",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    path = actions.add_parser("path", help="print the dissector's path (for tshark -X lua_script:PATH)")
    path.set_defaults(handler=run_path)
    inst = actions.add_parser("install", help="copy the dissector into your Wireshark plugin folder")
    inst.add_argument("--dir", metavar="DIR", help="plugin folder (default: Wireshark's personal Lua plugin folder)")
    inst.set_defaults(handler=run_install)


def run_path(args: argparse.Namespace) -> int:
    from pianode.wireshark import DISSECTOR_PATH

    print(DISSECTOR_PATH)
    return 0


def run_install(args: argparse.Namespace) -> int:
    from pianode.wireshark import DISSECTOR_PATH, plugin_dir

    if args.dir is not None:
        target_dir = Path(str(check_output_dir("--dir", args.dir)))
    else:
        target_dir = plugin_dir()
        if not target_dir.is_absolute():  # HOME empty or relative: it would land wherever this runs
            raise CliError(f"Wireshark's plugin folder is not known: it came out as {str(target_dir)!r}, not an"
                           " absolute path (is HOME set?); give the folder with --dir DIR")
    if target_dir.exists() and not target_dir.is_dir():
        raise CliError(f"{target_dir} exists and is not a folder")
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / DISSECTOR_PATH.name
        shutil.copyfile(DISSECTOR_PATH, target)
    except OSError as exc:
        raise CliError(f"cannot install into {target_dir}: {exc.strerror or exc}") from None
    print(printable(f"installed {target} (Wireshark loads it at its next start)"))  # one line, whatever the path holds
    return 0
