"""pianode node: run one Pia node in this process (build a mesh from several terminals).

    pianode node --create --bind 127.0.0.2:49152 --session-key 00112233445566778899aabbccddeeff
    pianode node --join 127.0.0.2:49152 --bind 127.0.0.3 --session-key 00112233445566778899aabbccddeeff

The creating node prints the command the others need (give each joiner its own
127.0.0.x).  Every node sends a numbered reliable broadcast every --interval
seconds and reports events (stations joining and leaving, host changes, data,
datagrams it had to drop and why) as they happen; with --format jsonl each is
one JSON object per line, for scripts.  It runs until --duration ends or Ctrl-C
(then it leaves the mesh, prints its summary and "interrupted", exit status 130).

Exit status: 0 after a normal run, 1 when the join failed (the line says why:
nothing listens there, or the host is there but did not answer: a wrong
--session-key, --version or --network), 2 for a bad flag.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

import trio

from pianode.cli.common import (
    CliError,
    CliFailure,
    Stop,
    add_network_arguments,
    network_for,
    check_udp_free,
    deprecated_alias,
    hex_key,
    number_arg,
    parse_bind,
    parse_hostport,
    parse_remote,
    port_arg,
    probe_udp,
    render_table,
)
from pianode.cli.relay import add_relay_arguments, relay_join_flags, relay_local, relay_node_config, relay_plan, run_trio
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, HostChanged, MeshDestroyed, MeshJoined, StationJoined, StationLeft
from pianode.mesh.node import JoinError, Node, open_node
from protocols.pia.versions import NetworkType, profile_for

__all__ = ["add_parser", "join_failure"]

log = logging.getLogger("pianode.mesh")

#: What each drop reason tells a person running the node.
DROP_HINTS = {
    "bad_tag": "did not authenticate with this session key (another --session-key?)",
    "malformed": "were not Pia packets of this version (another --version?)",
    "replayed": "were replays of packets already received",
    "not_member": "came from stations outside the mesh",
    "identity_mismatch": "came from an address with another station's ids",
    "unencrypted": "were unencrypted where encryption is required",
    "unexpected": "were messages that did not fit the state",
    "queue_full": "found the receive queue full",
    "not_addressed": "were addressed to other stations",
    "closed": "arrived after this node had left the mesh",
    "not_host": "were messages only the host may send",
    "other_version": "came in another Pia version's format (the sender was told which this mesh speaks)",
    "unconfirmed_restart": "claimed a station's restart that its old identity has not confirmed by silence",
    "oversized": "were larger than the node takes",
    "own_address": "came from this node's own address (it sent them to itself)",
}


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
    p.add_argument("--bind", default=None, metavar="IP[:PORT]",
                   help="local address (default 127.0.0.1, any port); with --relay: the port on the virtual "
                   "address, and the address the connection to the hub goes out from")
    p.add_argument("--session-key", metavar="HEX", help="16-byte session key (required to join; random when creating)")
    add_network_arguments(p)
    p.set_defaults(network=None)  # lan, or nex for Pia 3.x/4.x, which have no LAN mode (pianode.mesh.legacy)
    p.add_argument("--network-id", type=number_arg("--network-id", 0, 0xFFFFFFFF, integer=True, allow_hex=True), default=None,
                   help="network id, decimal or 0x hex: LDN's network id, NEX's gathering id, NPLN's network id (default derived"
                        " from the host; a creator's is printed in the joiners' command)")
    p.add_argument("--duration", type=number_arg("--duration", 0, 86400 * 365, lo_open=True), default=None,
                   metavar="S", help="seconds to run (default: until Ctrl-C)")
    p.add_argument("--interval", type=number_arg("--interval", 0, 3600), default=1.0, metavar="S",
                   help="seconds between reliable broadcasts (0: none; default 1)")
    p.add_argument("--send-interval", dest="interval", type=number_arg("--send-interval", 0, 3600),
                   action=deprecated_alias("--interval"), help=argparse.SUPPRESS)
    p.add_argument("--unreliable-interval", type=number_arg("--unreliable-interval", 0, 3600), default=0.0,
                   metavar="S", help="seconds between unreliable broadcasts (0: none); from 5.27 one group packet each")
    p.add_argument("--group-port", type=port_arg("--group-port", allow_zero=False), default=None, metavar="PORT",
                   help="5.27+: send each group packet once to 127.255.255.255:PORT and listen on 0.0.0.0:PORT "
                   "(every node of the session uses the same port) instead of one copy per station")
    p.add_argument("--leave", action="store_true",
                   help="leave gracefully when --duration ends (Ctrl-C always leaves) instead of just stopping")
    p.add_argument("--format", choices=("table", "jsonl"), default="table", help="event output format")
    add_relay_arguments(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    relay = relay_plan(args)
    if relay is None:
        host, port = parse_bind("127.0.0.1" if args.bind is None else args.bind, "--bind")
    else:  # the node's IP is the virtual one the hub gives (the port is kept); --bind's, the connection's
        host, port = "127.0.0.1", parse_hostport("127.0.0.1" if args.bind is None else args.bind, 0, flag="--bind")[1]
        relay_local(relay, args.bind)
    join = parse_remote(args.join, "--join") if args.join else None
    if join is not None and relay is None and join == (host, port):
        raise CliError(f"--join {join[0]}:{join[1]} is this node's own address (--bind): give the address of the "
                       "mesh's host")  # fmt: skip
    if relay is None:
        check_udp_free("--bind", host, port)
    if args.session_key == "":
        raise CliError("--session-key is empty: give the 16-byte key as 32 hex digits"
                       + (" (the creator prints it)" if args.join else ", or leave it out for a random one"))
    if args.join and args.session_key is None:
        raise CliError("--join needs --session-key (the creator prints it)")
    key = hex_key("--session-key", args.session_key)
    if args.create and key is None:
        key = os.urandom(16)
    group = None
    if args.group_port is not None:
        group = ("127.255.255.255", args.group_port)
    config = NodeConfig(
        version=args.version,
        network=network_for(args.network, args.version, args.allow_nearest_version),
        bind=(host, port),
        session_key=key,
        allow_nearest_version=args.allow_nearest_version,
        aead_backend=args.backend,
        seed=args.seed,
        group_broadcast=group,
    )
    if args.network_id is not None and config.network is NetworkType.LAN:
        # Spec §4: a LAN session's network id is derived from the host's address, by every member alike.
        raise CliError("--network-id is for ldn, nex and npln meshes; a lan mesh derives its own from the host's address")
    if group is not None and config.profile.footer == "none":
        raise CliError(f"--group-port needs a version with group packets (5.27+), not {config.profile.name}")
    return run_trio(relay, _main, args, config, join)


def _emit(args: argparse.Namespace, kind: str, text: str | None = None, **fields: Any) -> None:
    if args.format == "jsonl":
        print(json.dumps({"event": kind, **fields}, sort_keys=True), flush=True)
    elif not args.quiet:
        print(text if text is not None else f"[{kind}] " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


def join_failure(reason: str, host: tuple[str, int], drops: dict[str, int]) -> str:
    """Why a join failed, in words a person can act on."""
    where = f"{host[0]}:{host[1]}"
    if drops.get("bad_tag"):
        return (f"join failed: {drops['bad_tag']} answer(s) from {where} did not authenticate with this session key "
                "(is --session-key the creator's?)")  # fmt: skip
    if reason.startswith("no answer") or "timed out" in reason:
        listening = probe_udp(host)
        if listening is False:
            return f"join failed: no answer from {where}: nothing listens there (is the host running, and the port right?)"
        return (f"join failed: the host at {where} did not answer the join: is --session-key the creator's "
                "(and --version and --network the same)?")  # fmt: skip
    return f"join failed: {reason}"


def _join_command(config: NodeConfig, addr: tuple[str, int], group_port: int | None, network_id: int | None) -> str:
    ip = addr[0]
    parts = ip.split(".")
    next_ip = ".".join([*parts[:3], str(int(parts[3]) + 1)]) if ip.startswith("127.") and int(parts[3]) < 254 else "127.0.0.2"
    key = config.session_key.hex() if config.session_key else ""
    relayed = relay_join_flags()  # through a relay the other sites have their own virtual address
    command = (f"pianode node --join {ip}:{addr[1]} --session-key {key} --version {config.profile.name} "
               f"--network {config.network.value} " + (relayed or f"--bind {next_ip}"))  # fmt: skip
    if group_port is not None:
        command += f" --group-port {group_port}"
    if network_id is not None:  # the creator's own: the joiners' default is derived from the host
        command += f" --network-id {network_id}"
    return command


async def _main(args: argparse.Namespace, config: NodeConfig, join: tuple[str, int] | None) -> int:
    config = relay_node_config(config)
    received: dict[int, int] = {}
    stop = Stop()
    async with trio.open_nursery() as outer:
        await outer.start(stop.watch)
        async with open_node(config) as node:
            addr = node.address
            if join is None:
                await node.create_mesh(network_id=args.network_id)
                command = _join_command(config, addr, args.group_port, args.network_id)
                where = "" if relay_join_flags() else " (each on its own 127.0.0.x)"
                _emit(args, "created",
                      f"created the mesh on {addr[0]}:{addr[1]} (Pia {config.profile.name} {config.network.value}); "
                      f"others join with{where}:\n  {command}",
                      address=f"{addr[0]}:{addr[1]}", session_key=config.session_key.hex() if config.session_key else None,
                      version=config.profile.name, network=config.network.value, join_with=command)  # fmt: skip
                log.info("created the mesh on %s:%d", *addr)
            else:
                index = None
                with stop.phase():
                    try:
                        index = await node.join(join, network_id=args.network_id)
                    except JoinError as exc:
                        drops: dict[str, int] = node.statistics()["drops"]  # type: ignore[assignment]
                        message = join_failure(str(exc), join, drops)
                        if args.format == "jsonl":  # (a table run says it once, on stderr)
                            _emit(args, "join-failed", reason=str(exc), message=message, drops=drops)
                        raise CliFailure(message) from None
                if index is None:
                    stop.exit_if_interrupted()
                    raise CliFailure("stopped before the join completed")
                _emit(args, "joined", f"joined {join[0]}:{join[1]} as station {index} from {addr[0]}:{addr[1]} "
                      f"(host: station {node.host_index})",
                      address=f"{addr[0]}:{addr[1]}", station_index=index, host_index=node.host_index)  # fmt: skip
                log.info("joined %s:%d as station %d", join[0], join[1], index)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_report, args, node, received)
                nursery.start_soon(_watch_drops, args, node)
                if args.interval > 0:
                    nursery.start_soon(_sender, node, args.interval, True)
                if args.unreliable_interval > 0:
                    nursery.start_soon(_sender, node, args.unreliable_interval, False)
                with stop.phase():
                    if args.duration is not None:
                        await trio.sleep(args.duration)
                    else:
                        await trio.sleep_forever()
                if args.leave or stop.signalled:
                    with trio.move_on_after(1.0):
                        await node.leave()
                nursery.cancel_scope.cancel()
            _summary(args, node, received)
        outer.cancel_scope.cancel()
    stop.exit_if_interrupted()
    return 0


def _summary(args: argparse.Namespace, node: Node, received: dict[int, int]) -> None:
    stats = node.statistics()
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
    drops: dict[str, int] = stats["drops"]  # type: ignore[assignment]
    group_sent = stats["counters"].get("group_packets_sent", 0)  # type: ignore[union-attr]
    table = render_table(
        ["idx", "host", "self", "address", "state", "rtt ms", "received msgs"],
        [[r["index"], "*" if r["host"] else "", "*" if r["self"] else "", r["address"], r["state"],
          "-" if r["rtt_ms"] is None else f"{r['rtt_ms']:.3f}", r["received"]] for r in rows],
        right={0, 5, 6},
    )  # fmt: skip
    text = [f"station {node.station_index} (host: station {node.host_index})", *table]
    if drops:
        text.append("dropped: " + ", ".join(f"{n} {reason}" for reason, n in sorted(drops.items())))
    if args.quiet and args.format != "jsonl":
        print("\n".join(text), flush=True)
        return
    _emit(args, "summary", "\n".join(text), station_index=node.station_index, host_index=node.host_index,
          stations=rows, drops=drops, group_packets_sent=group_sent)  # fmt: skip


async def _watch_drops(args: argparse.Namespace, node: Node) -> None:
    """Say (once a second at most) when datagrams were dropped, with the reason: a wrong key shows here."""
    seen: dict[str, int] = {}
    while True:
        await trio.sleep(1.0)
        if node.session is None:
            return
        drops: dict[str, int] = node.statistics()["drops"]  # type: ignore[assignment]
        for reason, count in sorted(drops.items()):
            new = count - seen.get(reason, 0)
            if new > 0:
                hint = DROP_HINTS.get(reason, reason)
                _emit(args, "dropped", f"dropped {new} datagram(s) that {hint} [{reason}, {count} in all]",
                      reason=reason, count=new, total=count)  # fmt: skip
                log.debug("dropped %d datagram(s): %s", new, reason)
        seen = dict(drops)


async def _sender(node: Node, interval: float, reliable: bool) -> None:
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
