"""pianode lan host, lan browse and lan join: LAN mode as consoles do it (spec §6).

lan host runs a mesh node on --bind IP[:PORT] (port: first free of
49152-49155 unless given) that creates a mesh, and answers browse
requests on --listen (default 0.0.0.0:30000, 35000 for 6.x) with a LanSessionInfo (a LanNetworkProperty
in 6.16-6.30) for it whose participant list follows the mesh (pianode.lan.session).  Outside
the versions the node runs on LAN, or with --discovery-only, it answers
for a one-station session with no node behind it.  lan browse broadcasts
one request to 127.255.255.255 and prints every session whose challenge
verified, as a table or as JSON Lines (one object per session with the
LanSessionInfo fields and the derived session key).  lan join follows the
console join flow (spec §6.6): browse until a session answers (--network-id
picks one), take the session key from its published param, join
the host's mesh.  Host and joiners print their node's events (stations
joining and leaving, data received) and broadcast a numbered message every
--interval seconds, then a summary when --duration ends or at
SIGTERM, before leaving the mesh; Ctrl-C does the same and then prints
interrupted (exit status 130).  All of it defaults to loopback, so it
works on one machine with no setup.

When a browse or join finds nothing, the command says what it heard and why
it ignored it (a challenge that did not verify with this game key, another
LAN system communication version, a full or closed session).

Exit status: 0 on success (browse: at least one session found; join:
joined), 1 when a browse found nothing or a join failed, 2 with a one-line
message for a bad flag or setting, 130 after Ctrl-C.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TextIO, TypeVar

import trio

from pianode.cli.common import (
    DEPRECATIONS,
    CliError,
    CliFailure,
    Stop,
    check_destination,
    check_local_address,
    check_name,
    check_number,
    check_udp_free,
    deprecated_alias,
    parse_bind,
    parse_hostport,
    render_table,
    version_arg,
)
from pianode.cli.relay import (
    RelayPlan, add_relay_arguments, relay_broadcast, relay_local, relay_node_config, relay_plan, run_trio,
)  # fmt: skip
from pianode.mesh import legacy, wire
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, Event, HostChanged, MeshDestroyed, MeshJoined, StationJoined, StationLeft
from pianode.lan.discovery import (
    DEFAULT_BROADCAST,
    BrowseClient,
    FoundSession,
    LanHost,
    browse,
    make_network_property,
    make_session_info,
)
from pianode.lan.session import (
    LanJoin,
    LanJoinError,
    find_session,
    join_found,
    no_answer,
    serve_lan_when_host,
    start_lan_host,
)
from pianode.mesh.node import JoinError, Node
from protocols.errors import ConfigError
from protocols.pia.keys import parse_game_key
from protocols.pia.lan import LanNetworkProperty, LanSessionInfo, browse_port
from protocols.pia.versions import NetworkType, VersionProfile, profile_for

__all__ = ["add_parser", "run_browse", "run_host", "run_join", "session_record"]

T = TypeVar("T")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lan", help="LAN mode: host a session or browse for sessions (UDP broadcast)", description=__doc__)
    lan_sub = p.add_subparsers(dest="lan_command", metavar="SUBCOMMAND")

    def mesh_flags(q: argparse.ArgumentParser) -> None:
        q.add_argument("--format", default="table", help="table (default) or jsonl: one object per event")
        q.add_argument("--interval", dest="send_every", default=None, metavar="S",
                       help=f"broadcast a numbered message (reliable unless --unreliable) to the mesh every S seconds (0: never; default {_SEND_EVERY})")
        q.add_argument("--send-every", dest="send_every", action=deprecated_alias("--interval"), help=argparse.SUPPRESS)
        q.add_argument("--alternate-unreliable", action="store_true",
                       help="send every second message unreliable (default: all reliable)")
        q.add_argument("--unreliable", action="store_true",
                       help="send the numbered messages unreliably (for a peer without the Reliable protocol)")
        q.add_argument("--mtu", default=None, metavar="BYTES",
                       help="largest datagram the node builds, 400..1472 (default 1364): a smaller one splits join "
                            "responses and updates into more fragments")  # fmt: skip
        q.add_argument("--sizes", default=None, metavar="N,N,...",
                       help="payload sizes in bytes the numbered messages cycle through (each text cut or padded "
                            "with dots; 0: empty); unreliable ones up to what one datagram carries (mtu - 80)")

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--game-key", required=True, help="game key: 32 hex digits or 16 ASCII characters")
        q.add_argument("--version", type=version_arg, default="5.18", help="Pia version (default 5.18)")
        q.add_argument("--allow-nearest-version", action="store_true", help="use the nearest documented version")
        q.add_argument("--broadcast", default=None, metavar="ADDR[:PORT]",
                       help=f"broadcast address (default {DEFAULT_BROADCAST}; port 30000, or 35000 for 6.x); "
                            "its IPv4 also goes into the challenge nonce")  # fmt: skip
        add_relay_arguments(q)

    h = lan_sub.add_parser("host", help="host a session: a mesh node that answers LAN browse requests")
    common(h)
    h.add_argument("--max", default="4", metavar="N", help="maximum participants (default 4)")
    h.add_argument("--name", default="pianode", help="host player name (default pianode)")
    h.add_argument("--duration", default=None, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    h.add_argument("--bind", default=None, metavar="IP[:PORT]",
                   help="the host's Pia socket (default 127.0.0.1, port: first free of 49152-49155)")
    h.add_argument("--listen", default=None, metavar="ADDR[:PORT]",
                   help="where browse requests are answered (default 0.0.0.0:30000, 35000 for 6.x)")
    h.add_argument("--address", action=deprecated_alias("--bind IP"), default=None, help=argparse.SUPPRESS)
    h.add_argument("--port", action=deprecated_alias("--bind IP:PORT"), default=None, help=argparse.SUPPRESS)
    h.add_argument("--game-mode", default="0", help="game mode (default 0; 5.x only)")
    h.add_argument("--app-version", default="0", help="application communication version (default 0)")
    h.add_argument("--host-address-size", default="18", help="5.10 only: 18 (KW) or 6 (NintendoClients)")
    h.add_argument("--discovery-only", action="store_true",
                   help="answer browse requests without running a mesh node (always so outside the versions the node runs on LAN)")
    mesh_flags(h)
    h.set_defaults(handler=run_host)

    b = lan_sub.add_parser("browse", help="broadcast a browse request and list the sessions that answer")
    common(b)
    b.add_argument("--timeout", default="1.0", metavar="S", help="seconds to collect replies (default 1)")
    b.add_argument("--format", default="table", help="table (default) or jsonl")
    b.add_argument("--bind", default=None, metavar="ADDR[:PORT]",
                   help="browser socket (default 127.0.0.1:0; with --relay: the address the connection to the hub "
                   "goes out from)")
    b.add_argument("--app-version", default=None, help="only sessions with this application communication version")
    b.set_defaults(handler=run_browse)

    j = lan_sub.add_parser("join", help="browse, take the session key from the session found, join its mesh")
    common(j)
    j.add_argument("--network-id", dest="session", default=None, metavar="ID",
                   help="network id to join, decimal or 0x hex (default: the first found)")
    j.add_argument("--session", dest="session", action=deprecated_alias("--network-id"), help=argparse.SUPPRESS)
    j.add_argument("--duration", default=None, metavar="S",
                   help="stop S seconds after starting, browse included: a browse it ends fails as --timeout's "
                        "would, with the same reason (default: until Ctrl-C)")
    j.add_argument("--timeout", default="10", metavar="S", help="give up browsing after S seconds (default 10)")
    j.add_argument("--bind", default=None, metavar="ADDR[:PORT]",
                   help="the node's Pia socket; the browse goes out from ADDR too (default 127.0.0.1, port: "
                        "first free of 49152-49155; with --relay: the port on the virtual address, and the address "
                        "the connection to the hub goes out from)")  # fmt: skip
    j.add_argument("--name", default="pianode", help="player name (default pianode)")
    j.add_argument("--app-version", default=None, help="only sessions with this application communication version")
    mesh_flags(j)
    j.set_defaults(handler=run_join)


def _number(text: str, what: str, *, lo: float = 0, hi: float = 2**32 - 1, integer: bool = True,
            lo_open: bool = False) -> Any:  # fmt: skip
    # A network id is shown as 0x and eight hex digits (lan host, lan browse, the join diagnostics): it is
    # taken back in that form too; every other number is decimal (check_number).
    return check_number(f"--{what}", text, lo, hi, integer=integer, lo_open=lo_open, allow_hex=what == "network-id")


def _sizes(args: argparse.Namespace, config: NodeConfig) -> list[int]:
    """--sizes: the payload sizes to cycle through; unreliable ones no longer than one datagram carries."""
    if args.sizes is None:
        return []
    sizes = [_number(x.strip(), "sizes", hi=config.max_message_size) for x in args.sizes.split(",")]
    if args.unreliable or args.alternate_unreliable:
        most = config.mtu - wire.UNRELIABLE_ROOM
        if max(sizes) > most:
            raise CliError(f"--sizes {max(sizes)}: an unreliable message carries at most {most} bytes "
                           f"(one datagram of {config.mtu}; unreliable data is never split)")  # fmt: skip
    return sizes


def _mtu(args: argparse.Namespace) -> dict[str, int]:
    """--mtu as NodeConfig's keyword (none: its default)."""
    return {} if args.mtu is None else {"mtu": _number(args.mtu, "mtu", lo=400, hi=1472)}


def _profile(args: argparse.Namespace) -> VersionProfile:
    try:
        return profile_for(args.version, allow_nearest=args.allow_nearest_version)
    except ConfigError as exc:
        raise CliError(f"--version {args.version}: {exc}".replace(
            "(allow the nearest version to use it anyway)", "(--allow-nearest-version uses the nearest anyway)")) from None


def _game_key(args: argparse.Namespace) -> bytes:
    try:
        return parse_game_key(args.game_key)
    except ConfigError as exc:
        raise CliError(f"--game-key: {exc}") from None


def _bind_address(text: str | None, flag: str = "--bind", *, relay: RelayPlan | None = None) -> tuple[str, int]:
    """IP[:PORT] of a local socket (*text* None: 127.0.0.1), port 0 (any free port) allowed; checked as
    bindable now.  Through a relay the socket's IP is the site's virtual address (the port is kept) and
    the IP given is where the connection to the hub goes out from (:func:`relay_local`)."""
    if relay is not None:
        relay_local(relay, text, flag)
        return "127.0.0.1", parse_hostport("127.0.0.1" if text is None else text, 0, flag=flag)[1]
    text = "127.0.0.1" if text is None else text  # (an empty value is refused, not the default)
    host, port = parse_bind(text, flag)
    check_udp_free(flag, host, port)
    return host, port


def _broadcast(args: argparse.Namespace, profile: VersionProfile) -> tuple[str, int]:
    text = DEFAULT_BROADCAST if args.broadcast is None else args.broadcast
    host, port = parse_hostport(text, browse_port(profile), flag="--broadcast")
    try:
        ip = ipaddress.IPv4Address(host)
    except ValueError:
        raise CliError(f"--broadcast must be an IPv4 address such as 127.255.255.255, got {host!r}") from None
    check_destination(f"--broadcast {text}", ip, broadcast=True)
    return host, port


def _node_refusal(profile: VersionProfile) -> str | None:
    """Why the node cannot run a LAN session of *profile* (the node configuration's own words), else None."""
    try:
        NodeConfig(version=profile.name, network="lan")
    except ConfigError as exc:
        return str(exc)
    return None


def _node_speaks(profile: VersionProfile) -> bool:
    return _node_refusal(profile) is None


def _format(args: argparse.Namespace) -> str:
    if args.format not in ("table", "jsonl"):
        raise CliError(f"--format must be table or jsonl, got {args.format!r}")
    return str(args.format)


def _duration(args: argparse.Namespace) -> float:
    if args.duration is None:
        return math.inf
    return _number(args.duration, "duration", hi=86400 * 365, integer=False, lo_open=True)  # type: ignore[no-any-return]


def _host_sockets(args: argparse.Namespace, profile: VersionProfile) -> tuple[str, int | None, tuple[str, int]]:
    """The Pia socket (IP, port or None for the first free of 49152-49155) and the browse listener.

    ``--bind IP[:PORT]`` is the Pia socket; the old spellings are ``--address``/``--port``, and
    ``--bind 0.0.0.0[:PORT]`` (never a Pia socket: its ids derive from a specific address) is the old
    spelling of ``--listen``."""
    listen_text = args.listen
    bind_text = args.bind
    if bind_text is not None and bind_text.split(":")[0] == "0.0.0.0" and listen_text is None:
        DEPRECATIONS.append("--bind 0.0.0.0[:PORT] on lan host is the browse listener: use --listen")
        listen_text, bind_text = bind_text, None
    if bind_text is not None:
        ip, port_n = parse_bind(bind_text, "--bind")
        port: int | None = port_n or None
    else:
        given = args.address is not None
        ip = check_local_address(args.address if given else "127.0.0.1", "--address" if given else "--bind")
        port = None
    if args.port is not None:
        port = _number(args.port, "port", lo=1, hi=0xFFFF)
    if port is not None:
        check_udp_free("--bind", ip, port)
    if listen_text is not None:
        listen = parse_hostport(listen_text, browse_port(profile), flag="--listen")
        check_local_address(listen[0], "--listen", allow_any=True)
        check_udp_free("--listen", *listen, shared=True, any_port=False)  # (browsers send to a known port)
    else:
        listen = ("0.0.0.0", browse_port(profile))
    return ip, port, listen


def _check_message_flags(args: argparse.Namespace) -> None:
    """The numbered messages' flags: none that contradicts another, none that shapes messages never sent."""
    if args.unreliable and args.alternate_unreliable:
        raise CliError("--unreliable sends every numbered message unreliably and --alternate-unreliable every "
                       "second one: give one of them")  # fmt: skip
    if args.send_every is None or _number(args.send_every, "interval", hi=3600, integer=False) != 0:
        return
    given = [flag for flag, on in (("--unreliable", args.unreliable),
                                   ("--alternate-unreliable", args.alternate_unreliable),
                                   ("--sizes", args.sizes is not None)) if on]  # fmt: skip
    if given:
        raise CliError(f"{given[0]} shapes the numbered messages, and --interval 0 sends none")


#: Seconds between the numbered messages of a node's data exchange when --interval is not given.
_SEND_EVERY = "0.5"


def run_host(args: argparse.Namespace) -> int:
    profile = _profile(args)
    check_name("--name", args.name)
    if args.discovery_only:
        # Flags of the node's data exchange: a host that only answers browse requests runs no node.
        given = [flag for flag, on in (("--interval", args.send_every is not None), ("--unreliable", args.unreliable),
                                       ("--alternate-unreliable", args.alternate_unreliable),
                                       ("--sizes", args.sizes is not None),
                                       ("--mtu", args.mtu is not None)) if on]  # fmt: skip
        if given:
            raise CliError(f"{given[0]} is for a host that runs a node; --discovery-only answers browse requests only")
    _check_message_flags(args)
    if args.discovery_only or not _node_speaks(profile):
        if args.relay is not None:
            raise CliError("--relay needs a host that runs a node (Pia 5.7-5.45, not --discovery-only)")
        return _run_discovery_host(args, profile)
    why = legacy.discovery_refusal(profile, NetworkType.LAN)  # 5.2-5.6: a reply could not carry the key
    if why is not None:
        raise CliError(f"{why}: use pianode node --create (and --join with its session key), or --discovery-only")
    key = _game_key(args)
    fmt = _format(args)
    max_n = _number(args.max, "max", lo=2, hi=16)
    relay = relay_plan(args)
    ip, port, bind = _host_sockets(args, profile)
    if args.bind is not None and not args.bind.startswith("0.0.0.0"):  # (that one is the old --listen)
        relay_local(relay, args.bind)
    duration = _duration(args)
    send_every = _number(_SEND_EVERY if args.send_every is None else args.send_every, "interval", hi=3600, integer=False)
    size = _number(args.host_address_size, "host-address-size", lo=6, hi=18)
    if size not in (6, 18):
        raise CliError("--host-address-size must be 6 or 18")
    broadcast_ip, _ = _broadcast(args, profile)
    if relay is None and ipaddress.IPv4Address(ip).is_loopback and not ipaddress.IPv4Address(broadcast_ip).is_loopback:
        # The session names the host's address (spec §6.3): a browser on that network would be told a
        # loopback address, and its join would end as a silent host's.
        raise CliError(f"--bind {ip} is a loopback address, which browsers on the network of --broadcast "
                       f"{broadcast_ip} cannot reach: bind the host to an address on that network")  # fmt: skip
    game_mode = _number(args.game_mode, "game-mode")
    app_version = _number(args.app_version, "app-version", hi=255 if profile.version < (6, 0) else 0xFFFF)
    try:
        config = NodeConfig(version=profile.name, bind=(ip, port or 0), name=args.name, **_mtu(args))
    except (ConfigError, ValueError) as exc:
        raise CliError(str(exc)) from None
    report = _Report(fmt, quiet=args.quiet)
    report.alternate_unreliable = args.alternate_unreliable
    report.sizes = _sizes(args, config)
    stop = Stop()

    async def main() -> None:
        stop.deadline = trio.current_time() + duration
        broadcast_ip = relay_broadcast(_broadcast(args, profile)[0], args.broadcast)
        async with trio.open_nursery() as nursery:
            await nursery.start(stop.watch)
            session = await start_lan_host(
                nursery, relay_node_config(config), key, max_participants=max_n, name=args.name, game_mode=game_mode,
                application_version=app_version, host_address_size=size, browse_bind=bind, broadcast_ip=broadcast_ip,
            )  # fmt: skip
            node = session.node
            ip, pia_port = node.address
            where = session.browse_address
            report.emit(
                {"event": "hosting", "network_id": session.network_id, "version": profile.name,
                 "address": f"{ip}:{pia_port}", "browse_address": f"{where[0]}:{where[1]}",
                 "max_participants": max_n, "session_key_param": session.session_key_param.hex(),
                 "session_key": session.session_key.hex()},
                f"hosting network id 0x{session.network_id:08x} (Pia {profile.name}, host {ip}:{pia_port}, "
                f"max {max_n}) on {where[0]}:{where[1]}",
            )  # fmt: skip
            nursery.start_soon(_report_ignored_requests, report, session.lan_host, profile)
            with stop.phase():
                await report.participate(node, send_every, args.name, reliable=not args.unreliable)
            session.cancel_scope.cancel()  # stop answering browse requests first
            s = session.lan_host.statistics()
            report.summary(node, session.network_id, browse={"answered": s.answered, "dropped": s.dropped})
            with trio.move_on_after(2.0):
                await node.leave(timeout=1.0)
            nursery.cancel_scope.cancel()

    run_trio(relay, main)
    stop.exit_if_interrupted()
    return 0


#: Why a host ignored a browse request.
_IGNORED_REQUESTS = {
    "bad_challenge": "its challenge did not verify with this game key (the browser uses another --game-key)",
    "challenge_version": "its challenge is of version {detail}, Pia {version} uses {mine}",
    "malformed": "not a browse request of Pia {version} ({detail})",
    "replayed": "a request already answered, sent again (a replay)",
    "rate_limited": "more requests a second from its address than the host answers",
    "reply_not_sent": "the reply could not be sent there ({detail})",
}


async def _report_ignored_requests(report: _Report, lan_host: LanHost, profile: VersionProfile) -> None:
    """Say which browse requests the host ignored and why (a browser with the wrong game key hears nothing)."""
    done = 0
    while True:
        await trio.sleep(0.25)
        ignored = lan_host.responder.counters.ignored
        for reason, addr, detail in ignored[done:]:
            if reason == "no_match":
                continue
            why = _IGNORED_REQUESTS.get(reason, reason).format(
                version=profile.name, detail=detail, mine=profile.lan_challenge_version)
            report.emit({"event": "ignored", "reason": reason, "from": f"{addr[0]}:{addr[1]}"},
                        f"ignored a browse request from {addr[0]}:{addr[1]}: {why}")  # fmt: skip
        done = len(ignored)


def _trio_run(main: Callable[[], Awaitable[T]]) -> T:
    """``trio.run``; errors from inside a nursery reach ``pianode.cli.main``, which makes them one line."""
    return trio.run(main)


#: Why a browse reply was ignored, for a person (``{detail}``: what the reply said).
_IGNORED = {
    "bad_challenge": "its challenge did not verify with this game key",
    "challenge_version": "its challenge answers another request or challenge version",
    "malformed": "not a browse reply of Pia {version} ({detail})",
    "system_version": "LAN system communication version {detail}, this node speaks {mine} (Pia {version})",
    "application_version": "application communication version {detail}, not the --app-version asked for",
    "too_many_sessions": "the browse already kept as many sessions as it keeps (pianode.lan.discovery.MAX_FOUND)",
}


def ignored_replies(profile: VersionProfile, client: BrowseClient) -> list[dict[str, Any]]:
    """The replies a browse ignored, grouped by sender and reason, each with a sentence that says why."""
    groups: dict[tuple[str, tuple[str, int]], list[object]] = {}
    for reason, addr, detail in client.counters.ignored:
        if reason != "duplicate":
            groups.setdefault((reason, addr), []).append(detail)
    out = []
    for (reason, addr), details in groups.items():
        why = _IGNORED.get(reason, reason).format(
            version=profile.name, detail=details[0], mine=profile.lan_system_version)
        n = len(details)
        out.append({"reason": reason, "from": f"{addr[0]}:{addr[1]}", "count": n,
                    "message": f"{n} repl{'y' if n == 1 else 'ies'} from {addr[0]}:{addr[1]} ignored: {why}"})
    return out


async def _diagnose_join(profile: VersionProfile, key: bytes, network_id: int | None, bind_ip: str,
                         broadcast: tuple[str, int], app_version: int | None,
                         counts: Counter[str]) -> list[str]:  # fmt: skip
    """Why a join found nothing: browse once more with no filters and say what answered and why it did not fit
    (and count each reason into *counts*)."""
    client = BrowseClient(profile, key, broadcast_ip=broadcast[0])
    found = await browse(profile, key, broadcast=broadcast, bind=(bind_ip, 0), timeout=1.0, client=client)
    reasons = []

    def because(reason: str, text: str) -> None:
        counts[reason] += 1
        reasons.append(text)

    for f in found:
        info = f.info
        where = f"LAN session 0x{info.network_id:08x} (host {info.host_ip}:{info.host_port})"
        current = getattr(info, "current_participants", getattr(info, "current_stations", None))
        maximum = getattr(info, "max_participants", getattr(info, "max_stations", None))
        if network_id is not None and info.network_id != network_id:
            because("other_network_id", f"{where} is not --network-id 0x{network_id:08x}")
        elif not info.is_opened:
            because("closed", f"{where} is closed to new players")
        elif current is not None and maximum is not None and current >= maximum:
            because("full", f"{where} is full ({current}/{maximum} players)")
        elif app_version is not None and info.application_communication_version != app_version:
            because("application_version",
                    f"{where} has application communication version {info.application_communication_version}")
        elif f.session_key is None:
            because("no_session_key_param", f"{where} publishes no session key param")
    for r in ignored_replies(profile, client):
        counts[r["reason"]] += r["count"]
        reasons.append(r["message"])
    if not reasons and client.counters.received == 0 and profile.lan_challenge_version is not None:
        because("no_reply", "no reply at all: no host there, or hosts with another game key "
                "(a host ignores a request whose challenge it cannot open)")  # fmt: skip
    return reasons


def run_join(args: argparse.Namespace) -> int:
    profile = _profile(args)
    _check_message_flags(args)
    refusal = _node_refusal(profile)
    if refusal is not None:
        raise CliError(f"joining needs a version the node runs: {refusal}")
    why = legacy.discovery_refusal(profile, NetworkType.LAN)  # 5.2-5.6: the node runs, discovery gives no key
    if why is not None:
        raise CliError(f"{why}: use pianode node --join with the session key")
    key = _game_key(args)
    fmt = _format(args)
    check_name("--name", args.name)
    duration = _duration(args)
    timeout = _number(args.timeout, "timeout", hi=3600, integer=False, lo_open=True)
    send_every = _number(_SEND_EVERY if args.send_every is None else args.send_every, "interval", hi=3600, integer=False)
    network_id = None if args.session is None else _number(args.session, "network-id")
    app_version = None if args.app_version is None else _number(
        args.app_version, "app-version", hi=255 if profile.version < (6, 0) else 0xFFFF)
    broadcast = _broadcast(args, profile)
    relay = relay_plan(args)
    try:
        config = NodeConfig(version=profile.name, bind=_bind_address(args.bind, relay=relay), name=args.name,
                            **_mtu(args))  # fmt: skip
    except (ConfigError, ValueError) as exc:
        raise CliError(str(exc)) from None
    report = _Report(fmt, quiet=args.quiet)
    report.alternate_unreliable = args.alternate_unreliable
    report.sizes = _sizes(args, config)
    stop = Stop()

    async def main() -> int:
        stop.deadline = trio.current_time() + duration
        nonlocal config, broadcast
        config = relay_node_config(config)
        broadcast = (relay_broadcast(broadcast[0], args.broadcast), broadcast[1])
        async with trio.open_nursery() as nursery:
            await nursery.start(stop.watch)
            # The browse ends at --timeout or when --duration ends, whichever comes first, by its own clock: a
            # browse that --duration ends found nothing just as one whose --timeout ran out, and says why alike.
            browse_for = min(timeout, duration)
            found: FoundSession | None = None
            join: LanJoin | None = None
            failure: JoinError | None = None
            with stop.phase(deadline=math.inf):
                found = await find_session(
                    profile, key, network_id=network_id, bind_ip=config.bind[0], broadcast=broadcast,
                    timeout=browse_for, application_version=app_version,
                )  # fmt: skip
            if found is None and not stop.signalled:
                failure = LanJoinError(no_answer(network_id, browse_for))
            elif found is not None:
                with stop.phase():
                    try:
                        join = await join_found(nursery, config, found)
                    except JoinError as exc:
                        failure = exc
            if failure is not None:
                reasons = []
                counts: Counter[str] = Counter()
                if found is None:
                    reasons = await _diagnose_join(profile, key, network_id, config.bind[0], broadcast, app_version,
                                                   counts)  # fmt: skip
                if fmt == "jsonl":
                    report.emit({"event": "join_failed", "reason": str(failure), "why": reasons,
                                 "ignored": dict(counts)}, "")  # fmt: skip
                nursery.cancel_scope.cancel()
                raise CliFailure(f"{failure}" + (f": {'; '.join(reasons)}" if reasons else ""))
            if join is None:
                nursery.cancel_scope.cancel()
                stop.exit_if_interrupted()
                if stop.signalled:
                    raise CliFailure("stopped before the join completed")
                assert found is not None
                raise CliFailure(f"--duration {args.duration} ended before the host at {found.info.host_ip}:"
                                 f"{found.info.host_port} answered the join")
            node = join.node
            info = join.info
            ip, port = node.address
            report.emit(
                {"event": "joined", "network_id": info.network_id, "version": profile.name,
                 "host": f"{info.host_ip}:{info.host_port}", "address": f"{ip}:{port}",
                 "station_index": join.station_index, "session_key_param": (info.session_key_param or b"").hex(),
                 "session_key": (join.found.session_key or b"").hex()},
                f"joined network id 0x{info.network_id:08x} (Pia {profile.name}, host {info.host_ip}:"
                f"{info.host_port}) as station {join.station_index} from {ip}:{port}",
            )  # fmt: skip
            # Should the host go and this node take over (the lowest index), it answers browses from then on.
            await serve_lan_when_host(nursery, join, key, browse_bind=("0.0.0.0", broadcast[1]),
                                      broadcast_ip=broadcast[0])  # fmt: skip
            with stop.phase():
                await report.participate(node, send_every, args.name, reliable=not args.unreliable)
            report.summary(node, info.network_id)
            with trio.move_on_after(2.0):
                await node.leave(timeout=1.0)
            nursery.cancel_scope.cancel()
        return 0

    status = run_trio(relay, main)
    stop.exit_if_interrupted()
    return status


class _Report:
    """Prints a node's events (table: one line each; jsonl: one object each) and tallies them."""

    def __init__(self, fmt: str, out: TextIO | None = None, *, quiet: bool = False) -> None:
        self.fmt = fmt
        self.quiet = quiet
        self.out = out if out is not None else sys.stdout
        self.seen: set[int] = set()
        self.received: Counter[int] = Counter()
        self.sent = 0
        self.alternate_unreliable = False
        self.sizes: list[int] = []  # --sizes

    def emit(self, record: dict[str, Any], text: str, *, result: bool = False) -> None:
        if self.quiet and not result and self.fmt != "jsonl":
            return
        self.out.write((json.dumps(record) if self.fmt == "jsonl" else text) + "\n")
        self.out.flush()

    async def participate(self, node: Node, send_every: float, name: str, *, reliable: bool = True) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._consume, node)
            if send_every > 0:
                nursery.start_soon(self._send, node, send_every, name, reliable)

    async def _send(self, node: Node, every: float, name: str, reliable: bool) -> None:
        number = 0
        while True:
            await trio.sleep(every)
            if node.station_index is None:
                continue
            text = f"{name} #{number} from station {node.station_index}".encode()
            if self.sizes:
                size = self.sizes[number % len(self.sizes)]
                text = (text + b"." * size)[:size]
            self.sent += await node.broadcast(text, reliable=reliable and not (self.alternate_unreliable and number % 2))
            number += 1

    async def _consume(self, node: Node) -> None:
        async for event in node.events():
            self.emit(*self._describe(event))

    def _describe(self, event: Event) -> tuple[dict[str, Any], str]:
        if isinstance(event, MeshJoined):
            return ({"event": "mesh_joined", "station_index": event.station_index, "host_index": event.host_index},
                    f"in the mesh as station {event.station_index} (host: station {event.host_index})")  # fmt: skip
        if isinstance(event, StationJoined):
            self.seen.add(event.station_index)
            where = f"{event.address[0]}:{event.address[1]}"
            return ({"event": "station_joined", "station_index": event.station_index,
                     "constant_id": event.constant_id, "address": where},
                    f"station {event.station_index} joined from {where} (constant id 0x{event.constant_id:016x})")
        if isinstance(event, StationLeft):
            return ({"event": "station_left", "station_index": event.station_index, "reason": event.reason},
                    f"station {event.station_index} left ({event.reason})")  # fmt: skip
        if isinstance(event, HostChanged):
            return ({"event": "host_changed", "old_host_index": event.old_host_index,
                     "new_host_index": event.new_host_index},
                    f"host moved from station {event.old_host_index} to {event.new_host_index}")  # fmt: skip
        if isinstance(event, DataReceived):
            self.received[event.source_index] += 1
            text = event.data.decode("utf-8", "replace")[:80]
            kind = ", reliable" if event.reliable else ""
            return ({"event": "data", "source_index": event.source_index, "reliable": event.reliable,
                     "size": len(event.data), "text": text},
                    f"data from station {event.source_index} ({len(event.data)} bytes{kind}): {text!r}")  # fmt: skip
        assert isinstance(event, MeshDestroyed)
        return {"event": "mesh_destroyed", "reason": event.reason}, f"mesh ended ({event.reason})"

    def summary(self, node: Node, network_id: int, **extra: Any) -> None:
        connected = sorted(
            s.index for s in node.stations() if s.index is not None and not s.is_self and s.state == "connected"
        )
        drops = node.statistics()["drops"]
        assert isinstance(drops, dict)
        # The datagrams the node dropped, by reason (as `pianode node` reports them): a peer whose
        # traffic vanishes shows why here.
        drops = {reason: n for reason, n in sorted(drops.items()) if n}
        record = {
            "event": "summary", "network_id": network_id, "station_index": node.station_index,
            "host_index": node.host_index, "stations_seen": sorted(self.seen), "connected": connected,
            "received": {str(k): v for k, v in sorted(self.received.items())}, "sent": self.sent, "drops": drops,
            **extra,
        }  # fmt: skip
        received = ", ".join(f"{v} from station {k}" for k, v in sorted(self.received.items())) or "nothing"
        text = (
            f"station {node.station_index} of network 0x{network_id:08x}: saw stations {sorted(self.seen)}, "
            f"connected to {connected}; received {received}; sent {self.sent}"
        )
        if drops:
            text += "; dropped " + ", ".join(f"{n} {reason}" for reason, n in drops.items())
        if "browse" in extra:
            text += f"; answered {extra['browse']['answered']} browse requests"
        self.emit(record, text, result=True)


def _run_discovery_host(args: argparse.Namespace, profile: VersionProfile) -> int:
    """Answer browse requests for a one-station session with no node behind it (any LAN version)."""
    key = _game_key(args)
    max_n = _number(args.max, "max", lo=1, hi=0xFFFF)
    address, port_or_none, bind = _host_sockets(args, profile)
    port = port_or_none or 49152
    duration = _duration(args)
    size = _number(args.host_address_size, "host-address-size", lo=6, hi=18)
    if size not in (6, 18):
        raise CliError("--host-address-size must be 6 or 18")
    broadcast_ip, _ = _broadcast(args, profile)
    app_version = _number(args.app_version, "app-version", hi=255 if profile.version < (6, 0) else 0xFFFF)
    info: LanSessionInfo | LanNetworkProperty
    try:
        if profile.version >= (6, 0):
            info = make_network_property(
                profile, ip=args.address, port=port, max_stations=max_n, name=args.name,
                application_version=app_version,
            )  # fmt: skip
        else:
            info = make_session_info(
                profile, ip=address, port=port, max_participants=max_n, name=args.name,
                game_mode=_number(args.game_mode, "game-mode"), application_version=app_version,
                host_address_size=size,
            )  # fmt: skip
        host = LanHost(profile, key, info, bind=bind, broadcast_ip=broadcast_ip)
    except (ConfigError, ValueError) as exc:
        raise CliError(str(exc)) from None

    stop = Stop()

    async def main() -> None:
        stop.deadline = trio.current_time() + duration
        async with trio.open_nursery() as nursery:
            await nursery.start(stop.watch)
            where = await nursery.start(host.run)
            print(
                f"hosting network id 0x{info.network_id:08x} (Pia {profile.name}, host {address}:{port}, "
                f"max {max_n}) on {where[0]}:{where[1]}",
                flush=True,
            )
            with stop.phase():
                await trio.sleep_forever()
            nursery.cancel_scope.cancel()

    trio.run(main)
    s = host.statistics()
    print(f"answered {s.answered} browse requests, dropped {sum(s.dropped.values())} {s.dropped or ''}".rstrip())
    stop.exit_if_interrupted()
    return 0


def session_record(found: FoundSession) -> dict[str, Any]:
    """One JSON object for a found session: its LanSessionInfo fields plus where and key."""
    info = found.info
    out: dict[str, Any] = {"reply_from": f"{found.address[0]}:{found.address[1]}"}
    if isinstance(info, LanSessionInfo):
        out.update(
            game_mode=info.game_mode,
            network_id=info.network_id,
            attributes=list(info.attributes),
            current_participants=info.current_participants,
            min_participants=info.min_participants,
            max_participants=info.max_participants,
            system_communication_version=info.system_communication_version,
            application_communication_version=info.application_communication_version,
            session_type=info.session_type,
            application_data=info.application_data.hex(),
            is_opened=info.is_opened,
            host_address=info.host_ip,
            host_port=info.host_port,
            host_constant_id=info.host_constant_id,
            host_variable_id=info.host_variable_id,
            host_service_variable_id=info.host_service_variable_id,
            stations=[
                {"role": s.role, "encoding": s.encoding, "username": s.username, "constant_id": s.constant_id}
                for s in info.stations
                if s.role != 0
            ],
            session_key_param=None if info.session_key_param is None else info.session_key_param.hex(),
        )
    else:
        assert isinstance(info, LanNetworkProperty)
        out.update(
            network_id=info.network_id,
            system_communication_version=info.system_communication_version,
            application_communication_version=info.application_communication_version,
            host_name=info.host_name,
            matchmake_key=info.matchmake_key,
            current_stations=info.current_stations,
            max_stations=info.max_stations,
            is_opened=info.is_opened,
            host_address=info.host_ip,
            host_port=info.host_port,
            has_player_limit=info.has_player_limit,
            current_players=info.current_players,
            application_data=info.application_data.hex(),
            session_key_param=None if info.session_key_param is None else info.session_key_param.hex(),
        )
    out["session_key"] = None if found.session_key is None else found.session_key.hex()
    return out


def _print_table(found: list[FoundSession], out: TextIO) -> None:
    rows = []
    for f in found:
        rec = session_record(f)
        players = rec.get("current_participants", rec.get("current_stations"))
        maximum = rec.get("max_participants", rec.get("max_stations"))
        rows.append([
            f"{rec['host_address']}:{rec['host_port']}", f"0x{rec['network_id']:08x}", f"{players}/{maximum}",
            rec.get("system_communication_version", "-"), rec.get("application_communication_version", "-"),
            "yes" if rec.get("is_opened", True) else "no",
        ])  # fmt: skip
    if rows:
        header = ["host", "network id", "players", "system version", "app version", "open"]
        for line in render_table(header, rows, right={2, 3, 4}):
            out.write(line + "\n")
    out.write(f"{len(found)} session(s) found\n")


def run_browse(args: argparse.Namespace) -> int:
    profile = _profile(args)
    key = _game_key(args)
    timeout = _number(args.timeout, "timeout", hi=3600, integer=False, lo_open=True)
    if args.format not in ("table", "jsonl"):
        raise CliError(f"--format must be table or jsonl, got {args.format!r}")
    app_version = None if args.app_version is None else _number(
        args.app_version, "app-version", hi=255 if profile.version < (6, 0) else 0xFFFF)
    broadcast = _broadcast(args, profile)
    relay = relay_plan(args)
    bind = _bind_address(args.bind, relay=relay)
    try:
        client = BrowseClient(profile, key, broadcast_ip=broadcast[0], application_version=app_version)
    except (ConfigError, ValueError) as exc:
        raise CliError(str(exc)) from None
    stop = Stop()

    async def main() -> list[FoundSession]:
        nonlocal bind, broadcast
        bind = relay_node_config(NodeConfig(bind=bind)).bind
        broadcast = (relay_broadcast(broadcast[0], args.broadcast), broadcast[1])
        client.broadcast_ip = broadcast[0]
        async with trio.open_nursery() as nursery:
            await nursery.start(stop.watch)
            found: list[FoundSession] = []
            with stop.phase():
                found = await browse(profile, key, broadcast=broadcast, bind=bind, timeout=timeout, client=client)
            nursery.cancel_scope.cancel()
        return found

    found = run_trio(relay, main)
    stop.exit_if_interrupted()
    ignored = ignored_replies(profile, client)
    if args.format == "jsonl":
        for f in found:
            sys.stdout.write(json.dumps({"event": "session", **session_record(f)}) + "\n")
        for r in ignored:
            sys.stdout.write(json.dumps({"event": "ignored", **r}) + "\n")
        reasons: Counter[str] = Counter()
        for r in ignored:
            reasons[r["reason"]] += r["count"]
        sys.stdout.write(json.dumps({"event": "summary", "found": len(found), "ignored": dict(reasons),
                                     "requests": client.counters.sent, "replies": client.counters.received}) + "\n")
    else:
        _print_table(found, sys.stdout)
    sys.stdout.flush()
    for r in ignored:
        print(f"pianode lan browse: {r['message']}", file=sys.stderr)
    if not found and not ignored and client.counters.received == 0:
        where = f"{broadcast[0]}:{broadcast[1]}"
        hint = ", or hosts with another game key (a host ignores a request whose challenge it cannot open)" if (
            profile.lan_challenge_version is not None) else ""  # fmt: skip
        stopped = f" ({stop.listened(timeout)})" if stop.signalled else ""
        print(f"pianode lan browse: no reply to the browse request sent to {where}{stopped}: no host there{hint}",
              file=sys.stderr)  # fmt: skip
    return 0 if found else 1
