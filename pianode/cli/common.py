"""What the subcommands share: flags (version, network, faults), value checks and the two error kinds.

Every check here raises :class:`CliError` with one line that names the flag and the value, and
says what is allowed; ``pianode.cli.main`` prints it and exits 2.  A failure at run time (no
host, refused, timed out) is a :class:`CliFailure`: one line, exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import ipaddress
import math
import os
import pathlib
import re
import signal
import socket
import stat
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from protocols.text import one_line, printable

if TYPE_CHECKING:  # imported where used: `pianode --help` and `pianode decode` need neither
    import trio

    from pianode.sim.faults import LinkFaults


__all__ = [
    "CliError", "CliFailure", "Stop", "add_fault_arguments", "add_network_arguments", "check_local_address", "network_for",
    "check_destination", "check_input_file", "check_name", "check_not_standard_output", "check_text", "check_output_dir", "check_output_path", "check_record_path", "relay_reads", "check_udp_free", "hex_key", "probe_udp", "render_table", "deprecated_alias", "fault_injector_from_args", "number_arg",
    "parse_bind", "parse_hostport", "parse_remote", "port_arg", "check_number", "version_arg",
]  # fmt: skip


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


class CliFailure(Exception):
    """A failure at run time (no host, refused, timed out): printed as one line, exit status 1."""


# ---------------------------------------------------------------------- numbers


def _fmt(x: float) -> str:
    if isinstance(x, int):  # exact, however large (never as a float: 99999999999999999999999, not 1e+23)
        return str(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else f"{x:g}"


def describe_range(lo: float | None, hi: float | None, *, lo_open: bool = False, integer: bool = False) -> str:
    """"an integer ≥ 0 and ≤ 65535", "a number > 0 and ≤ 240", ..."""
    kind = "an integer" if integer else "a number"
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '≥'} {_fmt(lo)}")
    if hi is not None:
        parts.append(f"≤ {_fmt(hi)}")
    return f"{kind} {' and '.join(parts)}".rstrip()


#: The forms a number is written in on the command line: ASCII digits only (no other script's digits, no
#: ``_`` between them, no spaces around), a sign allowed so that ``-1`` is refused for its range, not its form.
_DECIMAL_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_HEX_INTEGER = re.compile(r"[+-]?0[xX][0-9a-fA-F]+", re.ASCII)
_DECIMAL_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def _read_number(text: str, *, integer: bool, allow_hex: bool) -> float | None:
    """*text* read as the number it writes in one of the forms above, or None when it is in none of them.
    An integer is decimal, leading zeros and all (``04`` is 4); ``0x`` hex only with *allow_hex*.  An integer
    of thousands of digits (more than int() reads) is past every range: an infinity of its sign."""
    if not integer:
        return float(text) if _DECIMAL_NUMBER.fullmatch(text) else None
    if _DECIMAL_INTEGER.fullmatch(text):
        if len(text.lstrip("+-").lstrip("0")) > 4000:
            return -math.inf if text.startswith("-") else math.inf
        return int(text, 10)
    if allow_hex and _HEX_INTEGER.fullmatch(text):
        return int(text, 16)
    return None


def check_number(
    flag: str, text: Any, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
    integer: bool = False, allow_hex: bool = False,
) -> Any:
    """*text* (a string or a number) as an int or float in the range, or a CliError naming *flag*.  A string
    is read in decimal (an integer's leading zeros are fine: ``04`` is 4); with *allow_hex*, an integer may
    also be written ``0x`` and hex digits (only where the flag's help or output shows it so)."""
    want = describe_range(lo, hi, lo_open=lo_open, integer=integer)
    if isinstance(text, str):
        value = _read_number(text, integer=integer, allow_hex=allow_hex)
        if value is None:
            form = ("in decimal digits" + (" or as 0x and hex digits" if allow_hex else "") + " (such as 4)"
                    if integer else "as a decimal number (such as 1.5)")  # fmt: skip
            raise CliError(f"{flag} must be {want}, written {form}; got {text!r}")
        shown = one_line(text, 40)  # what the user wrote (never a float made of it)
    else:
        value = text
        shown = _fmt(value) if isinstance(value, int) or math.isfinite(value) else str(value)
    # (an int is compared as it is: exact at any size, where math.isfinite would overflow)
    if (isinstance(value, float) and not math.isfinite(value)) or (
        lo is not None and (value <= lo if lo_open else value < lo)
    ) or (hi is not None and value > hi):
        raise CliError(f"{flag} must be {want}, got {shown}")
    return value


def number_arg(
    flag: str, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, integer: bool = False,
    allow_hex: bool = False,
) -> Callable[[str], Any]:
    """An argparse ``type=``: the value checked at parse time (one line, exit 2, naming *flag*)."""

    def convert(text: str) -> Any:
        try:
            return check_number(flag, text, lo, hi, lo_open=lo_open, integer=integer, allow_hex=allow_hex)
        except CliError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = "integer" if integer else "number"
    return convert


def port_arg(flag: str, *, allow_zero: bool = True) -> Callable[[str], int]:
    return number_arg(flag, 0 if allow_zero else 1, 65535, integer=True)  # type: ignore[no-any-return]


def version_arg(text: str) -> str:
    """``--version``: a Pia version such as 5.18 (checked against the table later, spaces and all: a version
    is written with nothing around it); never empty."""
    if not text:
        raise argparse.ArgumentTypeError("--version must be a Pia version such as 5.18, got an empty string")
    return text


# ---------------------------------------------------------------------- addresses


def parse_hostport(
    text: str, default_port: int | None = None, *, flag: str | None = None, ipv6: bool = False
) -> tuple[str, int]:
    """HOST:PORT (or HOST alone when there is a *default_port*); with *ipv6*, also ``[ADDR]:PORT``."""
    where = f"{flag} " if flag else ""
    if ipv6 and text.startswith("[") and "]:" in text:
        host, _, port = text[1:].partition("]:")
        sep = ":"
    elif not ipv6 and (text.count(":") > 1 or text.startswith("[")):  # IPv6: named whole, not split at a colon
        raise CliError(f"{where}takes an IPv4 address (the node speaks UDP over IPv4), got {text!r}")
    else:
        host, sep, port = text.rpartition(":")
    if not sep:
        if default_port is None:
            raise CliError(f"{where}expected HOST:PORT, got {text!r}")
        host, port = text, str(default_port)
    if not host:
        raise CliError(f"{where}expected HOST:PORT, got {text!r}")
    low = 0 if default_port == 0 else 1
    try:
        value = int(port)
    except ValueError:
        raise CliError(f"{where}port must be an integer {low}..65535, got {port!r} in {text!r}") from None
    if not low <= value < 65536:
        raise CliError(f"{where}port must be {low}..65535, got {value} in {text!r}")
    return host, value


def parse_remote(text: str, flag: str, default_port: int | None = None) -> tuple[str, int]:
    """HOST:PORT of the other end, the host resolved to an IPv4 address now (one line naming *flag* if not)."""
    host, port = parse_hostport(text, default_port, flag=flag)
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise CliError(f"{flag} {text}: cannot resolve {host!r} ({why})") from None
    ip = str(infos[0][4][0])
    check_destination(f"{flag} {text}" + ("" if host == ip else f" ({ip})"), ipaddress.IPv4Address(ip))
    return ip, port


#: Addresses that name no single host: the limited broadcast, and 127.0.0.0/8's network and broadcast addresses.
_NOT_A_HOST = {
    ipaddress.IPv4Address("255.255.255.255"): "the broadcast address",
    ipaddress.IPv4Address("127.255.255.255"): "the broadcast address of 127.0.0.0/8",
    ipaddress.IPv4Address("127.0.0.0"): "the network address of 127.0.0.0/8",
}


def check_destination(where: str, ip: ipaddress.IPv4Address, *, broadcast: bool = False) -> None:
    """*ip* as where datagrams go, else one line starting with *where* (the flag, and the value when it
    helps).  Never 0.0.0.0: it means any address of a local socket, never a host.  Unless *broadcast* (an
    option that sends to a broadcast address on purpose), not an address of :data:`_NOT_A_HOST` either.
    Every other address is taken: a host elsewhere on a LAN may well be the one meant."""
    if ip.is_unspecified:
        example = "a broadcast address such as 127.255.255.255" if broadcast else "the other end's, such as 127.0.0.1"
        raise CliError(f"{where}: 0.0.0.0 is no address to send to (it means any address of a local socket); "
                       f"give {example}")
    if not broadcast and ip in _NOT_A_HOST:
        raise CliError(f"{where}: {ip} is {_NOT_A_HOST[ip]}, not one host's address")


def parse_bind(text: str, flag: str = "--bind", default_port: int = 0, *, allow_any: bool = False) -> tuple[str, int]:
    """``IP[:PORT]`` of a local socket: the IPv4 checked as one this machine can bind."""
    host, port = parse_hostport(text, default_port, flag=flag)
    return check_local_address(host, flag, allow_any=allow_any), port


def check_local_address(text: str, flag: str, *, allow_any: bool = False) -> str:
    """An IPv4 address of this machine (127.x, or one of its interfaces); 0.0.0.0 only if *allow_any*."""
    try:
        ip = ipaddress.IPv4Address(text)
    except ValueError:
        raise CliError(f"{flag} must be an IPv4 address such as 127.0.0.2, got {text!r}") from None
    if ip.is_unspecified and not allow_any:
        raise CliError(f"{flag} must be a specific local IPv4 address such as 127.0.0.2, not {ip}")
    if ip.is_multicast or str(ip) in ("255.255.255.255", "127.255.255.255", "127.0.0.0"):
        raise CliError(f"{flag} must be a local unicast IPv4 address, not {ip}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((str(ip), 0))
        except OSError as exc:
            raise CliError(f"{flag} {ip}: not an address of this machine ({exc.strerror or exc})") from None
    return str(ip)


def check_udp_free(flag: str, ip: str, port: int, *, shared: bool = False, any_port: bool = True) -> None:
    """Fail now, naming *flag*, if UDP *ip*:*port* (IPv4, or IPv6 with a colon) cannot be bound (port 0 always
    can).  *shared*: the socket will be bound with SO_REUSEADDR and SO_REUSEPORT (a LAN browse listener),
    so only a holder that does not share it makes it busy.  *any_port*: *flag* takes port 0 (any free
    one), which the line then suggests."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            if shared:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if hasattr(socket, "SO_REUSEPORT"):
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            s.bind((ip, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                why = "is already in use (pick another port" + (", or 0 for any free one)" if any_port else ")")
            elif exc.errno == errno.EACCES:
                why = "is not allowed (permission denied)"
            else:
                why = f"cannot be bound ({exc.strerror or exc})"
            raise CliError(f"{flag}: UDP port {port} on {ip} {why}") from None


def check_output_path(
    flag: str, path: str | None, *, reads: tuple[tuple[str, str | None], ...] = (), stdout: bool = False
) -> None:
    """A file to write at the end of a run: its directory must exist and be writable now, and it must
    not be one of the files the run *reads* (``(what, path)`` pairs): writing it would destroy them.
    ``-`` is standard output where the flag takes it (*stdout*), else refused (it would make a file
    named ``-``).  A device or FIFO (``/dev/null``) is written into as it is
    (:func:`pianode.capture.output.output_file`), so it is only checked for permission, never opened
    now: opening a FIFO waits for its reader."""
    if path is None:
        return
    if not path:
        raise CliError(f"{flag} needs a file name")
    if path == "-":
        if stdout:
            return
        raise CliError(f"{flag} -: {flag} writes a file, not standard output: give a file name (./- for a file named -)")
    p = pathlib.Path(path)
    if p.is_dir():
        raise CliError(f"{flag} {path}: is a directory")
    from pianode.capture.output import is_special

    if is_special(p):
        if not os.access(p, os.W_OK):
            raise CliError(f"{flag} {path}: not writable")
        return
    for what, source in reads:
        if source and source != "-" and p.exists() and os.path.exists(source) and os.path.samefile(p, source):
            raise CliError(f"{flag} {path}: that is the {what} being read; writing it would destroy it")
        if source == "-" and _is_standard_input(p):  # `decode - --decrypted-pcap x.pcap < x.pcap`
            raise CliError(f"{flag} {path}: that is the {what} being read (standard input); writing it would destroy it")
    parent = p.parent if str(p.parent) else pathlib.Path(".")
    if not parent.is_dir():
        raise CliError(f"{flag} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise CliError(f"{flag} {path}: not writable")
    # Permission bits do not tell everything (root passes os.access; /proc and read-only mounts refuse
    # creation): create the file now, as the run will at its end, and leave no trace of the probe.
    existed = p.exists()
    try:
        with open(p, "ab"):
            pass
    except OSError as exc:
        raise CliError(f"{flag} {path}: cannot be written ({exc.strerror or exc})") from None
    if not existed:
        with contextlib.suppress(OSError):
            p.unlink()


def _is_standard_input(path: pathlib.Path) -> bool:
    """Is *path* the file standard input reads (``< path``)?"""
    try:
        given, read = os.stat(path), os.fstat(sys.stdin.fileno())
    except (OSError, ValueError, AttributeError):  # no such file, no standard input (closed, a test's)
        return False
    return stat.S_ISREG(read.st_mode) and (given.st_dev, given.st_ino) == (read.st_dev, read.st_ino)


def check_record_path(flag: str, path: str | None, *, reads: tuple[tuple[str, str | None], ...] = ()) -> None:
    """``--record FILE.pcap``: the pcap and the ``FILE.session.json`` written beside it must both be writable now,
    and neither may be one of the files the run *reads* (``(what, path)``: the relay's certificates and key)."""
    check_output_path(flag, path, reads=reads)
    from pianode.capture.output import is_special

    if path is not None and not is_special(path):  # a device or a pipe gets no session file beside it
        from pianode.capture.session_file import session_path_for

        check_output_path(f"{flag} (its session file)", session_path_for(path), reads=reads)


def relay_reads(args: Any) -> tuple[tuple[str, str | None], ...]:
    """The relay files a command reads (``--relay-ca``, ``--relay-cert``, ``--relay-key``), for :func:`check_record_path`."""
    return tuple((f"{what} (--relay-{flag})", getattr(args, f"relay_{flag}", None))
                 for what, flag in (("relay CA certificate", "ca"), ("relay certificate", "cert"), ("relay key", "key")))


def check_not_standard_output(what: str, path: str | None) -> None:
    """A file the command reads must not be its standard output (or error) as well (``decode x.jsonl >>
    x.jsonl``): the command would read what it writes (without end, until the disk is full) or write into
    what it reads.  Refused as ``cat x >> x`` refuses it, before a byte is written (with ``>`` the shell has
    emptied it already)."""
    if not path:
        return
    try:
        source = os.fstat(sys.stdin.fileno()) if path == "-" else os.stat(path)  # `- < x >> x` as well
    except (OSError, ValueError, AttributeError):  # no such file, no standard input
        return
    for name, stream in (("output", sys.stdout), ("error", sys.stderr)):
        try:
            out = os.fstat(stream.fileno())
        except (OSError, ValueError, AttributeError):  # no descriptor (a test's captured output)
            continue
        if stat.S_ISREG(out.st_mode) and (out.st_dev, out.st_ino) == (source.st_dev, source.st_ino):
            if name == "error":  # the line that says so must not land in the file either: it goes nowhere
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
            shown = "- (standard input)" if path == "-" else path
            emptied = " (and with > the shell has emptied it already)" if source.st_size == 0 else ""
            raise CliError(f"{what} {shown} is also standard {name}: the command would read what it writes"
                           f"{emptied}; give standard {name} another file")


def check_input_file(flag: str, path: str | None) -> None:
    """A file to read: it must exist, be a file and be readable now."""
    if path is None:
        return
    if not path:  # (a caller that made it a pathlib.Path first would have "." here: pass the text as given)
        raise CliError(f"{flag} is empty: it needs a file name")
    p = pathlib.Path(path)
    if p.is_dir():
        raise CliError(f"{flag} {path}: is a directory, not a file")
    try:
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise CliError(f"{flag} {path}: {exc.strerror or exc}") from None


def check_output_dir(flag: str, path: str | None) -> str | None:
    """A folder to write into (made if missing): it must not be a file, and must be creatable now.  Returns
    it with ``~`` or ``~user`` expanded (the folder checked is the folder the command must write into)."""
    if path is None:
        return None
    if not path:
        raise CliError(f"{flag} needs a folder name")
    if path == "-":  # as for files (check_output_path): not standard output, nor a folder made by surprise
        raise CliError(f"{flag} -: {flag} names a folder, not standard output: give a folder name (./- for one named -)")
    try:
        p = pathlib.Path(path).expanduser()
    except RuntimeError:  # ~user of no user (or ~ with no HOME and no password entry)
        user = path[1:].split("/", 1)[0]
        raise CliError(f"{flag} {path}: " + (f"no user {user!r} here for ~{user}" if user else "no home folder for ~")
                       ) from None  # fmt: skip
    if p.exists() and not p.is_dir():
        raise CliError(f"{flag} {path}: exists and is not a folder")
    first_missing = None
    existing = p
    while not existing.exists():
        first_missing, existing = existing, existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise CliError(f"{flag} {path}: not writable")
    if first_missing is None:
        return str(p)
    # As for files: permission bits do not tell everything (/proc): make the folders, then take them away again.
    try:
        p.mkdir(parents=True)
    except OSError as exc:
        raise CliError(f"{flag} {path}: cannot be made ({exc.strerror or exc})") from None
    for made in [p, *p.parents]:
        with contextlib.suppress(OSError):
            made.rmdir()
        if made == first_missing:
            break
    return str(p)


#: A player name fits every field it goes into: the PlayerInfo name up to 4.10 (32 bytes of UTF-16, 16
#: characters; protocols/pia/types.py) and the LDN participant's user name (32 bytes; protocols/ldn_link.py).
NAME_MAX_CHARACTERS, NAME_MAX_BYTES = 16, 32


def check_text(flag: str, text: str | None) -> None:
    """A value the command sends or derives keys from as UTF-8 text (a name, a key given as text): a byte of
    the command line that is no UTF-8 (Python reads it as a lone surrogate) cannot be sent."""
    if text is None:
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CliError(f"{flag} must be UTF-8 text, got '{printable(text)}' (character {exc.start + 1} is a byte"
                       " that is no UTF-8)") from None


def check_name(flag: str, text: str | None) -> None:
    """A player name: 1..16 characters, at most 32 bytes of UTF-8 (:data:`NAME_MAX_CHARACTERS`), every one
    printable (it is shown by every browser of the session, as a relay room name is: the same rule)."""
    if text is None:
        return
    check_text(flag, text)
    if not text.isprintable():
        bad = next(c for c in text if not c.isprintable())
        raise CliError(f"{flag} must be printable characters (it is shown to other players), got '{printable(text)}'"
                       f" (character {text.index(bad) + 1} is U+{ord(bad):04X}, which is not)")
    size = len(text.encode("utf-8", "surrogateescape"))
    if not 1 <= len(text) <= NAME_MAX_CHARACTERS or size > NAME_MAX_BYTES:
        raise CliError(f"--name must be 1..{NAME_MAX_CHARACTERS} characters ({NAME_MAX_BYTES} bytes of UTF-8 at most), "
                       f"got {len(text)} characters")


# ---------------------------------------------------------------------- tables


def render_table(headers: list[str], rows: list[list[Any]], *, right: set[int] | None = None) -> list[str]:
    """The one table style of every command: lower-case headers (units in them), columns aligned,
    numbers right-aligned (columns in *right*), a rule under the header.  Cells are shown
    :func:`printable`: a control character in a value cannot break the table."""
    right = set() if right is None else right
    cells = [[str(h).lower() for h in headers]] + [["-" if c is None else printable(str(c)) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    out = [line(cells[0]), "-" * len(line(cells[0]))]
    out.extend(line(r) for r in cells[1:])
    return out


def hex_key(flag: str, text: str | None, size: int = 16) -> bytes | None:
    """A key given as hex (*size* bytes)."""
    if text is None:
        return None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise CliError(f"{flag} must be {2 * size} hex digits, got {text!r}") from None
    if len(key) != size:
        raise CliError(f"{flag} must be {size} bytes ({2 * size} hex digits), got {len(key)} bytes")
    return key


def probe_udp(address: tuple[str, int], timeout: float = 0.3) -> bool | None:
    """Is anything listening on UDP *address*?  False when the port is closed (ICMP port unreachable,
    which loopback reports at once), True when something took the empty datagram, None when unsure."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout)
            s.connect(address)
            s.send(b"")
            try:
                s.recv(1)
            except ConnectionRefusedError:
                return False
            except (TimeoutError, socket.timeout):
                return True
            return True
    except OSError:
        return None


# ---------------------------------------------------------------------- flags


#: Notes on old flag spellings seen while parsing; ``pianode.cli.main`` says them once the command ends
#: (on the same line as an error about bad input, so that is still one line).
DEPRECATIONS: list[str] = []


def deprecated_alias(new: str) -> type[argparse.Action]:
    """An action for an old flag spelling: stores into the new flag's dest and notes the new name."""

    class _Alias(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                     option_string: str | None = None) -> None:  # fmt: skip
            note = f"{option_string} is deprecated, use {new}"
            if note not in DEPRECATIONS:
                DEPRECATIONS.append(note)
            setattr(namespace, self.dest, True if self.nargs == 0 else values)

    return _Alias


# ---------------------------------------------------------------------- Ctrl-C


class Stop:
    """Ends a command's phases at its deadline or at the first SIGINT/SIGTERM; the command then still
    prints its summary and leaves the mesh.  ``interrupted`` says it was SIGINT (Ctrl-C): the command
    ends with :meth:`exit_if_interrupted` (``interrupted``, exit status 130)."""

    def __init__(self, deadline: float = math.inf) -> None:
        self.deadline = deadline
        self.signalled = False
        self.interrupted = False
        self._scope: trio.CancelScope | None = None
        self._started = time.monotonic()
        self._signalled_at: float | None = None

    def listened(self, timeout: float) -> str:
        """How long a scan or browse listened, for the line saying it heard nothing: ``within 5 s``, or
        ``before SIGTERM stopped it after 1.5 s`` (a stop by signal is not a timeout that ran out)."""
        if self._signalled_at is None:
            return f"within {timeout:g} s"
        return f"before SIGTERM stopped it after {self._signalled_at - self._started:.1f} s"

    @contextlib.contextmanager
    def phase(self, *, deadline: float | None = None) -> Iterator[None]:
        """A phase that ends at a signal, or at *deadline* (default: the command's)."""
        import trio

        with trio.CancelScope(deadline=self.deadline if deadline is None else deadline) as scope:
            self._scope = scope
            if self.signalled:
                scope.cancel()
            yield
        self._scope = None

    async def watch(self, *, task_status: trio.TaskStatus[None] | None = None) -> None:
        import trio

        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            if task_status is not None:
                task_status.started()
            async for signum in signals:
                self.signalled = True
                if self._signalled_at is None:
                    self._signalled_at = time.monotonic()
                self.interrupted = self.interrupted or signum == signal.SIGINT
                if self._scope is not None:
                    self._scope.cancel()

    def exit_if_interrupted(self) -> None:
        if self.interrupted:
            raise KeyboardInterrupt


def add_network_arguments(
    p: argparse.ArgumentParser, *, default_version: str | None = "5.18", version_help: str | None = None
) -> None:
    p.add_argument("--version", type=version_arg, default=default_version, help=version_help or f"Pia version (default {default_version}; e.g. 5.29)")
    p.add_argument(
        "--network", default=None, choices=("lan", "ldn", "nex", "npln"),
        help="network type (ids and nonces; default lan, or ldn for a 6.x version whose LAN the spec does not give)",
    )  # fmt: skip
    p.add_argument("--allow-nearest-version", action="store_true", help="use the nearest documented version for an undocumented one")
    p.add_argument("--backend", choices=("cryptography", "pycryptodome"), default=None, help="AEAD backend (default: fastest installed)")
    p.add_argument("--seed", type=int, default=None, help="seed for ids, keys and fault decisions (reproducible runs)")


def network_for(network: str | None, version: str, allow_nearest: bool = False) -> str:
    """``--network``, or its default for *version*: lan; nex before 5.2 (pianode.mesh.legacy); ldn for 6.32+
    (protocols.pia.session6)."""
    if network is not None:
        return network
    from protocols.pia import session6
    from protocols.errors import ConfigError
    from protocols.pia.versions import profile_for

    try:
        profile = profile_for(version, allow_nearest=allow_nearest)
    except ConfigError:
        return "lan"  # the node configuration names the problem
    if session6.is_pia6(profile):
        return session6.default_network(profile).value
    from pianode.mesh import legacy

    return legacy.default_network(profile).value  # nex before 5.2 (no LAN mode), else lan


def add_fault_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fault injection (every link, decided per packet from --seed)")
    prob = lambda flag: number_arg(flag, 0, 1)  # noqa: E731
    secs = lambda flag: number_arg(flag, 0, 60)  # noqa: E731
    g.add_argument("--loss", type=prob("--loss"), default=0.0, metavar="P", help="probability a datagram is lost (0..1)")
    g.add_argument("--dup", type=prob("--dup"), default=0.0, metavar="P", help="probability a datagram is duplicated (0..1)")
    g.add_argument("--reorder", type=prob("--reorder"), default=0.0, metavar="P",
                   help="probability a datagram is held back and overtaken (0..1)")
    g.add_argument("--delay", type=secs("--delay"), default=0.0, metavar="S", help="one-way delay in seconds (0..60)")
    g.add_argument("--jitter", type=secs("--jitter"), default=0.0, metavar="S",
                   help="extra random delay up to S seconds (0..60)")
    g.add_argument("--corrupt", type=prob("--corrupt"), default=0.0, metavar="P",
                   help="probability one bit is flipped (0..1)")
    g.add_argument("--truncate", type=prob("--truncate"), default=0.0, metavar="P",
                   help="probability a datagram is cut short (0..1)")


def fault_injector_from_args(args: argparse.Namespace) -> LinkFaults | None:
    from pianode.sim.faults import LinkFaults

    try:
        faults = LinkFaults(
            loss=args.loss,
            duplicate=args.dup,
            reorder=args.reorder,
            delay=args.delay,
            jitter=args.jitter,
            corrupt=args.corrupt,
            truncate=args.truncate,
            seed=args.seed or 0,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return None if faults.is_clean else faults


def relay_unavailable(exc: ImportError) -> CliError:
    """Why a relay command cannot run here: the [relay] extra is missing, or this Python is older than the
    3.11 that aioquic 1.7 needs (pip would not install it)."""
    if sys.version_info < (3, 11):
        return CliError(f"the relay needs Python 3.11 or newer (aioquic 1.7 requires it); this is Python"
                        f" {sys.version_info.major}.{sys.version_info.minor} ({exc})")
    return CliError(f"the relay needs aioquic and cryptography: pip install 'pianode[relay]' ({exc})")
