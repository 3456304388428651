"""pianode prudp: an echo host and a client that measures round trips.

pianode prudp serve --variant V [--bind IP[:PORT]] binds 127.0.0.1 by default and
echoes every message on every connection.  pianode prudp connect --variant V
HOST:PORT connects, sends --count messages of --size bytes, checks each
echo and prints the round-trip times.

The Rendez-Vous variant needs a certificate key (spec ../shared/spec/prudp.md
§4.3): the host signs with a private key (--certificate-key PEM, or a fresh
one whose public key it prints), and the client trusts a public key
(--trust with a PEM file or the 64-byte key in hex).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import math
import pathlib
import socket
import stat
import statistics

import trio

from pianode.cli.common import (
    CliError,
    check_text,
    CliFailure,
    Stop,
    check_input_file,
    check_local_address,
    check_udp_free,
    deprecated_alias,
    number_arg,
    parse_bind,
    parse_remote,
    port_arg,
    probe_udp,
)
from pianode.prudp import Settings
from pianode.prudp.core import IDENTIFY_PER_SECOND
from pianode.prudp.endpoint import PrudpEndpoint
from pianode.prudp.echo import serve_echo
from protocols.errors import DecodeError
from protocols.prudp import VARIANTS
from protocols.prudp.rendezvous import generate_key, load_public_key, public_bytes

__all__ = ["DROP_HINTS", "add_parser", "drop_lines"]

log = logging.getLogger("pianode.prudp")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", required=True, choices=sorted(VARIANTS), help="PRUDP flavour")
    p.add_argument("--access-key", default="", help="the game's access key (checksums and signatures)")
    p.add_argument("--compression", action="store_true", help="zlib-compress DATA (NEX: both ends must agree)")
    # (at most 60000: a fragment and its header fit the u16 payload size, as pianode.prudp.events.Settings checks)
    p.add_argument("--fragment-size", type=number_arg("--fragment-size", 16, 60000, integer=True), default=None,
                   help="bytes per DATA fragment, 16..60000 (default: the variant's)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("prudp", help="PRUDP echo host and round-trip client", description=__doc__)
    sub = parser.add_subparsers(dest="prudp_command", metavar="ACTION")

    serve = sub.add_parser("serve", help="run an echo host")
    _common(serve)
    serve.add_argument("--bind", default=None, metavar="IP[:PORT]", help="local socket (default 127.0.0.1, any free port)")
    serve.add_argument("--host", action=deprecated_alias("--bind IP"), default=None, help=argparse.SUPPRESS)
    serve.add_argument("--port", type=port_arg("--port"), action=deprecated_alias("--bind IP:PORT"), default=None,
                       help=argparse.SUPPRESS)
    serve.add_argument("--certificate-key", help="Rendez-Vous: PEM private key that signs our key exchange")
    serve.add_argument("--duration", type=number_arg("--duration", 0, 86400 * 365, lo_open=True), default=None,
                       metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    serve.set_defaults(handler=_serve)

    connect = sub.add_parser("connect", help="connect, send messages, print round-trip figures")
    _common(connect)
    connect.add_argument("address", metavar="HOST:PORT")
    connect.add_argument("--count", type=number_arg("--count", 1, 1_000_000, integer=True), default=10,
                         help="messages to send, 1..1000000 (default 10)")
    connect.add_argument("--size", type=number_arg("--size", 0, 1_000_000, integer=True), default=64,
                         help="bytes per message, 0..1000000 (default 64)")
    connect.add_argument("--trust", help="Rendez-Vous: certificate public key, a PEM file or 64 bytes of hex")
    connect.add_argument("--timeout", type=number_arg("--timeout", 0, 3600, lo_open=True), default=30.0, metavar="S",
                         help="give up after S seconds (> 0 and ≤ 3600, default 30)")
    connect.set_defaults(handler=_connect)


def _settings(args: argparse.Namespace, certificate: object) -> Settings:
    check_text("--access-key", args.access_key)  # its bytes key the checksums: UTF-8 text only
    return Settings(
        args.variant,
        access_key=args.access_key,
        compression=args.compression or None,
        fragment_size=args.fragment_size,
        certificate=certificate,
    )


def _load_certificate(path: pathlib.Path | None) -> object:
    from Crypto.PublicKey import ECC

    if path is None:
        key = generate_key()
        print(f"certificate public key (pass to --trust): {public_bytes(key).hex()}", flush=True)
        return key
    try:
        key = ECC.import_key(path.read_text())
    except ValueError as exc:
        raise CliError(f"{path}: not an EC private key: {exc}") from None
    # the host signs its key exchange with the certificate's P-256 private key (spec §4.3)
    if key.curve != "NIST P-256" or not key.has_private():
        what = "a public key only" if key.curve == "NIST P-256" else f"a {key.curve} key"
        raise CliError(f"--certificate-key {path}: the key exchange is signed with a P-256 private key, not {what}")
    return key


#: What a path that is not a regular file is, for the line that refuses it.
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def _trust_path_problem(text: str) -> str | None:
    """Why --trust *text*, which did not read as a key in hex, names no key file; None if it does not look like a
    path at all (then the hex is what was wrong).  A path holds a '/' or '.' (hex never does) or names something."""
    path = pathlib.Path(text)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if "/" in text or "." in text:
            return f"--trust {text}: no such file (give the server's public key as hex or a file holding it)"
        return None
    except OSError as exc:
        if "/" in text or "." in text:
            return f"--trust {text}: {exc.strerror or exc}"
        return None
    what = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    return f"--trust {text}: is {what}, not a key file (give the server's public key as hex or a file holding it)"


def _load_trust(text: str | None) -> object:
    from Crypto.PublicKey import ECC

    if text is None:
        raise CliError("the rendezvous variant needs --trust (the host's certificate public key)")
    if not text.strip():  # (pathlib.Path("") is ".", a directory: say what was given)
        raise CliError("--trust is empty: give the server's public key as hex or a file holding it")
    path = pathlib.Path(text)
    if path.is_file():
        try:
            key = ECC.import_key(path.read_text()).public_key()
        except OSError as exc:
            raise CliError(f"--trust {text}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise CliError(f"--trust {text}: not a P-256 public key: {exc}") from None
        if key.curve != "NIST P-256":  # the host's certificate key is P-256 (spec §4.3): another could verify nothing
            raise CliError(f"--trust: not a P-256 public key: a {key.curve} key")
        try:  # a PEM key can spell the point at infinity too (04 and zeros): the same checks as a key in hex
            load_public_key(public_bytes(key))
        except DecodeError as exc:
            raise CliError(f"--trust {text}: not a P-256 public key: {exc}") from None
        return key
    try:
        return load_public_key(bytes.fromhex(text))
    except (ValueError, DecodeError) as exc:
        raise CliError(_trust_path_problem(text) or f"--trust: not a P-256 public key: {exc}") from None


#: What each drop reason of the endpoint (pianode.prudp.core.DROP_REASONS) means for the person running it
#: ({variants}: the variants the packets were of, {ours}: --variant).  Only a packet of our variant blames the key.
DROP_HINTS = {
    "other_variant": "were of PRUDP variant {variants}, not --variant {ours} (ignored: both ends need the same variant)",
    "bad_checksum": "had a checksum that did not verify with this --access-key",
    "bad_signature": "carried a signature that did not verify with this --access-key",
    "malformed": "could not be read as PRUDP at all (too short or garbled)",
    "unidentified": f"could not be read with this --variant and --access-key (more than {IDENTIFY_PER_SECOND} a "
                    "second: not tried as the other variants)",
    "no_connection": "belonged to no connection",
    "bad_session": "named another session of their connection",
    "bad_aggregate_ack": "carried an aggregate ack that could not be read, or acked ids never sent",
    "bad_payload": "carried a payload that could not be opened (--compression differs?)",
    "bad_substream": "named a substream the connection did not negotiate",
    "beyond_window": "were too far ahead of the receive window (sent again later)",
    "hold_full": "came early while the connection already held max_held_bytes for reordering (sent again later)",
    "unexpected_handshake": "were handshake packets (SYN, CONNECT) their connection no longer expected: late "
                            "copies or replays",
    "replayed": "were unreliable DATA whose id had been seen (a duplicate or replay), or was too old to tell",
    "fragmented_unreliable": "were unreliable DATA with a fragment id other than 0 (unreliable DATA is one "
                             "whole message)",
    "repeated_in_datagram": "were copies of a packet earlier in the same datagram, or a second SYN or CONNECT in "
                            "one (answered once, not once per copy)",
    "unread_full": "came while the endpoint held max_unread_bytes its application had not read (sent again later)",
}


def _heard(stats: dict[str, int]) -> str:
    """The variants the packets of another variant were of, most heard first."""
    heard = sorted(((n, k.removeprefix("other_variant:")) for k, n in stats.items()
                    if k.startswith("other_variant:")), reverse=True)  # fmt: skip
    return " or ".join(dict.fromkeys(name for _, names in heard for name in names.split(" or "))) or "unknown"


def drop_lines(stats: dict[str, int], seen: dict[str, int], variant: str) -> list[str]:
    """One line per drop reason (and per kind of refused CONNECT) whose count grew since *seen*: how many
    packets, why, and the reason's tag."""
    lines = []
    for name in sorted(stats):
        reason = name.removeprefix("dropped_")
        new = stats[name] - seen.get(name, 0)
        if name.startswith("refused: ") and new > 0:  # a CONNECT the host refused (pianode.prudp.core._refuse)
            lines.append(f"refused {new} connection request(s): {name.removeprefix('refused: ')} [refused_connect]")
        if not name.startswith("dropped_") or new <= 0:
            continue
        hint = DROP_HINTS.get(reason, reason.replace("_", " ")).format(variants=_heard(stats), ours=variant)
        lines.append(f"dropped {new} packet(s) that {hint} [{reason}]")
    return lines


def _serve_address(args: argparse.Namespace) -> tuple[str, int]:
    if args.bind is not None:
        host, port = parse_bind(args.bind, "--bind")
    else:
        given = args.host is not None
        host = check_local_address(args.host if given else "127.0.0.1", "--host" if given else "--bind")
        port = 0
    if args.port is not None:
        port = args.port
    check_udp_free("--bind" if args.port is None else "--port", host, port)
    return host, port


def _serve(args: argparse.Namespace) -> int:
    bind = _serve_address(args)
    if args.certificate_key is not None:
        if args.variant != "rendezvous":
            raise CliError(f"--certificate-key is for --variant rendezvous, not {args.variant}")
        check_input_file("--certificate-key", args.certificate_key)  # the text as given: "" is empty, not "."
    key_path = pathlib.Path(args.certificate_key) if args.certificate_key is not None else None
    cert = _load_certificate(key_path) if args.variant == "rendezvous" else None
    settings = _settings(args, cert)
    stop = Stop(math.inf)

    async def watch_drops(endpoint: PrudpEndpoint) -> None:
        seen: dict[str, int] = {}
        while True:
            await trio.sleep(0.5)
            stats = endpoint.statistics()
            for line in drop_lines(stats, seen, args.variant):
                print(line, flush=True)
                log.info("%s", line)
            seen = dict(stats)

    async def main() -> None:
        endpoint = PrudpEndpoint(settings)
        async with trio.open_nursery() as nursery:
            await nursery.start(stop.watch)
            host, port = await nursery.start(endpoint.run, bind)
            vport = endpoint.listen()
            print(f"listening on {host}:{port} vport 0x{vport:02x} ({args.variant})", flush=True)
            nursery.start_soon(watch_drops, endpoint)
            with stop.phase(), trio.move_on_after(args.duration if args.duration is not None else math.inf):
                await serve_echo(
                    endpoint,
                    nursery,
                    on_connect=lambda conn: print(f"{conn.id}: connected", flush=True),
                    on_close=lambda conn: print(f"{conn.id}: {conn.closed_reason}", flush=True),
                )
            nursery.cancel_scope.cancel()

    trio.run(main)
    stop.exit_if_interrupted()
    return 0


def _resolve(text: str) -> tuple[str, int]:
    host, port = parse_remote(text, "HOST:PORT")
    ip = ipaddress.IPv4Address(host)
    if ip.is_multicast or ip == ipaddress.IPv4Address("255.255.255.255"):
        # a connection has one peer (spec §1.4): no server answers a group, and a broadcast SYN is not even sent
        what = "multicast group" if ip.is_multicast else "broadcast address"
        raise CliError(f"HOST:PORT must be one host's address, not the {what} {host}")
    return host, port


def _no_answer(address: tuple[str, int], args: argparse.Namespace, stats: dict[str, int]) -> str:
    where = f"{address[0]}:{address[1]}"
    other = stats.get("dropped_other_variant", 0)
    if other:
        return (f"{other} answer(s) from {where} were of PRUDP variant {_heard(stats)}, not --variant {args.variant}"
                " (ignored): is --variant the server's?")  # fmt: skip
    bad = stats.get("dropped_bad_signature", 0) + stats.get("dropped_bad_checksum", 0)
    if bad:
        return f"{bad} answer(s) from {where} of --variant {args.variant} did not verify: is --access-key the server's?"
    if probe_udp(address) is False:
        return f"no answer from {where}: nothing listens there (is the server running, and the port right?)"
    key = f"--access-key {args.access_key!r}" if args.access_key else "no --access-key"
    return (f"no answer from {where}: does the server use --variant {args.variant} and {key}? (a server ignores "
            "packets of another variant or access key; its output says which)")  # fmt: skip


def _connect(args: argparse.Namespace) -> int:
    address = _resolve(args.address)
    if args.trust is not None and args.variant != "rendezvous":
        raise CliError(f"--trust is for --variant rendezvous, not {args.variant}")
    cert = _load_trust(args.trust) if args.variant == "rendezvous" else None
    settings = _settings(args, cert)
    rtts: list[float] = []
    bad = 0
    error: str | None = None
    connected = False
    stop = Stop(math.inf)

    async def session(endpoint: PrudpEndpoint) -> None:
        nonlocal bad, connected
        t0 = trio.current_time()
        conn = await endpoint.connect(address)
        connected = True
        if not args.quiet:
            print(f"connected to {address[0]}:{address[1]} in {1000 * (trio.current_time() - t0):.1f} ms", flush=True)
        for i in range(args.count):
            message = bytes((i + j) & 0xFF for j in range(args.size))
            start = trio.current_time()
            await conn.send(message)
            echo = await conn.receive()
            rtts.append(trio.current_time() - start)
            ok = echo == message
            bad += not ok
            if not args.quiet:
                print(f"seq={i} bytes={len(echo)} rtt={1000 * rtts[-1]:.2f} ms{'' if ok else ' MISMATCH'}", flush=True)
        await conn.close()

    async def main() -> None:
        nonlocal error
        endpoint = PrudpEndpoint(settings)
        async with trio.open_nursery() as nursery:
            await nursery.start(stop.watch)
            await nursery.start(endpoint.run, ("127.0.0.1" if address[0].startswith("127.") else "0.0.0.0", 0))
            # errors are caught here, inside the nursery, so they reach the user as one line
            try:
                with stop.phase(), trio.fail_after(args.timeout):
                    await session(endpoint)
            except ConnectionRefusedError as exc:
                error = str(exc)
                if "no answer" in error:
                    error = _no_answer(address, args, endpoint.statistics())
            except trio.TooSlowError:
                if not connected:
                    error = _no_answer(address, args, endpoint.statistics())
                else:
                    # The handshake went through: the server is there and takes our handshake, so the
                    # question is the data: whether it echoes (NintendoClients' echo sends an empty
                    # message back as nothing), and whether it reads our data (variants that differ only
                    # there, such as nintendo-v0 and nintendo-v0-friends, connect alike).
                    error = (f"connected to {address[0]}:{address[1]}, but message {len(rtts)} ({args.size} bytes) "
                             f"got no echo within --timeout {args.timeout:g} s: does the server echo it, and sign "
                             f"data as --variant {args.variant} does? (variants that differ only in data connect "
                             "alike)")  # fmt: skip
            except trio.EndOfChannel as exc:
                error = f"connection closed: {exc}"
            nursery.cancel_scope.cancel()

    trio.run(main)
    stop.exit_if_interrupted()
    if error is not None:
        raise CliFailure(error)
    if not rtts:
        raise CliFailure("stopped before any echo came back")
    ms = [1000 * r for r in rtts]
    print(
        f"{len(ms)} messages, {bad} mismatched; rtt min/avg/max/stdev = "
        f"{min(ms):.2f}/{statistics.fmean(ms):.2f}/{max(ms):.2f}/{statistics.pstdev(ms):.2f} ms",
        flush=True,
    )
    return 0 if bad == 0 else 1
