"""``pianode node``: run one Pia node in this process (build a mesh from several terminals).

    pianode node --create --bind 127.0.0.2:49152 --session-key 00112233445566778899aabbccddeeff
    pianode node --join 127.0.0.2:49152 --bind 127.0.0.3 --session-key 00112233445566778899aabbccddeeff

The creating node prints the command the others need.  Every node sends a
numbered reliable broadcast every ``--send-interval`` seconds and reports
events (stations joining and leaving, host changes, data) as they happen; with
``--format jsonl`` each is one JSON object per line, for scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import trio

from pianode.cli.common import CliError
from pianode.cli.common import add_network_arguments, parse_hostport
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, HostChanged, MeshDestroyed, MeshJoined, StationJoined, StationLeft
from pianode.mesh.node import JoinError, Node, open_node

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "node",
        help="run one node (create a mesh or join one)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    role = p.add_mutually_exclusive_group(required=True)
    role.add_argument("--create", action="store_true", help="create a mesh and host it")
    role.add_argument("--join", metavar="HOST:PORT", help="join the mesh hosted at HOST:PORT")
    p.add_argument("--bind", default="127.0.0.1", metavar="IP[:PORT]", help="local address (default 127.0.0.1, any port)")
    p.add_argument("--session-key", metavar="HEX", help="16-byte session key (required to join; random when creating)")
    add_network_arguments(p)
    p.add_argument("--network-id", type=lambda s: int(s, 0), default=None, help="network id (LDN; default derived from the host)")
    p.add_argument("--duration", type=float, default=None, help="seconds to run (default: until interrupted)")
    p.add_argument("--send-interval", type=float, default=1.0, help="seconds between reliable broadcasts (0: none)")
    p.add_argument("--unreliable-interval", type=float, default=0.0,
                   help="seconds between unreliable broadcasts (0: none); from 5.27 one group packet each")
    p.add_argument("--group-port", type=int, default=None, metavar="PORT",
                   help="5.27+: send each group packet once to 127.255.255.255:PORT and listen on 0.0.0.0:PORT "
                   "(every node of the session uses the same port) instead of one copy per station")
    p.add_argument("--leave", action="store_true", help="leave gracefully at the end instead of just stopping")
    p.add_argument("--format", choices=("table", "jsonl"), default="table", help="event output format")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    host, port = parse_hostport(args.bind, default_port=0)
    key = args.session_key
    if args.join and not key:
        raise CliError("--join needs --session-key (the creator prints it)")
    if args.create and not key:
        key = os.urandom(16).hex()
    if args.duration is not None and args.duration <= 0:
        raise CliError("--duration must be positive")
    if args.send_interval < 0 or args.unreliable_interval < 0:
        raise CliError("send intervals must not be negative")
    group = None
    if args.group_port is not None:
        if not 1 <= args.group_port <= 65535:
            raise CliError(f"--group-port must be 1..65535, got {args.group_port}")
        group = ("127.255.255.255", args.group_port)
    config = NodeConfig(
        version=args.version,
        network=args.network,
        bind=(host, port),
        session_key=key,
        allow_nearest_version=args.allow_nearest_version,
        aead_backend=args.backend,
        seed=args.seed,
        group_broadcast=group,
    )
    if group is not None and config.profile.footer == "none":
        raise CliError(f"--group-port needs a version with group packets (5.27+), not {config.profile.name}")
    join = parse_hostport(args.join) if args.join else None
    return trio.run(_main, args, config, join)


def _emit(args: argparse.Namespace, kind: str, **fields: Any) -> None:
    if args.format == "jsonl":
        print(json.dumps({"event": kind, **fields}, sort_keys=True), flush=True)
    else:
        text = " ".join(f"{k}={v}" for k, v in fields.items())
        print(f"[{kind}] {text}", flush=True)


async def _main(args: argparse.Namespace, config: NodeConfig, join: tuple[str, int] | None) -> int:
    received: dict[int, int] = {}
    async with open_node(config) as node:
        addr = node.address
        if join is None:
            await node.create_mesh()
            _emit(
                args,
                "created",
                address=f"{addr[0]}:{addr[1]}",
                session_key=config.session_key.hex() if config.session_key else None,
                version=config.profile.name,
                network=config.network.value,
                join_with=f"pianode node --join {addr[0]}:{addr[1]} --session-key {config.session_key.hex() if config.session_key else ''} "
                f"--version {config.profile.name} --network {config.network.value} --bind 127.0.0.N",
            )
        else:
            try:
                index = await node.join(join, network_id=args.network_id)
            except JoinError as exc:
                _emit(args, "join-failed", reason=str(exc))
                print(f"pianode node: join failed: {exc}", file=sys.stderr)
                return 1
            _emit(args, "joined", address=f"{addr[0]}:{addr[1]}", station_index=index, host_index=node.host_index)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_report, args, node, received)
            if args.send_interval > 0:
                nursery.start_soon(_sender, args, node, args.send_interval, True)
            if args.unreliable_interval > 0:
                nursery.start_soon(_sender, args, node, args.unreliable_interval, False)
            if args.duration is not None:
                await trio.sleep(args.duration)
            else:
                await trio.sleep_forever()
            if args.leave:
                await node.leave()
            nursery.cancel_scope.cancel()
        rows = [
            {
                "index": s.index,
                "host": s.is_host,
                "self": s.is_self,
                "address": f"{s.address[0]}:{s.address[1]}",
                "state": s.state,
                "rtt_ms": None if s.rtt is None else round(s.rtt * 1000, 3),
                "received": received.get(s.index, 0) if s.index is not None else 0,
            }
            for s in node.stations()
        ]
        _emit(args, "summary", station_index=node.station_index, host_index=node.host_index, stations=rows,
              drops=node.statistics()["drops"],
              group_packets_sent=node.statistics()["counters"].get("group_packets_sent", 0))  # type: ignore[union-attr]
    return 0


async def _sender(args: argparse.Namespace, node: Node, interval: float, reliable: bool) -> None:
    seq = 0
    word = "hello" if reliable else "tick"
    while True:
        await trio.sleep(interval)
        if node.session is None or node.session.closed:
            return
        await node.broadcast(f"{word} {node.station_index} #{seq}".encode(), reliable=reliable)
        seq += 1


async def _report(args: argparse.Namespace, node: Node, received: dict[int, int]) -> None:
    async for event in node.events():
        if isinstance(event, DataReceived):
            received[event.source_index] = received.get(event.source_index, 0) + 1
            _emit(args, "data", source=event.source_index, reliable=event.reliable, data=event.data.decode("utf-8", "replace"))
        elif isinstance(event, StationJoined):
            _emit(args, "station-joined", index=event.station_index, address=f"{event.address[0]}:{event.address[1]}")
        elif isinstance(event, StationLeft):
            _emit(args, "station-left", index=event.station_index, reason=event.reason)
        elif isinstance(event, HostChanged):
            _emit(args, "host-changed", old=event.old_host_index, new=event.new_host_index)
        elif isinstance(event, MeshJoined):
            pass
        elif isinstance(event, MeshDestroyed):
            _emit(args, "mesh-destroyed", reason=event.reason)
