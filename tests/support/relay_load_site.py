"""A relay site in its own process, for the priority test: probes, and a bulk stream on command.

    python relay_load_site.py HUB_IP:PORT CA.pem SITE.pem SITE.key TARGET_IP

It connects to the hub, prints ``ready ADDRESS`` and then, until ``quit``:

* sends a probe datagram every 5 ms to TARGET_IP:49152 through the relay: the
  sender's ``time.monotonic()`` (one clock for every process of the machine)
  and the current phase number, then 200 bytes of padding;
* pings the hub on the control stream every 10 ms, timing each pong;
* in a phase ``phase N bulk``, keeps its bulk stream to TARGET_IP saturated
  (megabytes always waiting); ``phase N idle`` drops the waiting bulk.

A phase's first 0.2 s are marked phase 0 (settling, not counted).  ``quit``
prints one JSON line: ping round trips per phase, and per phase the least bulk
backlog seen (above 0: bulk was waiting the whole phase).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time

import trio

from pianode.relay.certificates import load_credentials
from pianode.relay.client import RelayClient

SETTLE = 0.2
PROBE_PORT = 49152


def _waiting_bulk(site: RelayClient) -> int:
    conn = site.conn
    if conn is None:
        return 0
    stream = conn.quic._streams.get(4)
    unsent = 0 if stream is None else stream.sender._buffer_stop - stream.sender.next_offset
    return conn.bulk_backlog + unsent


async def main() -> None:
    host, port = sys.argv[1].rsplit(":", 1)
    creds = load_credentials(sys.argv[2], sys.argv[3], sys.argv[4])
    target = sys.argv[5]
    client = RelayClient(creds, (host, int(port)), log_line=lambda line: None)
    state = {"phase": 0, "bulk": False}
    pings: dict[int, list[float]] = {}
    backlog_min: dict[int, int] = {}
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        sock = client.site.socket(socket.AF_INET, socket.SOCK_DGRAM)
        await sock.bind((client.address, PROBE_PORT))
        client.on_pong = lambda token, rtt: pings.setdefault(state["phase"], []).append(rtt) if state["phase"] else None
        print(f"ready {client.address}", flush=True)

        async def probes() -> None:
            while True:
                await sock.sendto(struct.pack("!dI", time.monotonic(), state["phase"]) + bytes(200), (target, PROBE_PORT))
                await trio.sleep(0.005)

        async def pinger() -> None:
            while True:
                if client.conn is not None:
                    client.ping()
                await trio.sleep(0.01)

        async def bulk() -> None:
            while True:
                if state["bulk"] and client.conn is not None:
                    waiting = _waiting_bulk(client)
                    if state["phase"]:
                        backlog_min[state["phase"]] = min(backlog_min.get(state["phase"], waiting), waiting)
                    while _waiting_bulk(client) < 2_000_000:
                        client.send_bulk(target, "capture", bytes(200_000))
                await trio.sleep(0.01)

        nursery.start_soon(probes)
        nursery.start_soon(pinger)
        nursery.start_soon(bulk)
        stdin = trio.lowlevel.FdStream(os.dup(0))
        buffer = b""
        while True:
            chunk = await stdin.receive_some(4096)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                words = line.decode().split()
                if words == ["quit"]:
                    print(json.dumps({"pings": pings, "backlog_min": backlog_min}), flush=True)
                    nursery.cancel_scope.cancel()
                    return
                _, number, kind = words
                state["phase"], state["bulk"] = 0, kind == "bulk"
                if kind != "bulk" and client.conn is not None:
                    client.conn.drop_queued_bulk()
                nursery.start_soon(_begin, state, int(number))
        nursery.cancel_scope.cancel()


async def _begin(state: dict[str, int | bool], number: int) -> None:
    await trio.sleep(SETTLE)
    state["phase"] = number


if __name__ == "__main__":
    trio.run(main)
