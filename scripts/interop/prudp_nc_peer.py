"""A nintendoclients (PyPI, MIT) PRUDP peer for pianode's interop tests.

Run with a Python that has ``nintendoclients`` installed (it needs 3.12+), never
with pianode's own environment:

    python prudp_nc_peer.py server --mode v0|friends|v0-alt|v1 [--compression] [--access-key K]
        prints "listening <port>" once bound to 127.0.0.1, then echoes every message
    python prudp_nc_peer.py client --mode v0|friends|v0-alt|v1 [--compression] --port P --sizes 1,2,...
        connects to 127.0.0.1:P, sends one message per size, checks each echo,
        prints "ok <size>" per message, exits 0 when every echo matched
    --ping S sets the library's keep-alive interval; --idle S makes the client wait
    S seconds after connecting, so pings run both ways before any data

``v0`` uses the library's 3DS settings file, ``friends`` its Friends settings
(signature version 1), ``v0-alt`` the 3DS settings with 1-byte type/flags and
the 4-byte checksum, and ``v1`` its default (Wii U) settings.  Loopback only.
"""

from __future__ import annotations

import argparse
import sys

import anyio
from nintendo.nex import prudp, settings


def make_settings(args: argparse.Namespace) -> settings.Settings:
    if args.mode == "v1":
        s = settings.default()
    else:
        s = settings.load("friends" if args.mode == "friends" else "3ds")
    if args.mode == "v0-alt":  # the library's alternative v0: 1-byte type/flags, 4-byte checksum
        s["prudp_v0.flags_version"] = 0
        s["prudp_v0.checksum_version"] = 0
    s["prudp.access_key"] = args.access_key
    if args.compression:
        s["prudp.compression"] = 1
    if args.ping is not None:
        s["prudp.ping_timeout"] = args.ping
    return s


async def echo(client: prudp.PRUDPClient) -> None:
    try:
        while True:
            await client.send(await client.recv())
    except anyio.EndOfStream:
        pass


async def serve(args: argparse.Namespace) -> None:
    s = make_settings(args)
    async with prudp.serve_transport(s, "127.0.0.1", 0) as transport, transport.serve(echo, 1, 10):
        print(f"listening {transport.local_address()[1]}", flush=True)
        await anyio.sleep(args.duration)


async def client(args: argparse.Namespace) -> int:
    s = make_settings(args)
    sizes = [int(x) for x in args.sizes.split(",")]
    bad = 0
    with anyio.fail_after(args.duration):
        async with prudp.connect(s, "127.0.0.1", args.port, 1, 10, disconnect_timeout=5) as conn:
            await anyio.sleep(args.idle)  # lets keep-alive pings run both ways first
            for n in sizes:
                message = bytes((i * 13 + n) & 0xFF for i in range(n))
                await conn.send(message)
                answer = await conn.recv()
                if answer == message:
                    print(f"ok {n}", flush=True)
                else:
                    bad += 1
                    print(f"mismatch {n}: got {len(answer)} bytes", flush=True)
    return 1 if bad else 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=("server", "client"))
    p.add_argument("--mode", choices=("v0", "friends", "v0-alt", "v1"), required=True)
    p.add_argument("--access-key", default="6f599f81")
    p.add_argument("--compression", action="store_true")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--sizes", default="1")
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--ping", type=float, default=None, help="seconds between the library's keep-alive pings")
    p.add_argument("--idle", type=float, default=0.0, help="client: wait this long after connecting")
    args = p.parse_args()
    if args.role == "server":
        anyio.run(serve, args)
        return 0
    return anyio.run(client, args)


if __name__ == "__main__":
    sys.exit(main())
