"""pianode bench: the speed benchmark (the same engine as scripts/bench.py).

Measures the codec, the receive path, mesh formation, memory, RTT and the
32-station 60 Hz session, and prints a table with every figure against its
target (PASS or FAIL); --json FILE also writes the figures as JSON.  Exit status
0 when every targeted figure passed, 1 when one failed.
"""

from __future__ import annotations

import argparse

from pianode.bench.run import add_arguments, run_from_args

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="measure codec, receive rate, formation, memory, RTT and the real-time session",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(handler=run_from_args)
