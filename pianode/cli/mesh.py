"""pianode mesh: start N nodes on loopback, form a mesh, exchange data, report.

Each node sits on its own 127.0.0.x address (--bind sets the first).  Node 0
creates the mesh; the others find it as consoles do (LAN browse with the crypto
challenge, or an LDN scan) or, with --discovery off (and for NEX), are handed
the host address and the session key.  Then every station sends numbered
reliable messages and unreliable ones to every other station.  The run
succeeds (exit 0) when the mesh formed and every reliable message arrived
exactly once, in order.

The table: rtt ms is each station's mean smoothed round-trip time to its peers;
pkts sent/recv count its packets; lost (resent msgs) the reliable messages it
had to send again.  On a terminal the table is redrawn in place during the run;
elsewhere a progress line goes to stderr every few seconds.

With --relay every station is a site of its own of one relay hub (its own
QUIC connection and virtual address; all traffic between stations crosses
the hub), the mesh formed by hand-off: --relay HOST:PORT with --relay-ca,
--relay-cert and --relay-key takes a running hub, --relay alone starts one
on 127.0.0.1 (or --bind's address) for the run, with a CA made for the run.
With --bind IP the stations' connections to the hub go out from IP, IP+1, ...
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import random
import secrets
import sys
import time as wallclock
from typing import Any

import trio

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

from pianode.cli.common import (
    relay_unavailable,
    CliError,
    CliFailure,
    add_fault_arguments,
    add_network_arguments,
    network_for,
    check_local_address,
    check_record_path,
    relay_reads,
    printable,
    check_udp_free,
    deprecated_alias,
    fault_injector_from_args,
    number_arg,
    parse_hostport,
    port_arg,
)
from pianode.cli.relay import OWN_HUB, add_relay_arguments, check_reaches_hub, relay_plan, relay_room
from pianode.mesh import legacy
from pianode.mesh.config import NodeConfig
from protocols.pia.versions import profile_for
from protocols.errors import ConfigError
from pianode.sim.mesh_run import MeshRun, MeshRunResult

__all__ = ["add_parser"]

log = logging.getLogger("pianode.mesh")

DEFAULT_VERSION = "5.18"
#: A real-time session models a game sending a frame to every station 60 times a
#: second; from 5.27 on Pia sends such a frame as one group packet (receivers in
#: the footer) instead of one packet per station.
REALTIME_VERSION = "5.29"
#: Off a terminal, a progress line on stderr this often (seconds).
PROGRESS_EVERY = 5.0


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
    # No --network: lan, or nex for Pia 3.x/4.x, which have no LAN mode (pianode.mesh.legacy).
    p.set_defaults(network=None)
    p.add_argument("--duration", type=number_arg("--duration", 0, 3600), default=2.0, metavar="S",
                   help="seconds of data exchange after the mesh formed (0..3600, default 2)")
    p.add_argument("--rate", type=number_arg("--rate", 0, 240, lo_open=True), default=None, metavar="HZ",
                   help="real-time session: game-state frames per second per station (> 0 and ≤ 240)")
    p.add_argument("--messages", type=number_arg("--messages", 0, 100000, integer=True), default=None,
                   help=f"reliable messages per station pair (0..100000, default {DEFAULT_MESSAGES}; with --rate, "
                        "one a second, and these after --leave)")
    p.add_argument("--bind", dest="base_address", default=None, metavar="IP[:PORT]",
                   help="first node's IPv4 address (the others follow: 127.0.0.1, .2, ...) and the UDP port of "
                   "every node (default 127.0.0.1, any free port); with --relay each station's connection to the "
                   "hub goes out from its address (and a hub of the run's own listens on the first)")
    # Old spellings, kept for one release with a deprecation note:
    p.add_argument("--base-address", dest="base_address", action=deprecated_alias("--bind IP"), help=argparse.SUPPRESS)
    p.add_argument("--port", type=port_arg("--port"), default=None, action=deprecated_alias("--bind IP:PORT"),
                   help=argparse.SUPPRESS)
    p.add_argument("--record", metavar="FILE.pcap", help="write every datagram to a pcap and FILE.session.json beside it")
    p.add_argument("--format", choices=("table", "jsonl"), default="table",
                   help="output format: table (default) or jsonl (one JSON summary)")
    p.add_argument("--leave", dest="leave_host", action="store_true", help="make the host leave mid-run to show host migration")
    p.add_argument("--leave-host", dest="leave_host", nargs=0, action=deprecated_alias("--leave"), help=argparse.SUPPRESS)
    p.add_argument(
        "--discovery",
        choices=("auto", "on", "off"),
        default="auto",
        help="how joiners find the host: as consoles do (on: LAN browse up to 16 stations, LDN scan up to 8) "
        "or handed its address and key, the way a matchmaking server does (off; always for nex). "
        "Default auto: discovery for lan (up to 16 stations) and ldn (up to 8), unless the stations are split over processes",
    )
    p.add_argument(
        "--fanout",
        choices=("auto", "broadcast", "unicast"),
        default="auto",
        help="how a packet for several stations (5.27+, footer) reaches them: one broadcast to 127.255.255.255 "
        "that every station listens for, or one unicast copy per station. Default: broadcast where the "
        "version has a footer",
    )
    p.add_argument("--processes", type=number_arg("--processes", 1, 32, integer=True), default=None, metavar="N",
                   help="split the stations over N processes, one frame clock and one report (default: 2 or more "
                   "where a real-time session needs more than one core, else 1); a split mesh is formed by hand-off")
    p.add_argument("--no-pin-cores", dest="pin_cores", action="store_false",
                   help="let the OS move the station processes between cores (by default, when they are as many as "
                   "the cores, each keeps to a core of its own)")
    p.add_argument("--scheduling", choices=("auto", "normal"), default=None,
                   help="real-time session (--rate): auto (the default) has each station process ask the OS for the "
                   "round-robin real-time class while frames go out, so that busy programs cannot delay them (root, "
                   "CAP_SYS_NICE or 'ulimit -r 10'; the report says what the OS granted, and a process that needs "
                   "more than 90%% of its core for 3 s in a row gives it back); normal never asks")
    p.add_argument("--game-key", default=None,
                   help="LAN/LDN discovery: game key (32 hex digits or 16 characters) the keys derive from (default random)")
    add_fault_arguments(p)
    add_relay_arguments(p, own_hub="every station through this hub, each a site of its own (--relay alone: a hub "
                        "of the run's own on 127.0.0.1); the mesh is formed by hand-off")  # fmt: skip
    p.set_defaults(handler=run)


def _relay_addresses(args: argparse.Namespace, relay: dict[str, Any]) -> tuple[str | None, int]:
    """Through a relay each station's Pia address is its site's, on --bind's port; --bind's IP (when
    given) is where the stations' connections to the hub go out from, one address each as without a
    relay (None: any address)."""
    if args.base_address is None:
        return None, args.port or 0
    base = _base_address(args)
    hub = relay.get("hub")
    if hub is not None:
        check_reaches_hub(str(base), hub, "--bind")
    return str(base), _bind_port(args)


def _bind_port(args: argparse.Namespace) -> int:
    text = "127.0.0.1" if args.base_address is None else args.base_address
    port = parse_hostport(text, 0, flag="--bind")[1] if ":" in text else 0
    return args.port if args.port is not None else port


def _base_address(args: argparse.Namespace) -> ipaddress.IPv4Address:
    """--bind's IP (or the old --base-address): the first node's, the others' after it, checked now."""
    text = "127.0.0.1" if args.base_address is None else args.base_address
    flag = "--bind"
    host = parse_hostport(text, 0, flag=flag)[0] if ":" in text else text
    base = ipaddress.IPv4Address(check_local_address(host, flag))
    if int(base) + args.nodes - 1 > int(ipaddress.IPv4Address("127.255.255.254")) and base.is_loopback:
        raise CliError(f"{flag} {base}: {args.nodes} nodes need {args.nodes} addresses from {base} on, "
                       "past the end of 127.0.0.0/8")  # fmt: skip
    if args.nodes > 1 and not base.is_loopback:
        raise CliError(f"{flag} {base}: the nodes sit on consecutive addresses, which only loopback (127.x) offers")
    for i in range(1, args.nodes):
        ip = str(base + i)
        check_local_address(ip, f"{flag} {base} (node {i} at {ip})")
    return base


def _addresses(args: argparse.Namespace) -> tuple[str, int]:
    """--bind IP[:PORT] (or the old --base-address and --port): every node's address checked now."""
    base, port = _base_address(args), _bind_port(args)
    for i in range(args.nodes):
        check_udp_free("--bind" if args.port is None else "--port", str(base + i), port)
    return str(base), port


def _relay(args: argparse.Namespace) -> dict[str, Any] | None:
    """RelayMeshRun's settings from the --relay flags (None without --relay); one line when they are wrong."""
    if args.relay != OWN_HUB:
        plan = relay_plan(args)
        return None if plan is None else {"hub": plan.hub, "credentials": plan.credentials, "room": plan.room}
    if any((args.relay_ca, args.relay_cert, args.relay_key)):
        raise CliError("--relay without HOST:PORT starts a hub of the run's own with its own CA: "
                       "name the hub to use --relay-ca/--relay-cert/--relay-key")  # fmt: skip
    return {"room": relay_room(args)}


#: Reliable messages per station pair of an exchange (a run without --rate) when --messages is not given.
DEFAULT_MESSAGES = 20


def _no_discovery_reason(
    args: argparse.Namespace, relay: Any, network: str, refusal: str | None, processes: int
) -> str:
    """Why a run is formed by hand-off, not by discovery, in words."""
    if relay is not None:
        return "a relayed run is formed by hand-off"
    if args.discovery == "off":
        return "--discovery off forms it by hand-off"
    if network in ("nex", "npln"):
        return f"{network} sessions are matched by a game server"
    if refusal is not None:
        return refusal
    if processes > 1:
        return f"a mesh split over {processes} processes (--processes) is formed by hand-off"
    if network == "lan":
        return f"a LAN session lists at most 16 stations, not {args.nodes}"
    return f"an LDN network holds at most 8 stations, not {args.nodes}"


def run(args: argparse.Namespace) -> int:
    relay = _relay(args)
    if relay is not None:
        if args.processes is not None and args.processes > 1:
            raise CliError("--relay: the stations of a relayed run share one process (no --processes)")
        if args.discovery == "on":
            raise CliError("--relay: a relayed run is formed by hand-off; for discovery through a hub run "
                           "lan or ldn host|join --relay, one site each")  # fmt: skip
        if any(getattr(args, k) for k in ("loss", "dup", "reorder", "delay", "jitter", "corrupt", "truncate")):
            raise CliError("--relay: fault injection applies to loopback links, not to a relay's")
        args.processes, args.discovery = 1, "off"
    if relay is None:
        base_address, port = _addresses(args)
    else:
        local, port = _relay_addresses(args, relay)
        base_address, relay = "127.0.0.1", {**relay, "local": local}
    check_record_path("--record", args.record, reads=relay_reads(args))
    if args.game_key is not None:  # checked now, whether or not the run uses it
        from protocols.pia.keys import parse_game_key

        try:
            parse_game_key(args.game_key)
        except ConfigError as exc:
            raise CliError(f"--game-key: {exc}") from None
    fmt = args.format
    version = args.version or (REALTIME_VERSION if args.rate else DEFAULT_VERSION)
    config = NodeConfig(
        version=version,
        network=network_for(args.network, version, args.allow_nearest_version),
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
    run_class: Any = MeshRun
    network = config.network.value
    no_discovery = legacy.discovery_refusal(config.profile, config.network)
    if args.discovery == "on" and no_discovery is not None:
        raise CliError(f"--discovery on: {no_discovery}")
    if args.processes is not None and args.processes > args.nodes:
        raise CliError(f"--processes {args.processes}: more processes than the {args.nodes} stations")
    if args.discovery == "on" and (args.processes or 1) > 1:
        raise CliError("--processes: a mesh split over processes is formed by hand-off, not --discovery on")
    from pianode.sim.mesh_procs import default_processes

    processes = args.processes or (1 if args.discovery == "on" else default_processes(args.nodes, args.rate))
    # auto: discovery as consoles do it, unless the stations are split over processes (hand-off then)
    discover = args.discovery == "on" or (
        args.discovery == "auto"
        and processes == 1
        and no_discovery is None
        and ((network == "ldn" and args.nodes <= 8) or (network == "lan" and args.nodes <= 16))
    )
    if discover and network in ("nex", "npln"):
        raise CliError(f"{network.upper()} sessions are matched by a game server: --discovery applies to lan and ldn")
    if args.game_key is not None and not discover:
        # The keys of LAN/LDN discovery derive from the game key; a mesh formed by hand-off never reads it.
        raise CliError(f"--game-key is for LAN/LDN discovery, which this run does not use: "
                       f"{_no_discovery_reason(args, relay, network, no_discovery, processes)}")  # fmt: skip
    if args.scheduling is not None and not args.rate:
        raise CliError("--scheduling applies to a real-time session (--rate): without it nothing runs against a clock")
    if args.messages is not None and args.rate and not args.leave_host:
        raise CliError("--messages counts the exchange without --rate (and the one after --leave); with --rate each "
                       "station sends one reliable message a second")  # fmt: skip
    if discover:
        from protocols.pia.keys import parse_game_key

        if args.game_key is not None:
            text = args.game_key
        elif args.seed is not None:  # --seed covers the keys: the game key (hence the session key) too
            text = random.Random(f"game key {args.seed}").randbytes(16).hex()
        else:
            text = secrets.token_hex(16)
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
    live = LiveView(tty=fmt == "table" and sys.stdout.isatty())
    if args.quiet:
        live = LiveView(tty=False)
        live.calls = -10**9  # no progress lines either
    if relay is not None:
        try:
            from pianode.relay.mesh_run import RelayMeshRun
        except ImportError as exc:
            raise relay_unavailable(exc) from None
        run_class, extra = RelayMeshRun, relay
    if processes > 1:
        from pianode.sim.mesh_procs import ProcessMeshRun  # (its workers: the same interpreter, spawned)

        run_class, extra = ProcessMeshRun, {"processes": processes, "pin_cores": args.pin_cores}
    try:
        mesh = run_class(
            config,
            **extra,
            nodes=args.nodes,
            base_address=base_address,
            port=port,
            duration=args.duration,
            rate=args.rate,
            messages=DEFAULT_MESSAGES if args.messages is None else args.messages,
            record=args.record,
            faults=faults,
            leave_host=args.leave_host,
            group_fanout=fanout,
            freeze_gc=True,
            live=live,
            live_interval=0.5 if live.tty else PROGRESS_EVERY,
            scheduling=args.scheduling or "auto",
        )
    except ValueError as exc:
        hint = " (--discovery off: the stations are handed the host's address)" if "LDN network has" in str(exc) else ""
        raise CliError(f"{exc}{hint}") from None
    started = wallclock.perf_counter()
    try:
        result = trio.run(mesh.run)
    except BaseException as exc:
        refusal = _relay_refusal(exc) if relay is not None else None
        if refusal is not None:  # the hub refused a station, or could not be reached: one line, exit 1
            raise CliFailure(refusal) from None
        if not _is_interrupt(exc):
            raise
        # Ctrl-C or SIGTERM: the summary of what happened until then, then "interrupted" and 130 or
        # "terminated" and 143 (pianode.cli.interrupt).
        from pianode.cli.interrupt import words

        live.clear()
        result = mesh.result
        line, signal_name, _ = words()
        result.problems.append(f"{line} ({signal_name}): the figures are those until then")
        _print_summary(result, wallclock.perf_counter() - started, fmt, args.quiet)
        raise
    finally:
        live.clear()
    _print_summary(result, wallclock.perf_counter() - started, fmt, args.quiet)
    return 0 if result.ok else 1


def _relay_refusal(exc: BaseException) -> str | None:
    """The one line of a relay refusal (a station refused, or the hub unreachable), alone or in a group."""
    from pianode.relay.client import RelayRefused

    if isinstance(exc, BaseExceptionGroup):
        return next((line for inner in exc.exceptions if (line := _relay_refusal(inner)) is not None), None)
    return str(exc) if isinstance(exc, RelayRefused) else None


def _is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C, alone or inside the exception group of a nursery it cancelled."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_is_interrupt(inner) for inner in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt)


def _print_summary(result: MeshRunResult, wall_time: float, fmt: str, quiet: bool) -> None:
    result.wall_time = wall_time
    summary = result.summary()
    for problem in summary["problems"]:
        log.info("problem: %s", problem)
    if fmt == "jsonl":
        print(json.dumps(summary, sort_keys=True), flush=True)
    elif quiet:
        print(render_summary(result).splitlines()[-1], flush=True)
    else:
        print(render_summary(result), flush=True)


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
            + (f" (sum of {s['processes']} processes)" if s.get("processes", 1) > 1 else "")
        )
        if f.get("scheduling"):
            from pianode.sim.scheduling import describe

            lines.append(f"scheduling: {describe(f['scheduling'])}")
        if f.get("warm_up"):
            w = f["warm_up"]
            lines.append(f"warm-up: {w['heard']}/{w['sent']} streams opened before the frame clock (one message each, "
                         "not counted as frames)")
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
        rec = s["record"]
        link = f" and {rec['link_frames']} LDN link frames" if rec.get("link_frames") else ""
        session = f"session {rec['session']}" if rec["session"] else "no session file beside a device or a pipe"
        lines.append(printable(f"recorded {rec['datagrams']} datagrams{link} to {rec['pcap']} ({session})"))
    for problem in s["problems"]:
        lines.append(f"PROBLEM: {problem}")
    if s.get("frames") and s["result"] == "LATE":
        f = s["frames"]
        lines.append(f"LATE: {f['within_threshold_pct']:.2f}% of frames within {f['late_threshold_ms']:.0f} ms, "
                     f"the target is {f['on_time_target_pct']:.0f}%")  # fmt: skip
    cores = f", each on a core of its own: {', '.join(map(str, s['cores']))}" if s.get("cores") else ""
    split = f" ({s['processes']} processes{cores})" if s.get("processes", 1) > 1 else ""
    lines.append(f"result: {s['result']} in {s['wall_time']:.2f} s wall time{split}")
    return "\n".join(lines)


_COLUMNS = (  # header, width, right-aligned
    ("idx", 3, True), ("host", 4, False), ("address", 21, False), ("rtt ms (mean to peers)", 22, True),
    ("pkts sent", 9, True), ("pkts recv", 9, True), ("lost (resent msgs)", 18, True),
)


def render_rows(rows: list[dict[str, Any]]) -> list[str]:
    """The station table: index, host mark, address, mean smoothed RTT to its peers, packets, losses."""
    header = " ".join(name.rjust(w) if right else name.ljust(w) for name, w, right in _COLUMNS)
    lines = [header, "-" * len(header)]
    for row in rows:
        rtt = "-" if row["rtt_ms"] is None else f"{row['rtt_ms']:.3f}"
        index = row["index"] if row["index"] is not None else "-"
        cells = (index, "*" if row["host"] else "", row["address"], rtt, row["sent"], row["received"], row["lost"])
        lines.append(" ".join(str(c).rjust(w) if right else str(c).ljust(w)
                              for c, (_, w, right) in zip(cells, _COLUMNS)).rstrip())  # fmt: skip
    return lines


class LiveView:
    """During a run: on a terminal, the station table redrawn in place (the final summary replaces it);
    elsewhere, one progress line on stderr every few seconds (none in a run shorter than that)."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.height = 0
        self.calls = 0
        self.started = wallclock.monotonic()

    def __call__(self, rows: list[dict[str, Any]]) -> None:
        self.calls += 1
        if self.tty:
            up = f"\x1b[{self.height}F\x1b[J" if self.height else ""
            table = render_rows(rows)
            sys.stdout.write(up + "\n".join(table) + "\n")
            sys.stdout.flush()
            self.height = len(table)
        elif self.calls > 1:
            elapsed = wallclock.monotonic() - self.started
            sent = sum(r["sent"] for r in rows)
            received = sum(r["received"] for r in rows)
            lost = sum(r["lost"] for r in rows)
            print(f"pianode mesh: {elapsed:.0f} s: {len(rows)} stations running, {sent} packets sent, "
                  f"{received} received, {lost} messages resent", file=sys.stderr, flush=True)  # fmt: skip

    def clear(self) -> None:
        """Take the live table off the screen before the final summary (so the table appears once)."""
        if self.tty and self.height:
            sys.stdout.write(f"\x1b[{self.height}F\x1b[J")
            sys.stdout.flush()
            self.height = 0
