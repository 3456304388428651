"""``python -m pianode`` and the ``pianode`` command: the command line, with Ctrl-C and SIGTERM handled from
the first instruction on (pianode.cli.interrupt)."""

from __future__ import annotations

import os
import sys

from pianode.cli import interrupt


def run() -> None:
    """Run the command line and exit with its status."""
    # First: a stop while the rest imports and the command line is read ends the process at once, with
    # its line and status (no command has started yet); main() switches to the handling of a running
    # command (interrupt.install) just before the command starts.
    interrupt.install_early()
    try:
        from pianode.cli.main import main
    except KeyboardInterrupt:  # (a SIGINT sent another way than the signal: raise_signal in a test, say)
        status = interrupt.report()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    try:
        status = main()
    except KeyboardInterrupt:
        status = interrupt.report()
    sys.exit(status)


if __name__ == "__main__":
    run()
