"""pianode bench: the speed benchmark (the same engine as scripts/bench.py).

Measures the codec, the receive path, mesh formation, memory, RTT and the
32-station 60 Hz session, and prints a table with every figure against its
target (PASS or FAIL); --json FILE also writes the figures as JSON.  Exit status
0 when every targeted figure passed, 1 when one failed.
"""

from __future__ import annotations

import argparse
from typing import Any

from pianode.bench.figures import SECTIONS
from pianode.bench.run import add_arguments, run_from_args
from pianode.cli.common import CliError, check_output_dir, check_output_path, number_arg, version_arg

__all__ = ["add_parser"]

#: The command line's bounds on the engine's knobs (lo, hi, integer, lo_open): checked while parsing, so a
#: bad value is one line naming its flag before anything is measured.  The upper bounds keep a run finite.
_BOUNDS: dict[str, tuple[float, float, bool, bool]] = {
    "repeats": (1, 1000, True, False),
    "rounds": (1, 1000, True, False),
    "datagrams": (100, 4_000_000, True, False),
    "stations": (2, 32, True, False),
    "rtt_pings": (1, 1_000_000, True, False),
    "cell_seconds": (0, 3600, False, True),
    "receive_seconds": (0, 3600, False, True),
    "session_seconds": (0, 3600, False, True),
    "floor_seconds": (0, 3600, False, True),
    "rate": (0, 240, False, True),
}
#: Comma lists: (element check, what the list may not be).
_LISTS: dict[str, tuple[float, float]] = {"sizes": (0, 4096), "formation_sizes": (2, 32)}


def _list_of(flag: str, item: Any) -> Any:
    def parse(text: str) -> tuple[Any, ...]:
        items = [x.strip() for x in text.split(",")]
        if not any(items):
            raise argparse.ArgumentTypeError(f"{flag} needs a comma list, got {text!r}")
        if not all(items):  # "codec,,rtt": a slip, never a list meant as written
            raise argparse.ArgumentTypeError(f"{flag} has an empty item in {text!r}: one value between each two commas")
        return tuple(item(x) for x in items)

    return parse


def _section(text: str) -> str:
    if text not in SECTIONS:
        raise argparse.ArgumentTypeError(f"unknown section {text!r}; choose from {', '.join(SECTIONS)}")
    return text


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="measure codec, receive rate, formation, memory, RTT and the real-time session",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    for action in p._actions:
        flag = action.option_strings[-1] if action.option_strings else ""
        if action.dest in _BOUNDS:
            lo, hi, integer, lo_open = _BOUNDS[action.dest]
            action.type = number_arg(flag, lo, hi, integer=integer, lo_open=lo_open)
        elif action.dest in _LISTS:
            lo, hi = _LISTS[action.dest]
            action.type = _list_of(flag, number_arg(flag, lo, hi, integer=True))
        elif action.dest == "sections":
            action.type = _list_of(flag, _section)
        elif action.dest == "session_version":
            action.type = _list_of(flag, lambda text: version_arg(text))
        elif action.dest == "version":
            action.type = version_arg
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    check_output_path("--json", args.json)
    args.profile = check_output_dir("--profile", args.profile)  # ~ expanded: where the profiles go
    try:
        return run_from_args(args)
    except ValueError as exc:  # the engine's own combined checks (versions, backends)
        raise CliError(str(exc)) from None
