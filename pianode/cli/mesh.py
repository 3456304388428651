"""``pianode mesh``: start N nodes on loopback, form a mesh, exchange data, report.

Each node sits on its own 127.0.0.x address.  Node 0 creates the mesh, the
others join it (as a matchmaking server would, the launcher hands them the
host address and the session key), then every station sends numbered reliable
messages and unreliable ones to every other station.  The run succeeds (exit 0)
when the mesh formed and every reliable message arrived exactly once, in order.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import secrets
import sys
import time as wallclock
from typing import Any

import trio

from pianode.cli.common import (
    CliError,
    add_fault_arguments,
    add_network_arguments,
    check_local_address,
    check_output_path,
    check_udp_free,
    deprecated_alias,
    fault_injector_from_args,
    number_arg,
    parse_hostport,
    port_arg,
)
from pianode.mesh.config import NodeConfig
from pianode.sim.mesh_run import MeshRun, MeshRunResult

__all__ = ["add_parser"]

log = logging.getLogger("pianode.mesh")

DEFAULT_VERSION = "5.18"
#: A real-time session models a game sending a frame to every station 60 times a
#: second; from 5.27 on Pia sends such a frame as one group packet (receivers in
#: the footer) instead of one packet per station.
REALTIME_VERSION = "5.29"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "mesh",
        help="start N local nodes, form a Pia mesh and exchange data",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-n", "--nodes", type=number_arg("--nodes", 2, 32, integer=True), default=4,
                   help="number of stations (2..32, default 4)")
    add_network_arguments(
        p,
        default_version=None,
        version_help=f"Pia version (default {DEFAULT_VERSION}; {REALTIME_VERSION} for a real-time session (--rate), "
        "whose frames go out as one group packet per frame with the receivers in its footer)",
    )
    p.add_argument("--duration", type=number_arg("--duration", 0, 3600), default=2.0, metavar="S",
                   help="seconds of data exchange after the mesh formed (0..3600, default 2)")
    p.add_argument("--rate", type=number_arg("--rate", 0, 240, lo_open=True), default=None, metavar="HZ",
                   help="real-time session: game-state frames per second per station (> 0 and ≤ 240)")
    p.add_argument("--messages", type=number_arg("--messages", 0, 100000, integer=True), default=20,
                   help="reliable messages per station pair (0..100000, default 20)")
    p.add_argument("--bind", dest="base_address", default="127.0.0.1", metavar="IP[:PORT]",
                   help="first node's IPv4 address (the others follow: 127.0.0.1, .2, ...) and the UDP port of "
                   "every node (default 127.0.0.1, any free port)")
    # Old spellings, kept for one release with a deprecation note:
    p.add_argument("--base-address", dest="base_address", action=deprecated_alias("--bind IP"), help=argparse.SUPPRESS)
    p.add_argument("--port", type=port_arg("--port"), default=None, action=deprecated_alias("--bind IP:PORT"),
                   help=argparse.SUPPRESS)
    p.add_argument("--record", metavar="FILE.pcap", help="write every datagram to a pcap and FILE.session.json beside it")
    p.add_argument("--format", choices=("table", "jsonl"), default="table", help="output format (default table)")
    p.add_argument("--leave", dest="leave_host", action="store_true", help="make the host leave mid-run to show host migration")
    p.add_argument("--leave-host", dest="leave_host", nargs=0, action=deprecated_alias("--leave"), help=argparse.SUPPRESS)
    p.add_argument(
        "--discovery",
        choices=("auto", "on", "off"),
        default="auto",
        help="find the host as consoles do (LAN browse up to 16 stations, LDN scan up to 8) or hand joiners "
        "its address and key as a matchmaking server would (off; always for nex). Default: auto",
    )
    p.add_argument(
        "--fanout",
        choices=("auto", "broadcast", "unicast"),
        default="auto",
        help="how a packet for several stations (5.27+, footer) reaches them: one broadcast to 127.255.255.255 "
        "that every station listens for, or one unicast copy per station. Default: broadcast where the "
        "version has a footer",
    )
    p.add_argument("--game-key", default=None,
                   help="LAN/LDN discovery: game key (32 hex digits or 16 characters) the keys derive from (default random)")
    add_fault_arguments(p)
    p.set_defaults(handler=run)


def _addresses(args: argparse.Namespace) -> tuple[str, int]:
    """--bind IP[:PORT] (or the old --base-address and --port): every node's address checked now."""
    text = args.base_address
    flag = "--bind"
    host, port = parse_hostport(text, 0, flag=flag) if ":" in text else (text, 0)
    if args.port is not None:
        port = args.port
    base = ipaddress.IPv4Address(check_local_address(host, flag))
    if int(base) + args.nodes - 1 > int(ipaddress.IPv4Address("127.255.255.254")) and base.is_loopback:
        raise CliError(f"{flag} {base}: {args.nodes} nodes need {args.nodes} addresses from {base} on, "
                       "past the end of 127.0.0.0/8")  # fmt: skip
    if args.nodes > 1 and not base.is_loopback:
        raise CliError(f"{flag} {base}: the nodes sit on consecutive addresses, which only loopback (127.x) offers")
    for i in range(args.nodes):
        ip = str(base + i)
        if i:
            check_local_address(ip, f"{flag} {base} (node {i} at {ip})")
        check_udp_free("--bind" if args.port is None else "--port", ip, port)
    return str(base), port


def run(args: argparse.Namespace) -> int:
    base_address, port = _addresses(args)
    check_output_path("--record", args.record)
    fmt = args.format
    version = args.version or (REALTIME_VERSION if args.rate else DEFAULT_VERSION)
    config = NodeConfig(
        version=version,
        network=args.network,
        allow_nearest_version=args.allow_nearest_version,
        aead_backend=args.backend,
        seed=args.seed,
    )
    faults = fault_injector_from_args(args)
    has_footer = config.profile.footer != "none"
    if args.fanout == "broadcast" and not has_footer:
        raise CliError(f"--fanout broadcast needs a version with group packets (5.27+), not {config.profile.name}")
    fanout = "broadcast" if args.fanout == "broadcast" or (args.fanout == "auto" and has_footer) else "unicast"
    extra: dict[str, Any] = {}
    run_class: type[MeshRun] = MeshRun
    network = config.network.value
    discover = args.discovery == "on" or (
        args.discovery == "auto" and (network == "ldn" or (network == "lan" and args.nodes <= 16))
    )
    if discover and network == "nex":
        raise CliError("NEX sessions are matched by a game server: --discovery applies to lan and ldn")
    if discover:
        from protocols.pia.keys import parse_game_key

        text = args.game_key or secrets.token_hex(16)
        extra = {"game_key": parse_game_key(text), "game_key_text": text}
        if network == "ldn":
            # Station 0 hosts an LDN network and advertises; the others scan and join (pianode.ldn.network).
            from pianode.sim.ldn_run import LdnMeshRun

            run_class = LdnMeshRun
        else:
            # Station 0 answers browse requests; the others browse, verify the challenge and join.
            if args.nodes > 16:
                raise CliError("a LAN session lists at most 16 stations: use --discovery off for more")
            from pianode.sim.mesh_run import LanMeshRun

            run_class = LanMeshRun
    try:
        mesh = run_class(
            config,
            **extra,
            nodes=args.nodes,
            base_address=base_address,
            port=port,
            duration=args.duration,
            rate=args.rate,
            messages=args.messages,
            record=args.record,
            faults=faults,
            leave_host=args.leave_host,
            group_fanout=fanout,
            freeze_gc=True,
            live=_print_live if (fmt == "table" and sys.stdout.isatty() and not args.quiet) else None,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    started = wallclock.perf_counter()
    result = trio.run(mesh.run)
    result.wall_time = wallclock.perf_counter() - started
    summary = result.summary()
    for problem in summary["problems"]:
        log.info("problem: %s", problem)
    if fmt == "jsonl":
        print(json.dumps(summary, sort_keys=True))
    elif args.quiet:
        print(render_summary(result).splitlines()[-1])
    else:
        print(render_summary(result))
    return 0 if result.ok else 1


def render_summary(result: MeshRunResult) -> str:
    lines = []
    s = result.summary()
    lines.append(
        f"Pia {s['version']} {s['network']} mesh: {s['nodes']} stations, host index {s['host_index']}, "
        f"formed in {s['formation_time']:.3f} s by {s['formation']}" if s["formation_time"] is not None else
        f"Pia {s['version']} {s['network']} mesh: {s['nodes']} stations did NOT form"
    )
    lines.append("")
    lines.extend(render_rows(s["stations"]))
    lines.append("")
    rel = s["reliable"]
    lines.append(
        f"reliable: {rel['delivered']}/{rel['expected']} delivered, {rel['duplicates']} duplicates, "
        f"{rel['out_of_order']} out of order; unreliable: {s['unreliable']['delivered']}/{s['unreliable']['sent']} delivered"
    )
    if s.get("frames"):
        f = s["frames"]
        lines.append(
            f"frames: {f['delivered']}/{f['expected']} delivered, latency p50 {f['p50_ms']:.2f} ms, "
            f"p99 {f['p99_ms']:.2f} ms, {f['late']} later than {f['late_threshold_ms']:.0f} ms "
            f"({f['within_threshold_pct']:.2f}% on time)"
            + (f"; process CPU {f['cpu_load_pct']:.0f}% of one core" if f.get("cpu_load_pct") is not None else "")
        )
        if f.get("late_by_second"):
            worst = sorted(f["late_by_second"].items(), key=lambda kv: -kv[1])[:5]
            lines.append(
                f"late frames in {len(f['late_by_second'])} second(s) of the session; most at "
                + ", ".join(f"{t} s ({n})" for t, n in sorted(worst))
            )
    if s["host_changes"]:
        lines.append(f"host migration: {', '.join(s['host_changes'])}")
    if s["drops"]:
        lines.append("drops: " + ", ".join(f"{k} {v}" for k, v in sorted(s["drops"].items())))
    if s.get("faults"):
        lines.append("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(s["faults"].items()) if v))
    if s.get("record"):
        lines.append(f"recorded {s['record']['datagrams']} datagrams to {s['record']['pcap']} (session {s['record']['session']})")
    for problem in s["problems"]:
        lines.append(f"PROBLEM: {problem}")
    lines.append(f"result: {'OK' if s['ok'] else 'FAILED'} in {s['wall_time']:.2f} s wall time")
    return "\n".join(lines)


def render_rows(rows: list[dict[str, Any]]) -> list[str]:
    """The station table: index, host mark, address, RTT, packets sent/received, losses."""
    header = f"{'idx':>3} {'host':<4} {'address':<21} {'rtt ms':>8} {'sent':>7} {'recv':>7} {'lost':>5}"
    lines = [header, "-" * len(header)]
    for row in rows:
        rtt = "-" if row["rtt_ms"] is None else f"{row['rtt_ms']:.3f}"
        index = row["index"] if row["index"] is not None else "-"
        lines.append(
            f"{index:>3} {'*' if row['host'] else '':<4} "
            f"{row['address']:<21} {rtt:>8} {row['sent']:>7} {row['received']:>7} {row['lost']:>5}"
        )
    return lines


def _print_live(rows: list[dict[str, Any]]) -> None:
    # Redraw in place on a terminal: cursor home, clear screen, table.
    sys.stdout.write("\x1b[H\x1b[2J" + "\n".join(render_rows(rows)) + "\n")
    sys.stdout.flush()
