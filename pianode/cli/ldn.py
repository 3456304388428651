"""pianode ldn host | scan | join: simulated LDN networks on one machine (spec §7).

ldn host creates an LDN network (169.254.X.0/24, on loopback 127.254.X.0/24),
starts its Pia host node and advertises the network on the discovery channel
(UDP broadcast to 127.255.255.255:30400) until --duration passes or Ctrl-C.
ldn scan lists the networks it hears.  ldn join scans, connects, derives
the session key and network id from the game key and the advertisement as a
console does, and joins the host's mesh.

With --stations N every process waits until the mesh has N stations, sends
--messages M numbered reliable messages to every other station, waits for
the M of every other station, then leaves (the host waits for the others to
go first).  Ctrl-C ends a run the same way (summary, leave, the recording
written) and then prints interrupted.  Exit status 0 when that exchange
completed (or, without --stations, when the run ended normally), 1 when
it did not or the join failed, 2 with a one-line message for a bad flag or
setting, 130 after Ctrl-C.

Through a relay hub (--relay HOST:PORT --relay-ca --relay-cert --relay-key,
see pianode relay --help) the network spans places: each process is a site
of the hub's room, its sockets on the virtual address the hub gave it, and
the advertisements go to the room's broadcast address.  The LDN network keeps
its own 169.254.X.Y addresses in the advertisement and the connect reply
(pianode.ldn.network: the relay plan).

Output: --format table (default) or jsonl: one JSON object per line,
{"event": "network" | "joined" | "station-joined" | "station-left" |
"summary", ...} for host/join, one object per network for scan.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ipaddress
import json
import socket
import struct
import sys
from typing import Any

import attrs
import trio

from pianode.cli.relay import add_relay_arguments, relay_address, relay_plan, run_trio
from pianode.cli.common import (
    CliError,
    CliFailure,
    Stop,
    check_destination,
    check_name,
    check_record_path,
    relay_reads,
    number_arg,
    port_arg,
    render_table,
    version_arg,
)
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, StationJoined, StationLeft
from pianode.ldn.network import (
    DEFAULT_BROADCAST,
    DISCOVERY_PORT,
    PIA_PORT,
    FoundNetwork,
    JoinRefused,
    LdnHostConfig,
    LdnRecorder,
    derive_session,
    open_ldn_host,
    open_ldn_station,
    scan,
)
from pianode.mesh.node import JoinError, Node
from protocols.errors import ConfigError, DecodeError
from protocols.pia.keys import parse_game_key
from protocols.pia.ldn import (
    LdnApplicationData,
    LdnSystemProperty,
    decode_application_data,
    ldn_family,
    read_any_application_data,
    versions_with_ldn_system_version,
)
from protocols.pia.versions import profile_for

__all__ = ["add_parser"]

_DATA = struct.Struct(">4sBI")  # b"LDNX", source station index, sequence
_TAG = b"LDNX"
#: --messages when not given (a given one needs --stations, whose exchange it counts).
_MESSAGES = 10


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ldn", help="LDN mode, simulated on loopback: host, scan for and join networks",
                       description=__doc__)
    ldn_sub = p.add_subparsers(dest="ldn_command", metavar="SUBCOMMAND")

    def common(q: argparse.ArgumentParser, *, key_required: bool) -> None:
        q.add_argument("--game-key", required=key_required, help="game key: 32 hex digits or 16 ASCII characters" + (
            "" if key_required else "; each network's row shows the session key it derives (an advertisement cannot "
            "show a wrong game key: ldn join finds it, by the host's packets that fail to open)"))
        q.add_argument("--version", type=version_arg, default="5.18", help="Pia version (default 5.18)")
        q.add_argument("--allow-nearest-version", action="store_true", help="use the nearest documented version")
        q.add_argument("--discovery-port", type=port_arg("--discovery-port", allow_zero=False), default=DISCOVERY_PORT,
                       help=f"UDP port of the advertisement channel (default {DISCOVERY_PORT})")
        q.add_argument("--local-id", default=None, metavar="HEX",
                       help="local communication id (title id) to use or match")
        q.add_argument("--format", choices=("table", "jsonl"), default="table", help="output format (default table)")
        add_relay_arguments(q)

    def station(q: argparse.ArgumentParser) -> None:
        q.add_argument("--name", default="pianode", help="player name in the participant list (default pianode)")
        q.add_argument("--duration", type=number_arg("--duration", 0, 86400, lo_open=True), default=None, metavar="S",
                       help="stop after S seconds (> 0 and ≤ 86400; default: until Ctrl-C)")
        q.add_argument("--stations", type=number_arg("--stations", 2, 8, integer=True), default=None, metavar="N",
                       help="exchange numbered messages once the mesh has N stations (2..8), then leave")
        q.add_argument("--messages", type=number_arg("--messages", 0, 100000, integer=True), default=None, metavar="M",
                       help=f"with --stations: reliable messages per station (0..100000, default {_MESSAGES})")
        q.add_argument("--session-key", default=None, metavar="HEX",
                       help="Pia 5.7/5.8 only: the game-supplied session key")
        q.add_argument("--backend", choices=("cryptography", "pycryptodome"), default=None, help="AEAD backend")
        q.add_argument("--seed", type=int, default=None, help="seed for ids, keys and addresses (reproducible runs)")
        q.add_argument("--record", metavar="FILE.pcap",
                       help="record the datagrams this station sends and the LDN discovery frames it sees (as "
                            "non-IP Ethernet frames, EtherType 0x88b5), and FILE.session.json with what a capture "
                            "offers (game key, application data, MACs)")  # fmt: skip

    h = ldn_sub.add_parser("host", help="create an LDN network, host its Pia mesh and advertise it")
    common(h, key_required=True)
    station(h)
    h.add_argument("--max", type=number_arg("--max", 2, 8, integer=True), default=4, metavar="N",
                   help="maximum participants, 2..8 (default 4)")
    h.add_argument("--port", type=port_arg("--port"), default=PIA_PORT,
                   help=f"Pia UDP port inside the network (0..65535, default {PIA_PORT})")
    h.add_argument("--subnet", type=number_arg("--subnet", 1, 254, integer=True), default=None, metavar="X",
                   help="use 169.254.X.0/24, X 1..254 (default random)")
    h.add_argument("--address", default=None, metavar="169.254.X.1",
                   help="real link: bind this LDN address itself (default: loopback 127.254.X.1)")
    h.add_argument("--game-mode", type=number_arg("--game-mode", 0, 0xFFFFFFFF, integer=True), default=0,
                   help="game mode in the session info (default 0)")
    h.add_argument("--broadcast", default=DEFAULT_BROADCAST,
                   help=f"advertisement destination (default {DEFAULT_BROADCAST})")
    h.add_argument("--interval", type=number_arg("--interval", 0.01, 10), default=0.1, metavar="S",
                   help="seconds between advertisements (0.01..10, default 0.1)")
    h.set_defaults(handler=run_host)

    s = ldn_sub.add_parser("scan", help="list the LDN networks advertised on the discovery channel")
    common(s, key_required=False)
    s.add_argument("--timeout", type=number_arg("--timeout", 0, 3600, lo_open=True), default=1.0, metavar="S",
                   help="seconds to listen (> 0 and ≤ 3600, default 1)")
    s.set_defaults(handler=run_scan)

    j = ldn_sub.add_parser("join", help="scan, connect to an LDN network and join its Pia mesh")
    common(j, key_required=True)
    station(j)
    j.add_argument("--ssid", default=None, metavar="HEX",
                   help="join the network with this SSID (default: the first heard)")
    j.add_argument("--address", default=None, metavar="169.254.X.Y",
                   help="real link: request and bind this LDN address (default: assigned, on loopback 127.254.X.Y)")
    j.add_argument("--timeout", type=number_arg("--timeout", 0, 3600, lo_open=True), default=3.0, metavar="S",
                   help="seconds to scan for the network (> 0 and ≤ 3600, default 3)")
    j.set_defaults(handler=run_join)


# ---------------------------------------------------------------------- argument checks


def _game_key(text: str) -> bytes:
    try:
        return parse_game_key(text)
    except ConfigError as exc:
        raise CliError(f"--game-key: {exc}") from None


def _local_id(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text, 16)
    except ValueError:
        raise CliError(f"--local-id must be hex, got {text!r}") from None
    if not 0 <= value < 1 << 64:
        raise CliError("--local-id must fit in 64 bits")
    return value


def _session_key(text: str | None) -> bytes | None:
    if text is None:
        return None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise CliError("--session-key must be 32 hex digits") from None
    if len(key) != 16:
        raise CliError("--session-key must be 16 bytes (32 hex digits)")
    return key


def _ipv4(flag: str, text: str) -> str:
    """--broadcast: an IPv4 address to send the advertisements to (a broadcast address is the point)."""
    try:
        ip = ipaddress.IPv4Address(text)
    except ValueError:
        raise CliError(f"{flag} must be an IPv4 address, got {text!r}") from None
    check_destination(f"{flag} {text}", ip, broadcast=True)
    return str(ip)


def _ldn_address(text: str | None, *, host: bool) -> str | None:
    if text is None:
        return None
    try:
        packed = ipaddress.IPv4Address(text).packed
    except ValueError:
        raise CliError(f"--address must be an IPv4 address, got {text!r}") from None
    if packed[:2] != b"\xa9\xfe" or not 1 <= packed[2] <= 254 or (packed[3] == 1) != host or packed[3] in (0, 255):
        raise CliError(f"--address must be 169.254.X.{'1' if host else 'Y (Y 2..254)'}, got {text}")
    return text


def _check_ldn_bindable(text: str | None, *, host: bool) -> None:
    """--address (a real link: the sockets bind the LDN address itself) must be an address of this machine now,
    not found out after a scan, or in a message advising another kind of address."""
    if text is None:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((text, 0))
        except OSError as exc:
            what = "169.254.X.1 (the host's address)" if host else "169.254.X.Y"
            raise CliError(f"--address {text}: not an address of this machine ({exc.strerror or exc}): --address "
                           f"binds the LDN address itself, so give a {what} that a local interface of the link "
                           "has, or leave --address out to simulate the network on loopback") from None


def _check_station_args(args: argparse.Namespace) -> None:
    """The checks host and join share, made before anything is bound, scanned or advertised."""
    check_record_path("--record", args.record, reads=relay_reads(args))
    check_name("--name", args.name)
    profile = _ldn_profile(args)
    given = _session_key(args.session_key) is not None
    supplied = (5, 7) <= profile.version < (5, 9)
    if given and not supplied:
        # Spec §3.3, §7.3: from 5.9 the key derives from the game key and the advertisement (before 5.7
        # the packets are signed with the game key): a key given here would be ignored.
        raise CliError(f"--session-key is for Pia 5.7/5.8 LDN, whose game supplies the key; Pia {profile.name} "
                       "derives it from --game-key and the network's advertisement")  # fmt: skip
    if supplied and not given:
        # (pianode.ldn.network.derive_session: no rule derives it, so a join could only fail once it heard a network)
        raise CliError(f"Pia {profile.name} LDN needs --session-key: its game supplies the session key, which "
                       "nothing derives from --game-key or the advertisement")  # fmt: skip
    if args.stations is None and args.messages is not None:
        # Without --stations there is no exchange: the run only hosts or joins, and sends nothing.
        raise CliError("--messages counts the messages of the exchange --stations N starts: give --stations too")
    if args.messages is None:
        args.messages = _MESSAGES
    _local_id(args.local_id)


def _ldn_profile(args: argparse.Namespace) -> Any:
    """--version as a version with LDN application data (spec §7.2), or the line saying why not."""
    profile = _profile(args)
    try:
        ldn_family(profile)
    except ConfigError as exc:
        raise CliError(f"--version {profile.name}: {exc}") from None
    return profile


def _profile(args: argparse.Namespace) -> Any:
    try:
        return profile_for(args.version, allow_nearest=args.allow_nearest_version)
    except ConfigError as exc:
        raise CliError(f"--version {args.version}: {exc}".replace(
            "(allow the nearest version to use it anyway)", "(--allow-nearest-version uses the nearest anyway)")) from None


def _node_config(args: argparse.Namespace) -> NodeConfig:
    return NodeConfig(
        version=args.version,
        network="ldn",
        allow_nearest_version=args.allow_nearest_version,
        aead_backend=args.backend,
        seed=args.seed,
        name=args.name,
    )


class _Out:
    def __init__(self, fmt: str, quiet: bool = False) -> None:
        self.jsonl = fmt == "jsonl"
        self.quiet = quiet and not self.jsonl

    def emit(self, record: dict[str, Any], text: str, *, result: bool = False) -> None:
        if self.quiet and not result:
            return
        print(json.dumps(record, sort_keys=True) if self.jsonl else text, flush=True)


# ---------------------------------------------------------------------- the exchange


@attrs.define
class _Exchange:
    """Numbered reliable messages between every pair of stations (``--stations``/``--messages``)."""

    node: Node
    out: _Out
    stations: int | None
    messages: int
    received: collections.Counter[int] = attrs.field(factory=collections.Counter)
    sent: int = 0
    complete: bool = False
    started: float = attrs.field(factory=trio.current_time)
    #: Seconds from start until the mesh had ``stations`` members and until every message arrived.
    timings: dict[str, float] = attrs.field(factory=dict)
    _changed: trio.Event = attrs.field(factory=trio.Event)

    async def consume(self) -> None:
        async for event in self.node.events():
            if isinstance(event, DataReceived):
                tag, src, _seq = _DATA.unpack(event.data) if len(event.data) == _DATA.size else (b"", 0, 0)
                if tag == _TAG:
                    self.received[src] += 1
            elif isinstance(event, StationJoined):
                where = f"{event.address[0]}:{event.address[1]}"
                self.out.emit({"event": "station-joined", "index": event.station_index, "address": where},
                              f"station {event.station_index} joined from {where}")  # fmt: skip
            elif isinstance(event, StationLeft):
                self.out.emit({"event": "station-left", "index": event.station_index, "reason": event.reason},
                              f"station {event.station_index} left ({event.reason})")  # fmt: skip
            self._changed.set()
            self._changed = trio.Event()

    def _connected(self) -> int:
        return sum(1 for s in self.node.stations() if s.state == "connected")

    async def _until(self, predicate: Any) -> None:
        while not predicate():
            with trio.move_on_after(0.05):
                await self._changed.wait()

    async def run(self, *, host: bool) -> None:
        if self.stations is None:
            await trio.sleep_forever()
        want = self.stations - 1
        await self._until(lambda: self._connected() >= want)
        self.timings["formed"] = round(trio.current_time() - self.started, 3)
        me = self.node.station_index or 0
        for seq in range(self.messages):
            await self.node.broadcast(_DATA.pack(_TAG, me, seq), reliable=True)
            self.sent += 1
        await self._until(lambda: sum(1 for n in self.received.values() if n >= self.messages) >= want)
        self.complete = True
        self.timings["complete"] = round(trio.current_time() - self.started, 3)
        if host:  # the others leave first, so the host's departure triggers no migration
            with trio.move_on_after(5.0):
                await self._until(lambda: self._connected() == 0)
        else:
            await trio.sleep(1.0)  # let our last retransmissions and acks land


async def _leave(node: Node, ex: _Exchange) -> None:
    with trio.move_on_after(3.0):
        await node.leave()
    ex.timings["left"] = round(trio.current_time() - ex.started, 3)


def _summary(role: str, node: Node, ex: _Exchange, extra: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    ok = ex.complete if ex.stations is not None else True
    record = {
        "event": "summary",
        "role": role,
        "station_index": node.station_index,
        "address": f"{node.address[0]}:{node.address[1]}",
        "sent": ex.sent,
        "received": {str(k): v for k, v in sorted(ex.received.items())},
        "stations": ex.stations,
        "messages": ex.messages,
        "ok": ok,
        "timings": ex.timings,
        "drops": dict(node.statistics()["drops"]),  # type: ignore[call-overload]
        **extra,
    }
    return record, ok


def _summary_text(record: dict[str, Any]) -> str:
    got = ", ".join(f"{n} from {k}" for k, n in record["received"].items()) or "nothing"
    return (f"{record['role']} (station index {record['station_index']}) at {record['address']}: "
            f"sent {record['sent']}, received {got}; result {'OK' if record['ok'] else 'INCOMPLETE'}")  # fmt: skip


# ---------------------------------------------------------------------- host


def run_host(args: argparse.Namespace) -> int:
    _check_station_args(args)
    if args.stations is not None and args.stations > args.max:
        raise CliError(f"--stations {args.stations} cannot exceed --max {args.max}")
    address = _ldn_address(args.address, host=True)
    if address is not None and args.subnet is not None and int(address.split(".")[2]) != args.subnet:
        # The network is 169.254.X.0/24 of the host's address: --address picks X too.
        raise CliError(f"--subnet {args.subnet} selects 169.254.{args.subnet}.0/24, but --address {address} is in "
                       f"169.254.{address.split('.')[2]}.0/24: give one of them (--address alone picks its subnet)")
    game_key = _game_key(args.game_key)
    config = LdnHostConfig(
        node=_node_config(args),
        game_key=game_key,
        max_participants=args.max,
        name=args.name,
        pia_port=args.port,
        discovery=(_ipv4("--broadcast", args.broadcast), args.discovery_port),
        advertise_interval=args.interval,
        local_communication_id=_local_id(args.local_id) or 0x0100_0000_0000_1000,
        game_mode=args.game_mode,
        subnet=args.subnet,
        session_key=_session_key(args.session_key),
        address=address,
    )
    relay = relay_plan(args)
    if relay is not None and args.address is not None:
        raise CliError("--address is for a real link; through --relay the sockets use the site's virtual address")
    _check_ldn_bindable(address, host=True)
    stop = Stop()
    status = run_trio(relay, _host, args, config, stop)
    stop.exit_if_interrupted()
    return status


async def _host(args: argparse.Namespace, config: LdnHostConfig, stop: Stop) -> int:
    where = relay_address()
    if where is not None:  # the relay plan: sockets on the site's address, adverts to the room
        broadcast = where[1] if args.broadcast == DEFAULT_BROADCAST else config.discovery[0]
        config = attrs.evolve(config, socket_address=where[0], discovery=(broadcast, config.discovery[1]))
    out = _Out(args.format, args.quiet)
    recorder = LdnRecorder() if args.record else None
    async with trio.open_nursery() as outer:
        await outer.start(stop.watch)
        status = await _host_run(args, config, out, recorder, stop)
        outer.cancel_scope.cancel()
    return status


async def _host_run(args: argparse.Namespace, config: LdnHostConfig, out: _Out, recorder: LdnRecorder | None,
                    stop: Stop) -> int:  # fmt: skip
    async with open_ldn_host(config, tap=recorder.tap if recorder else None,
                             link_tap=recorder.tap if recorder else None) as host:  # fmt: skip
        st = host.state
        out.emit(
            {
                "event": "network",
                "host": st.host.ip,
                "socket": host.node.address[0],
                "pia_port": host.node.address[1],
                "mac": st.host.mac.hex(":"),
                "ssid": st.ssid.hex(),
                "network_id": st.session.network_id,
                "application_data": st.application_data.hex(),
                "version": config.node.profile.name,
            },
            f"LDN network 169.254.{st.x}.0/24 (sockets on {host.node.address[0]}), host {st.host.ip} "
            f"Pia port {host.node.address[1]}, SSID {st.ssid.hex()}, network id 0x{st.session.network_id:08x}",
        )
        ex = _Exchange(host.node, out, args.stations, args.messages)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ex.consume)
            with stop.phase(), trio.move_on_after(args.duration if args.duration is not None else float("inf")):
                await ex.run(host=True)
            record, ok = _summary("host", host.node, ex, {"participants_seen": sorted(st.history)})
            await _leave(host.node, ex)
            nursery.cancel_scope.cancel()
        unwritten = None if recorder is None else _write_recording(record, recorder, args.record,
                                                                    host.session_file(args.game_key))  # fmt: skip
    out.emit(record, _summary_text(record), result=True)
    if unwritten is not None:
        raise CliFailure(unwritten)
    return 0 if ok else 1


def _write_recording(record: dict[str, Any], recorder: Any, path: str, session: dict[str, Any]) -> str | None:
    """The recording written and named in *record*; or, when it cannot be written now (a full disk), the line
    that says so, said after the summary (which is the run's all the same)."""
    try:
        record["record"] = recorder.write(path, session)
    except OSError as exc:  # pianode.capture.output leaves no partial file
        return f"--record {path}: the recording was not written ({exc.strerror or exc})"
    return None


# ---------------------------------------------------------------------- scan


#: Why a scan ignored what it heard on the discovery channel (pianode.ldn.network.scan's reasons).
_IGNORED_FRAMES = {
    "not_a_frame": "not a frame of the LDN discovery channel",
    "not_an_advertisement": "not an advertisement",
    "bad_port": "an advertisement naming Pia or control port 0 (no socket)",
    "other_local_communication_id": "another --local-id",
    "other_ssid": "another --ssid",
    "no_ldn_host": "no host with an LDN address",
    "other_source": "a network already heard, from another address than its host's",
    "too_many_networks": "more networks than a scan keeps (pianode.ldn.network.MAX_SCAN_NETWORKS)",
}


def _ignored_text(ignored: collections.Counter[str]) -> str:
    if not ignored:
        return ""
    parts = ", ".join(f"{n} {_IGNORED_FRAMES.get(reason, reason)}" for reason, n in ignored.most_common())
    return f" (heard and ignored: {parts})"


def run_scan(args: argparse.Namespace) -> int:
    profile = _ldn_profile(args)  # (a version without LDN could read no advertisement it heard)
    game_key = _game_key(args.game_key) if args.game_key is not None else None
    local_id = _local_id(args.local_id)
    relay = relay_plan(args)
    stop = Stop()
    ignored: collections.Counter[str] = collections.Counter()

    async def main() -> list[FoundNetwork]:
        found: list[FoundNetwork] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(stop.watch)
            with stop.phase():
                found = await scan(args.timeout, port=args.discovery_port, local_communication_id=local_id,
                                   ignored=ignored)  # fmt: skip
            nursery.cancel_scope.cancel()
        return found

    found = run_trio(relay, main)
    stop.exit_if_interrupted()
    out = _Out(args.format, args.quiet)
    records = [network_record(net, profile, game_key) for net in sorted(found, key=lambda n: n.advertisement.host.ip)]
    if out.jsonl:
        for record in records:
            out.emit({"event": "network", **record}, "")
        out.emit({"event": "summary", "found": len(records), "ignored": dict(ignored)}, "")
    elif records:
        rows = [[r["host"], r["socket"], r["pia_port"], f"{len(r['participants'])}/{r['max_participants']}",
                 _system_version_cell(r), f"{r['network_id']:#010x}" if "network_id" in r else "unreadable",
                 r["ssid"]] for r in records]  # fmt: skip
        for line in render_table(["host", "socket", "pia port", "players", "system version", "network id", "ssid"],
                                 rows, right={2, 3, 4}):  # fmt: skip
            print(line)
    for record in records:
        if "error" in record:
            print(f"pianode ldn scan: {record['error']}", file=sys.stderr)
    if not found:
        print(f"pianode ldn scan: no LDN network heard on port {args.discovery_port} {stop.listened(args.timeout)}"
              + _ignored_text(ignored), file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _system_version_cell(record: dict[str, Any]) -> str:
    """The table's system version: as the beacon states it, marked when it is another version's (the line on
    stderr says whose), or "unreadable" (the line says why)."""
    if "system_communication_version" not in record:
        return "unreadable"
    sv = str(record["system_communication_version"])
    return f"{sv} (other)" if "other_version" in record else sv


def network_record(net: FoundNetwork, profile: Any, game_key: bytes | None) -> dict[str, Any]:
    """One scanned network as JSON-ready fields (the Pia ones decoded for *profile*).

    A network this version cannot read (or whose LDN system communication version is another's) is read
    as the version its beacon states (``other_version``); ``error`` says in one line what stands in the way."""
    adv = net.advertisement
    record: dict[str, Any] = {
        "host": adv.host.ip,
        "socket": net.host_address[0],
        "pia_port": net.pia_port,
        "ssid": adv.ssid.hex(),
        "local_communication_id": f"{adv.local_communication_id:016x}",
        "game_mode": adv.game_mode,
        "max_participants": adv.max_participants,
        "participants": [{"ip": p.ip, "mac": p.mac.hex(":"), "name": p.name, "connected": p.connected}
                         for p in adv.participants],  # fmt: skip
        "application_data": adv.application_data.hex(),
    }
    where = f"{adv.host.ip}'s network"
    want = profile.ldn_system_version
    pia: LdnApplicationData | LdnSystemProperty | None
    try:
        pia = decode_application_data(adv.application_data, profile)
    except (DecodeError, ConfigError) as exc:
        pia, why = None, exc
    if pia is None or (want is not None and pia.system_communication_version != want):
        # (else read in this version's layout: of a system communication version no other layout reads)
        header = read_any_application_data(adv.application_data) or pia
        if header is None:
            record["error"] = (f"{where}: its application data is not Pia {profile.name}'s ({why}), nor that of "
                               "another Pia version pianode reads")  # fmt: skip
            return record
        _other_version(record, where, profile, header, adv.ssid)
        return record
    record["system_communication_version"] = pia.system_communication_version
    if isinstance(pia, LdnApplicationData):
        record["network_id"] = pia.network_id
        record["session_param"] = pia.session_param
    if game_key is not None:
        try:
            session = derive_session(profile, game_key, adv)
        except (DecodeError, ConfigError) as exc:
            record["error"] = f"{where}: {exc}"
        else:
            record["network_id"] = session.network_id
            record["session_key"] = session.session_key.hex()
    return record


def _other_version(record: dict[str, Any], where: str, profile: Any,
                   header: LdnApplicationData | LdnSystemProperty, ssid: bytes) -> None:  # fmt: skip
    """Fill *record* with what a beacon of another Pia version states, and say so in its ``error``."""
    family = "5.x" if isinstance(header, LdnApplicationData) else "6.x"
    versions = versions_with_ldn_system_version(header)
    sv = header.system_communication_version
    record["system_communication_version"] = sv
    record["network_id"] = (header.network_id if isinstance(header, LdnApplicationData)
                            else LdnSystemProperty.network_id_for(ssid))  # fmt: skip
    record["other_version"] = {"family": family, "system_communication_version": sv, "versions": list(versions)}
    if versions:
        span = versions[0] if len(versions) == 1 else f"{versions[0]}-{versions[-1]}"
        which = f"LDN system communication version {sv} (Pia {span})"
        hint = f"scan with --version {versions[-1]} to read it"
    else:
        which = f"a Pia {family} network (LDN system communication version {sv})"
        same = family == f"{profile.version[0]}.x"  # (then no version pianode documents speaks it)
        hint = "no Pia version pianode documents speaks it" if same else f"scan with a --version of Pia {family} to read it"
    mine = f"Pia {profile.name}'s {profile.ldn_system_version}" if profile.ldn_system_version is not None else (
        f"one Pia {profile.name} reads")  # fmt: skip
    record["error"] = f"{where} is of another Pia version: {which}, not {mine}; {hint}"


# ---------------------------------------------------------------------- join


def run_join(args: argparse.Namespace) -> int:
    _check_station_args(args)
    ssid = None
    if args.ssid is not None:
        try:
            ssid = bytes.fromhex(args.ssid)
        except ValueError:
            raise CliError("--ssid must be 32 hex digits") from None
        if len(ssid) != 16:
            raise CliError("--ssid must be 16 bytes (32 hex digits)")
    game_key = _game_key(args.game_key)
    _ldn_address(args.address, host=False)
    node_config = _node_config(args)
    relay = relay_plan(args)
    if relay is not None and args.address is not None:
        raise CliError("--address is for a real link; through --relay the sockets use the site's virtual address")
    _check_ldn_bindable(args.address, host=False)
    stop = Stop()

    async def main() -> int:
        async with trio.open_nursery() as outer:
            await outer.start(stop.watch)
            status = await _join(args, node_config, game_key, ssid, stop)
            outer.cancel_scope.cancel()
        return status

    status = run_trio(relay, main)
    stop.exit_if_interrupted()
    return status


async def _join(args: argparse.Namespace, node_config: NodeConfig, game_key: bytes, ssid: bytes | None,
                stop: Stop) -> int:  # fmt: skip
    out = _Out(args.format, args.quiet)
    recorder = LdnRecorder() if args.record else None
    found: list[FoundNetwork] = []
    ignored: collections.Counter[str] = collections.Counter()
    with stop.phase():
        found = await scan(args.timeout, port=args.discovery_port, local_communication_id=_local_id(args.local_id),
                           ssid=ssid, first=True, link_tap=recorder.tap if recorder else None,
                           ignored=ignored)  # fmt: skip
    if not found:
        stop.exit_if_interrupted()
        message = (f"no LDN network heard on port {args.discovery_port} {stop.listened(args.timeout)}"
                   + (" with that --ssid" if ssid else "") + _ignored_text(ignored))  # fmt: skip
        if out.jsonl:
            out.emit({"event": "join_failed", "reason": message, "ignored": dict(ignored)}, "")
        raise CliFailure(message)
    net = found[0]
    try:
        where = relay_address()
        async with open_ldn_station(net, node_config, game_key, name=args.name, address=args.address,
                                    socket_address=where[0] if where is not None else None,
                                    session_key=_session_key(args.session_key),
                                    tap=recorder.tap if recorder else None,
                                    link_tap=recorder.tap if recorder else None) as st:  # fmt: skip
            node = st.node
            out.emit(
                {"event": "joined", "ip": st.ip, "mac": st.mac.hex(":"), "socket": node.address[0],
                 "station_index": node.station_index, "host": net.advertisement.host.ip,
                 "network_id": st.session.network_id},
                f"joined {net.advertisement.host.ip}'s network as {st.ip} ({st.mac.hex(':')}, socket "
                f"{node.address[0]}), station index {node.station_index}",
            )  # fmt: skip
            ex = _Exchange(node, out, args.stations, args.messages)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ex.consume)
                with stop.phase(), trio.move_on_after(args.duration if args.duration is not None else float("inf")):
                    await ex.run(host=False)
                record, ok = _summary("station", node, ex, {"ip": st.ip, "mac": st.mac.hex(":")})
                await _leave(node, ex)
                nursery.cancel_scope.cancel()
            unwritten = None if recorder is None else _write_recording(record, recorder, args.record,
                                                                        st.session_file(args.game_key))  # fmt: skip
    except ConfigError as exc:
        # What the heard network's advertisement says does not fit these settings (another LDN system
        # communication version, a key the game must supply): a failed join (exit 1), as a refusal is.
        stop.exit_if_interrupted()
        message = f"{net.advertisement.host.ip}'s network: {exc}"
        if out.jsonl:
            out.emit({"event": "join_failed", "reason": message, "drops": {}}, "")
        raise CliFailure(message) from None
    except (JoinRefused, JoinError) as exc:
        stop.exit_if_interrupted()
        drops: dict[str, int] = {}
        if isinstance(exc, JoinError):
            with contextlib.suppress(Exception):
                drops = st.node.statistics()["drops"]  # type: ignore[assignment]
        hint = (f": {drops['bad_tag']} answer(s) did not authenticate with the session key derived from this "
                "--game-key (is it the host's?)") if drops.get("bad_tag") else (
                ": is --game-key the host's (the session key derives from it)?" if isinstance(exc, JoinError) else "")
        if out.jsonl:
            out.emit({"event": "join_failed", "reason": f"{exc}{hint}", "drops": dict(drops)}, "")
        raise CliFailure(f"{exc}{hint}") from None
    out.emit(record, _summary_text(record), result=True)
    if unwritten is not None:
        raise CliFailure(unwritten)
    return 0 if ok else 1
