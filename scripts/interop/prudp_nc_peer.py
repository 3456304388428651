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
    if args.substreams is not None:
        s["prudp.max_substream_id"] = args.substreams - 1
    if args.minor is not None:
        s["prudp.minor_version"] = args.minor
    if args.functions is not None:
        s["prudp.supported_functions"] = args.functions
    if args.fragment_size is not None:
        s["prudp.fragment_size"] = args.fragment_size
    return s


async def echo(client: prudp.PRUDPClient) -> None:
    """Every message back on the substream it came on; unreliable ones unreliably."""

    async def reliable(substream: int) -> None:
        while True:
            await client.send(await client.recv(substream), substream)

    async def unreliable() -> None:
        while True:
            await client.send_unreliable(await client.recv_unreliable())

    try:
        async with anyio.create_task_group() as tg:
            for substream in range(client._max_substream_id + 1):
                tg.start_soon(reliable, substream)
            tg.start_soon(unreliable)
    except* (anyio.EndOfStream, anyio.ClosedResourceError):
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
            substreams = conn._max_substream_id + 1
            for k, n in enumerate(sizes):
                message = bytes((i * 13 + n) & 0xFF for i in range(n))
                substream = k % substreams
                answer = None
                if args.unreliable:
                    await conn.send_unreliable(message)
                    with anyio.move_on_after(args.unreliable_wait):
                        answer = await conn.recv_unreliable()
                    if answer is None:
                        print(f"lost {n}", flush=True)
                        continue
                else:
                    await conn.send(message, substream)
                    answer = await conn.recv(substream)
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
    p.add_argument("--substreams", type=int, default=None, help="reliable substreams (max_substream_id + 1); "
                   "the client sends message k on substream k mod N and waits for its echo there")
    p.add_argument("--minor", type=int, default=None, help="PRUDP v1 minor version offered")
    p.add_argument("--functions", type=int, default=None, help="PRUDP v1 supported functions offered")
    p.add_argument("--fragment-size", type=int, default=None, help="largest DATA payload before fragmenting")
    p.add_argument("--unreliable", action="store_true", help="client: send unreliably, wait for an unreliable echo")
    p.add_argument("--unreliable-wait", type=float, default=2.0, help="client: seconds to wait for each such echo")
    args = p.parse_args()
    if args.role == "server":
        anyio.run(serve, args)
        return 0
    return anyio.run(client, args)


if __name__ == "__main__":
    sys.exit(main())
