"""Ctrl-C and SIGTERM end every command the same documented way, from its first instruction on.

Theory of operation: :func:`install` (the first thing ``python -m pianode`` does, before any import
that takes time) makes SIGINT raise ``KeyboardInterrupt`` even when the shell started the program with
it ignored, and turns SIGTERM into a SIGINT of this process after noting it.  So a command is stopped
by either signal at any moment (while importing, parsing, binding, running under Trio, whose own
SIGINT handler delivers it at a safe point) through the one path of Ctrl-C: it prints its summary
where it has one and :func:`words` says which signal it was: ``interrupted``, exit status 130, or
``terminated``, exit status 143.  A command that watches SIGTERM itself (:class:`pianode.cli.common.Stop`:
``node``, ``lan``, ``ldn``, ``prudp``, ``relay serve``) takes it while it runs as the end of its
``--duration`` instead, as its help says.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

__all__ = ["install", "install_early", "report", "words"]

_terminated = False


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _terminated
    _terminated = True
    os.kill(os.getpid(), signal.SIGINT)  # handled as a Ctrl-C once this handler returns


def install() -> None:
    """SIGINT raises KeyboardInterrupt (even if inherited as ignored); SIGTERM does the same, noted as such."""
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (a test calling main())
        pass


def _stop_now(signum: int, frame: FrameType | None) -> None:
    """Before a command starts: say the signal and end the process at once (see :func:`install_early`)."""
    line, status = ("terminated", 143) if signum == signal.SIGTERM else ("interrupted", 130)
    try:
        os.write(2, f"{line}\n".encode())
    except OSError:
        pass
    os._exit(status)


def install_early() -> None:
    """Until :func:`install`: SIGINT and SIGTERM end the process at once, with their line and status.

    While the program imports and parses its command line no command has started, so there is nothing to
    finish or clean up.  A ``KeyboardInterrupt`` raised there could also be lost: CPython drops an
    exception raised inside a weakref callback (the import machinery runs some), and the command then ran
    on to its end (about one stop in 160 that landed during the imports).  A handler that ends the process
    itself cannot be lost that way.  The line goes out with one ``write`` (no Python buffer: the signal
    may land in the middle of another write)."""
    try:
        signal.signal(signal.SIGINT, _stop_now)
        signal.signal(signal.SIGTERM, _stop_now)
    except ValueError:  # not the main thread
        pass


def _ignore_signals() -> None:
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:  # not the main thread (a test calling main())
        pass


def words() -> tuple[str, str, int]:
    """(the line on stderr, the signal in words, the exit status) of the interruption that ended the command."""
    return ("terminated", "SIGTERM", 143) if _terminated else ("interrupted", "Ctrl-C", 130)


def report() -> int:
    """Say the interruption on stderr in one line; its exit status.

    The program is ending: a signal after this one changes nothing, so both are ignored from here on.
    Without that, a signal still pending (a second Ctrl-C, or the SIGINT :func:`_on_sigterm` sends when
    the first was already being handled) raised KeyboardInterrupt on the way out, and the process died
    by SIGINT after saying ``interrupted`` (about one run in five stopped while importing)."""
    _ignore_signals()
    line, _, status = words()
    try:
        print(line, file=sys.stderr)
    except (OSError, ValueError):
        pass
    return status
