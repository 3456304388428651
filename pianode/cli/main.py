"""The ``pianode`` command line.

Each subcommand lives in its own module and registers itself through
``add_parser(subparsers)``; its handler returns an exit status.  Errors a user
can cause (a bad flag, an unreadable file, an undocumented version, an address
this machine cannot bind) become one line on stderr and exit status 2; a
failure at run time (no host, refused, timed out) one line and exit status 1;
Ctrl-C ``interrupted`` and exit status 130.  Never a traceback (``-vv`` shows
one for an internal error).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import re
import socket
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from pianode.cli import interrupt
from pianode.cli.common import DEPRECATIONS, CliError, CliFailure
from protocols.errors import ConfigError
from protocols.text import printable

__all__ = ["COMMANDS", "build_parser", "main"]

# The subcommands, in the order `pianode --help` lists them: name, module, the one-line help that
# `pianode --help` shows (the module's add_parser gives the same words; tests/pianode/cli/test_cli_startup.py
# checks they agree).  A new command is one line here.  Only the module of the command being run is
# imported, so `pianode --help` and `pianode decode` pay for nothing else (issue 21).
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("mesh", "pianode.cli.mesh", "start N local nodes, form a Pia mesh and exchange data"),
    ("node", "pianode.cli.node", "run one node (create a mesh or join one)"),
    ("decode", "pianode.cli.decode", "decode Pia/PRUDP datagrams from a capture (pcap, pcapng, JSON Lines, hex)"),
    ("lan", "pianode.cli.lan", "LAN mode: host a session or browse for sessions (UDP broadcast)"),
    ("ldn", "pianode.cli.ldn", "LDN mode, simulated on loopback: host, scan for and join networks"),
    ("prudp", "pianode.cli.prudp", "PRUDP echo host and round-trip client"),
    ("bench", "pianode.cli.bench", "measure codec, receive rate, formation, memory, RTT and the real-time session"),
    ("wireshark", "pianode.cli.wireshark", "the Wireshark Lua dissector for Pia and PRUDP: print its path or install it"),
    ("relay", "pianode.cli.relay", "a hub that joins meshes across places (QUIC, mutual TLS), and its CA"),
)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        # "argument --rate: --rate must be ..." (our value checks name their flag themselves) → "--rate must be ..."
        if (m := re.fullmatch(r"argument (\S+): (--\S+) (.*)", message, re.S)) and m[2] in m[1].split("/"):
            message = f"{m[2]} {m[3]}"
        # A command of commands given none ("pianode lan"): say which may follow, in the one line.
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and message == (
                f"the following arguments are required: {action.metavar or action.dest}"
            ):
                *first, last = list(action.choices)
                choices = f"{', '.join(first)} or {last}" if first else last
                message = f"{action.metavar or 'a command'} missing: give {choices}"
        self.exit(2, f"{self.prog}: {printable(message)} (see {self.prog} --help)\n")

    def _print_message(self, message: str, file: Any = None) -> None:
        # argparse swallows a failed write: help or usage to a full or broken standard output ended with exit
        # status 0 and nothing said.  The failure goes up to main(), which says it.
        if message:
            (file or sys.stderr).write(message)


def _program_version() -> str:
    try:
        from importlib.metadata import version

        return version("pianode")
    except Exception:  # pragma: no cover - not installed (run from a source tree)
        return "0.1.0"


class _ProgramVersion(argparse.Action):
    """``-V``: print the program's version and exit (looked up only then: importlib.metadata is slow to import)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kwargs.get("help"))

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(f"pianode {_program_version()}")
        parser.exit()


def _add_verbosity(p: argparse.ArgumentParser, *, top: bool) -> None:
    # Accepted before and after the subcommand: the subcommand's own copies count into other names
    # (a subparser would otherwise overwrite what the top level parsed), and main() adds them up.
    prefix = "" if top else "sub_"
    p.add_argument("-v", "--verbose", dest=f"{prefix}verbose", action="count", default=0 if top else argparse.SUPPRESS,
                   help="log state changes (-v) and every dropped datagram with its reason (-vv)")
    p.add_argument("-q", "--quiet", dest=f"{prefix}quiet", action="store_true", default=False if top else argparse.SUPPRESS,
                   help="print only the result (and errors)")


class _SubParsers(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Every parser made through it (subcommands and their actions) accepts -v/-q and says errors in one line;
    a command of commands needs one of them (``pianode lan`` alone is an error line, not its help)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["required"] = True
        super().__init__(*args, **kwargs)

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        parser = super().add_parser(name, **kwargs)
        parser.register("action", "parsers", _SubParsers)
        _add_verbosity(parser, top=False)
        return parser  # type: ignore[no-any-return]


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand *argv* names: its first word that is not a flag (the top-level flags take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser: every command's own parser when *argv* is None, else only the named command's.

    The other commands get a parser that only carries their help line, so `pianode --help` lists them
    and a mistyped command gets argparse's "invalid choice" with every name.
    """
    wanted = None if argv is None else _command_in(argv)
    parser = _Parser(
        prog="pianode",
        description="Nintendo Pia peer-to-peer nodes, LAN/LDN simulation, PRUDP and a capture decoder.",
    )
    parser.register("action", "parsers", _SubParsers)
    _add_verbosity(parser, top=True)
    parser.add_argument("-V", action=_ProgramVersion,
                        help="print the program's version and exit (--version after a command is the Pia version)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name, help_line in COMMANDS:
        if argv is not None and name != wanted:
            sub.add_parser(name, help=help_line)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # not built yet
            raise
        module.add_parser(sub)
    return parser


def _leaf_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the command *argv* runs (``lan host``'s for ``lan host ...``)."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            break
        parser = subs[0].choices.get(word, parser)
    return parser


def _command_name(args: argparse.Namespace) -> str:
    words = ["pianode", getattr(args, "command", None) or ""]
    for attr in ("lan_command", "ldn_command", "prudp_command", "relay_command", "ca_command"):
        if getattr(args, attr, None):
            words.append(getattr(args, attr))
    return " ".join(w for w in words if w)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command *argv* (default: the program's arguments); its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = " ".join(["pianode", *[word for word in [_command_in(argv)] if word]])
    closed = _open_standard_streams()
    if "stdout" in closed:
        # Checked before anything runs: every command prints its result, which nobody could read.
        print(f"{prog}: standard output is closed: nothing it prints could be read (redirect it to a file,"
              " or to /dev/null to discard it)", file=sys.stderr)
        return 2
    # This process's own streams (a test's captured ones cannot fail) say how a write to them failed.
    wrapped = sys.stdout is sys.__stdout__, sys.stderr is sys.__stderr__
    if wrapped[0]:
        if getattr(sys.stdout, "errors", None) == "strict":  # PYTHONIOENCODING=ascii, a locale of another charset:
            with contextlib.suppress(AttributeError, ValueError):  # a table's → shown as \u2192, not a failure
                sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
        sys.stdout = _Stdout(sys.stdout)  # type: ignore[assignment]
    if wrapped[1]:
        sys.stderr = _Stderr(sys.stderr)  # type: ignore[assignment]
    try:
        try:
            status = _main(argv)
        except _StdoutError as exc:  # help, usage or the program's version could not be written
            return _say_stdout_failed(prog, exc)
        return _finish_output(prog, status)
    finally:
        if wrapped[0] and isinstance(sys.stdout, _Stdout):
            sys.stdout = sys.stdout.stream
        if wrapped[1] and isinstance(sys.stderr, _Stderr):
            sys.stderr = sys.stderr.stream


def _open_standard_streams() -> list[str]:
    """The standard streams this process was started without (closed: ``>&-``), each opened on /dev/null.

    A closed descriptor 0, 1 or 2 would be taken by the next file or socket the command opens: a recording
    would then get what is written to "standard error" (and a station process started by ``mesh
    --processes`` would print into it), and with descriptor 2 closed, Python's ``print(..., file=sys.stderr)``
    prints to standard output.  So each is opened on /dev/null, standard error's Python stream too (an error
    line then goes nowhere, the exit status still says it); the caller refuses a closed standard output."""
    closed = []
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        closed.append(name)
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free number: *fd*, as the ones below are open
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if "stderr" in closed:
        sys.stderr = open(2, "w", errors="backslashreplace", closefd=False)  # noqa: SIM115 - the process's stderr
    return closed


class _StdoutError(OSError):
    """A write to standard output failed (a full disk, /dev/full, an I/O error), a closed pipe aside."""


class _Stdout:
    """``sys.stdout`` while a command runs: the same stream, but a write or flush that fails says it was
    standard output's (an OSError from a write names no file), so that it is said as such."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self.stream.write(text))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _StdoutError(exc.errno, exc.strerror) from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _StdoutError(exc.errno, exc.strerror) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class _Stderr:
    """``sys.stderr`` while a command runs: a line that cannot be written there (``2>/dev/full``, a closed
    pipe) is dropped, and standard error goes to /dev/null from then on.  There is nowhere else to say it,
    and the exit status must stay the command's (a failed write was a traceback and exit status 1)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self.stream.write(text))
        except OSError:
            self._discard()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError:
            self._discard()

    def _discard(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())
        os.close(devnull)
        with contextlib.suppress(OSError):
            self.stream.flush()  # what was buffered goes to /dev/null, not to the interpreter's exit

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _discard_stdout() -> None:
    """From now on standard output goes to /dev/null (what is still buffered too), so the interpreter's own
    flush at exit can neither fail ("Exception ignored ...") nor block."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _say_stdout_failed(prog: str, exc: OSError) -> int:
    _discard_stdout()
    print(f"{prog}: cannot write standard output: {exc.strerror or exc}", file=sys.stderr)
    return 2


def _finish_output(prog: str, status: int) -> int:
    """Standard output's last bytes go out now, where a failure can still be said in one line: left to the
    interpreter's exit, a full disk was a traceback or "Exception ignored", and a help text lost, exit 0.
    A reader that went away (``| head -1``) is not an error: the status stays the command's."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
    except OSError as exc:
        if status != 0:  # the command already said why it failed, in its one line
            _discard_stdout()
            return status
        return _say_stdout_failed(prog, exc)
    return status


def _main(argv: list[str]) -> int:
    if argv in (["--version"], ["-V"]):  # `pianode --version`: the program; after a command: the Pia version
        print(f"pianode {_program_version()}")
        return 0
    try:
        parser = build_parser(argv)
        # Before the command, a flag is the program's (pianode -v decode ...): one the program does not know is
        # said as such, even when the command has one of that name, or no command follows to say it.
        command = _command_in(argv)
        before = argv[: argv.index(command)] if command is not None else argv
        unknown = [w for w in before
                   if w != "--" and (found := parser._parse_optional(w)) is not None and found[0] is None]
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        args, extras = parser.parse_known_args(argv)
        if extras:  # said by the command they were given to, pointing at its own --help
            _leaf_parser(parser, argv).error(f"unrecognized arguments: {' '.join(extras)}")
    except SystemExit as exc:  # --help, or a bad flag (argparse printed its one line)
        DEPRECATIONS.clear()
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:  # while the command's module imports
        DEPRECATIONS.clear()
        return interrupt.report()
    verbose = args.verbose + getattr(args, "sub_verbose", 0)
    args.verbose = verbose
    args.quiet = args.quiet or getattr(args, "sub_quiet", False)
    import logging

    level = logging.ERROR if args.quiet else logging.WARNING - 10 * min(verbose, 2)
    # -v and -vv are pianode's own loggers (the README's promise); other libraries (aioquic's "quic") keep
    # to warnings and errors, and -q to errors.
    logging.basicConfig(level=max(level, logging.WARNING), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("pianode").setLevel(level)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    command = _command_name(args)
    if args.quiet and verbose:
        # -q prints only the result, -v logs more than the default: one of the two would be ignored.
        print(f"{command}: -q (print only the result) and -v (log more) contradict each other: give one of them",
              file=sys.stderr)  # fmt: skip
        DEPRECATIONS.clear()
        return 2
    # Ctrl-C (SIGINT) always ends a command the documented way, even when started with SIGINT ignored
    # (a shell's background job): the command leaves, prints "interrupted" and exits 130; SIGTERM the
    # same way, "terminated" and 143, where the command does not take it as its end (pianode.cli.interrupt).
    interrupt.install()
    try:
        status = int(handler(args))
    except BaseException as exc:  # noqa: BLE001 - every way out becomes one line and an exit status
        status = report(exc, command, verbose=verbose)
    if status not in (2, 130):
        for note in DEPRECATIONS:
            print(f"{command}: note: {note}", file=sys.stderr)
    DEPRECATIONS.clear()
    return status


def _leaves(exc: BaseException) -> list[BaseException]:
    if sys.version_info < (3, 11):  # pragma: no cover
        from exceptiongroup import BaseExceptionGroup as group_type  # (imported here: start-up stays light)
    else:
        group_type = BaseExceptionGroup
    if isinstance(exc, group_type):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


#: Socket errors that mean the user's setting cannot work (exit 2); other OSErrors are run-time failures.
_BAD_INPUT_ERRNOS = {errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES, errno.ENOENT, errno.EISDIR,
                     errno.ENOTDIR, errno.EINVAL, errno.EPERM, errno.EROFS}  # fmt: skip


def _describe_os_error(exc: OSError) -> str:
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the address: {exc.strerror or exc}"
    text = exc.strerror or str(exc)
    if exc.filename is not None:
        text = f"{exc.filename}: {text}"
    if exc.errno == errno.EADDRINUSE:
        text += " (the port is busy: pick another or 0 for any free port)"
    elif exc.errno == errno.EADDRNOTAVAIL:
        text += " (not an address of this machine: use 127.0.0.x or a local interface's address)"
    return text


def report(exc: BaseException, command: str, *, verbose: int = 0) -> int:
    """Turn whatever ended a command into one line on stderr and its exit status."""
    leaves = _leaves(exc)
    if any(isinstance(e, KeyboardInterrupt) for e in leaves):
        return interrupt.report()
    if any(isinstance(e, SystemExit) for e in leaves):
        code = next(e.code for e in leaves if isinstance(e, SystemExit))
        return code if isinstance(code, int) else (0 if code is None else 2)
    if all(isinstance(e, BrokenPipeError) for e in leaves):
        # The reader went away (`pianode decode x | head`): not an error of ours.
        _discard_stdout()
        return 0
    refused = [e for e in leaves if isinstance(e, _StdoutError)]
    if refused:  # a full disk under `> out.txt`, /dev/full
        return _say_stdout_failed(command, refused[0])
    # The most telling leaf: the user's own error first, then settings, then the rest.
    # Trio's timeout can only be what ended the command if the command imported Trio.
    too_slow: Any = getattr(sys.modules.get("trio"), "TooSlowError", ())
    order = (CliError, ConfigError, CliFailure, OSError, ValueError, too_slow)
    leaf = next((e for kind in order for e in leaves if isinstance(e, kind)), leaves[0])
    if isinstance(leaf, CliError):
        message, status = str(leaf), 2
    elif isinstance(leaf, ConfigError):
        message = str(leaf).replace("(allow the nearest version to use it anyway)",
                                    "(--allow-nearest-version uses the nearest anyway)")
        message, status = " ".join(message.split()), 2
    elif isinstance(leaf, CliFailure):
        message, status = str(leaf), 1
    elif isinstance(leaf, OSError):
        bad_input = isinstance(leaf, socket.gaierror) or leaf.errno in _BAD_INPUT_ERRNOS
        message, status = _describe_os_error(leaf), (2 if bad_input else 1)
    elif isinstance(leaf, ValueError):
        message, status = str(leaf), 2
    elif isinstance(leaf, too_slow):
        message, status = "timed out", 1
    else:
        if verbose >= 2:
            traceback.print_exception(exc)
        message = f"internal error: {type(leaf).__name__}: {leaf} (-vv shows the traceback)"
        status = 1
    if status == 2 and DEPRECATIONS:
        message += f" (note: {'; '.join(DEPRECATIONS)})"
    # A value or a path in the message shows its line breaks and escapes escaped: one line, nothing a terminal acts on.
    print(f"{command}: {printable(message)}", file=sys.stderr)
    return status
