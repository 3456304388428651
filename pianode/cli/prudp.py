"""``pianode prudp``: an echo host and a client that measures round trips.

``pianode prudp serve --variant V [--port P]`` binds 127.0.0.1 by default and
echoes every message on every connection.  ``pianode prudp connect --variant V
HOST:PORT`` connects, sends ``--count`` messages of ``--size`` bytes, checks each
echo and prints the round-trip times.

The Rendez-Vous variant needs a certificate key (spec ../shared/spec/prudp.md
§4.3): the host signs with a private key (``--certificate-key PEM``, or a fresh
one whose public key it prints), and the client trusts a public key
(``--trust`` with a PEM file or the 64-byte key in hex).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics

import trio

from pianode.cli.common import CliError
from pianode.prudp import Settings
from pianode.prudp.endpoint import PrudpEndpoint
from pianode.prudp.echo import serve_echo
from protocols.errors import DecodeError
from protocols.prudp import VARIANTS
from protocols.prudp.rendezvous import generate_key, load_public_key, public_bytes

__all__ = ["add_parser"]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", required=True, choices=sorted(VARIANTS), help="PRUDP flavour")
    p.add_argument("--access-key", default="", help="the game's access key (checksums and signatures)")
    p.add_argument("--compression", action="store_true", help="zlib-compress DATA (NEX: both ends must agree)")
    p.add_argument("--fragment-size", type=int, default=None, help="bytes per DATA fragment (default: the variant's)")


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("prudp", help="PRUDP echo host and round-trip client")
    sub = parser.add_subparsers(dest="prudp_command", metavar="ACTION")
    parser.set_defaults(handler=lambda args: (parser.print_help(), 2)[1])

    serve = sub.add_parser("serve", help="run an echo host")
    _common(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=0, help="UDP port (default: any free port)")
    serve.add_argument("--certificate-key", type=pathlib.Path, help="Rendez-Vous: PEM private key that signs our key exchange")
    serve.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    serve.set_defaults(handler=_serve)

    connect = sub.add_parser("connect", help="connect, send messages, print round-trip figures")
    _common(connect)
    connect.add_argument("address", metavar="HOST:PORT")
    connect.add_argument("--count", type=int, default=10, help="messages to send (default 10)")
    connect.add_argument("--size", type=int, default=64, help="bytes per message (default 64)")
    connect.add_argument("--trust", help="Rendez-Vous: certificate public key, a PEM file or 64 bytes of hex")
    connect.add_argument("--timeout", type=float, default=30.0, help="give up after this many seconds")
    connect.set_defaults(handler=_connect)


def _settings(args: argparse.Namespace, certificate: object) -> Settings:
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
        return ECC.import_key(path.read_text())
    except ValueError as exc:
        raise CliError(f"{path}: not an EC private key: {exc}") from None


def _load_trust(text: str | None) -> object:
    from Crypto.PublicKey import ECC

    if text is None:
        raise CliError("the rendezvous variant needs --trust (the host's certificate public key)")
    path = pathlib.Path(text)
    try:
        if path.is_file():
            return ECC.import_key(path.read_text()).public_key()
        return load_public_key(bytes.fromhex(text))
    except (ValueError, DecodeError) as exc:
        raise CliError(f"--trust: not a P-256 public key: {exc}") from None


def _serve(args: argparse.Namespace) -> int:
    cert = _load_certificate(args.certificate_key) if args.variant == "rendezvous" else None
    settings = _settings(args, cert)

    async def main() -> None:
        endpoint = PrudpEndpoint(settings)
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(endpoint.run, (args.host, args.port))
            vport = endpoint.listen()
            print(f"listening on {host}:{port} vport 0x{vport:02x} ({args.variant})", flush=True)
            with trio.move_on_after(args.duration if args.duration is not None else float("inf")):
                await serve_echo(
                    endpoint,
                    nursery,
                    on_connect=lambda conn: print(f"{conn.id}: connected", flush=True),
                    on_close=lambda conn: print(f"{conn.id}: {conn.closed_reason}", flush=True),
                )
            nursery.cancel_scope.cancel()

    trio.run(main)
    return 0


def _connect(args: argparse.Namespace) -> int:
    from pianode.cli.common import parse_hostport

    address = parse_hostport(args.address)
    if args.count < 1 or args.size < 0:
        raise CliError("--count must be positive and --size not negative")
    cert = _load_trust(args.trust) if args.variant == "rendezvous" else None
    settings = _settings(args, cert)
    rtts: list[float] = []
    bad = 0
    error: str | None = None

    async def session(endpoint: PrudpEndpoint) -> None:
        nonlocal bad
        t0 = trio.current_time()
        conn = await endpoint.connect(address)
        print(f"connected to {address[0]}:{address[1]} in {1000 * (trio.current_time() - t0):.1f} ms", flush=True)
        for i in range(args.count):
            message = bytes((i + j) & 0xFF for j in range(args.size))
            start = trio.current_time()
            await conn.send(message)
            echo = await conn.receive()
            rtts.append(trio.current_time() - start)
            ok = echo == message
            bad += not ok
            print(f"seq={i} bytes={len(echo)} rtt={1000 * rtts[-1]:.2f} ms{'' if ok else ' MISMATCH'}", flush=True)
        await conn.close()

    async def main() -> None:
        nonlocal error
        endpoint = PrudpEndpoint(settings)
        async with trio.open_nursery() as nursery:
            await nursery.start(endpoint.run, ("127.0.0.1" if address[0].startswith("127.") else "0.0.0.0", 0))
            # errors are caught here, inside the nursery, so they reach the user as one line
            try:
                with trio.fail_after(args.timeout):
                    await session(endpoint)
            except ConnectionRefusedError as exc:
                error = str(exc)
            except trio.TooSlowError:
                error = f"no answer within {args.timeout} s"
            except trio.EndOfChannel as exc:
                error = f"connection closed: {exc}"
            nursery.cancel_scope.cancel()

    trio.run(main)
    if error is not None:
        raise CliError(error)
    ms = [1000 * r for r in rtts]
    print(
        f"{len(ms)} messages, {bad} mismatched; rtt min/avg/max/stdev = "
        f"{min(ms):.2f}/{statistics.fmean(ms):.2f}/{max(ms):.2f}/{statistics.pstdev(ms):.2f} ms",
        flush=True,
    )
    return 0 if bad == 0 else 1

