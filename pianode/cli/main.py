"""The ``pianode`` command line.

Each subcommand lives in its own module and registers itself through
``add_parser(subparsers)``; its handler returns an exit status.  Errors a user
can cause (a bad flag, an unreadable file, an undocumented version) become one
line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from pianode.cli.common import CliError

__all__ = ["build_parser", "main"]

# Subcommand modules, in the order `pianode --help` lists them.
_COMMANDS = (
    "pianode.cli.mesh",
    "pianode.cli.node",
    "pianode.cli.decode",
    "pianode.cli.lan",
    "pianode.cli.ldn",
    "pianode.cli.prudp",
    "pianode.cli.bench",
    "pianode.cli.wireshark",
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pianode",
        description="Nintendo Pia peer-to-peer nodes, LAN/LDN simulation, PRUDP and a capture decoder.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (repeatable)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # not built yet
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`pianode decode x | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except CliError as exc:
        print(f"pianode {args.command}: {exc}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:
        # ConfigError, DecodeError from a file, a missing file: one line each.
        print(f"pianode {args.command}: {exc}", file=sys.stderr)
        return 2
