"""``pianode lan host`` and ``pianode lan browse``: LAN-mode discovery as consoles do it (spec §6).

``lan host`` answers browse requests on ``0.0.0.0:30000`` (35000 for 6.x)
for a one-station session whose host sits at ``--address:--port`` (LAN
identities derived from them, spec §4), until ``--duration`` seconds pass or
Ctrl-C.  ``lan browse`` broadcasts one request to ``127.255.255.255`` and
prints every session whose challenge verified, as a table or as JSON Lines
(one object per session with the LanSessionInfo fields and the derived
session key).  Both default to loopback, so they work on one machine with no
setup.

Exit status: 0 on success (``browse``: at least one session found), 1 when a
browse found nothing, 2 with a one-line message for a bad flag or setting.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

import trio

from pianode.cli import CliError
from pianode.commands.common import parse_hostport
from pianode.lan import (
    DEFAULT_BROADCAST,
    BrowseClient,
    FoundSession,
    LanHost,
    browse,
    make_network_property,
    make_session_info,
)
from protocols.errors import ConfigError
from protocols.pia.keys import parse_game_key
from protocols.pia.lan import LanNetworkProperty, LanSessionInfo, browse_port
from protocols.pia.versions import VersionProfile, profile_for

__all__ = ["add_parser", "session_record"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lan", help="LAN mode: host a session or browse for sessions (UDP broadcast)")
    lan_sub = p.add_subparsers(dest="lan_command", metavar="SUBCOMMAND")

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--game-key", required=True, help="game key: 32 hex digits or 16 ASCII characters")
        q.add_argument("--version", default="5.18", help="Pia version (default 5.18)")
        q.add_argument("--allow-nearest-version", action="store_true", help="use the nearest documented version")
        q.add_argument("--broadcast", default=None, metavar="ADDR[:PORT]",
                       help=f"broadcast address (default {DEFAULT_BROADCAST}; port 30000, or 35000 for 6.x); "
                            "its IPv4 also goes into the challenge nonce")  # fmt: skip

    h = lan_sub.add_parser("host", help="answer LAN browse requests for one session")
    common(h)
    h.add_argument("--max", default="4", metavar="N", help="maximum participants (default 4)")
    h.add_argument("--name", default="pianode", help="host player name (default pianode)")
    h.add_argument("--duration", default=None, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    h.add_argument("--address", default="127.0.0.1", help="host IPv4 advertised in the session (default 127.0.0.1)")
    h.add_argument("--port", default="49152", help="host Pia port advertised in the session (default 49152)")
    h.add_argument("--bind", default=None, metavar="ADDR[:PORT]", help="listen address (default 0.0.0.0:30000/35000)")
    h.add_argument("--game-mode", default="0", help="game mode (default 0; 5.x only)")
    h.add_argument("--app-version", default="0", help="application communication version (default 0)")
    h.add_argument("--host-address-size", default="18", help="5.10 only: 18 (KW) or 6 (NintendoClients)")
    h.set_defaults(handler=run_host)

    b = lan_sub.add_parser("browse", help="broadcast a browse request and list the sessions that answer")
    common(b)
    b.add_argument("--timeout", default="1.0", metavar="S", help="seconds to collect replies (default 1)")
    b.add_argument("--format", default="table", help="table (default) or jsonl")
    b.add_argument("--bind", default="127.0.0.1:0", metavar="ADDR[:PORT]", help="browser socket (default 127.0.0.1:0)")
    b.add_argument("--app-version", default=None, help="only sessions with this application communication version")
    b.set_defaults(handler=run_browse)

    p.set_defaults(handler=lambda args: _no_subcommand(p))


def _no_subcommand(p: argparse.ArgumentParser) -> int:
    p.print_help(sys.stderr)
    return 2


def _number(text: str, what: str, *, lo: float = 0, hi: float = 2**32 - 1, integer: bool = True) -> Any:
    try:
        value: float = int(text, 0) if integer else float(text)
    except ValueError:
        raise CliError(f"--{what} must be {'an integer' if integer else 'a number'}, got {text!r}") from None
    if not lo <= value <= hi:
        raise CliError(f"--{what} must be between {lo} and {hi}, got {text}")
    return value


def _profile(args: argparse.Namespace) -> VersionProfile:
    try:
        return profile_for(args.version, allow_nearest=args.allow_nearest_version)
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def _game_key(args: argparse.Namespace) -> bytes:
    try:
        return parse_game_key(args.game_key)
    except ConfigError as exc:
        raise CliError(f"--game-key: {exc}") from None


def _bind_address(text: str) -> tuple[str, int]:
    """ADDR[:PORT] where port 0 (any free port) is allowed."""
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, 0
    port_n = _number(port, "bind", hi=0xFFFF)
    return host, port_n


def _broadcast(args: argparse.Namespace, profile: VersionProfile) -> tuple[str, int]:
    return parse_hostport(args.broadcast or DEFAULT_BROADCAST, browse_port(profile))


def run_host(args: argparse.Namespace) -> int:
    profile = _profile(args)
    key = _game_key(args)
    max_n = _number(args.max, "max", lo=1, hi=0xFFFF)
    port = _number(args.port, "port", lo=1, hi=0xFFFF)
    duration = None if args.duration is None else _number(args.duration, "duration", hi=1e9, integer=False)
    size = _number(args.host_address_size, "host-address-size", lo=6, hi=18)
    if size not in (6, 18):
        raise CliError("--host-address-size must be 6 or 18")
    bind = parse_hostport(args.bind, browse_port(profile)) if args.bind else ("0.0.0.0", browse_port(profile))
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
                profile, ip=args.address, port=port, max_participants=max_n, name=args.name,
                game_mode=_number(args.game_mode, "game-mode"), application_version=app_version,
                host_address_size=size,
            )  # fmt: skip
        host = LanHost(profile, key, info, bind=bind, broadcast_ip=broadcast_ip)
    except (ConfigError, ValueError) as exc:
        raise CliError(str(exc)) from None

    async def main() -> None:
        with trio.move_on_after(duration if duration is not None else float("inf")):
            async with trio.open_nursery() as nursery:
                where = await nursery.start(host.run)
                print(
                    f"hosting network id 0x{info.network_id:08x} (Pia {profile.name}, host {args.address}:{port}, "
                    f"max {max_n}) on {where[0]}:{where[1]}",
                    flush=True,
                )

    trio.run(main)
    s = host.statistics()
    print(f"answered {s.answered} browse requests, dropped {sum(s.dropped.values())} {s.dropped or ''}".rstrip())
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
    rows = [("HOST", "NETWORK ID", "PLAYERS", "MAX", "SYS VER", "APP VER")]
    for f in found:
        rec = session_record(f)
        players = rec.get("current_participants", rec.get("current_stations"))
        maximum = rec.get("max_participants", rec.get("max_stations"))
        rows.append((
            f"{rec['host_address']}:{rec['host_port']}", f"0x{rec['network_id']:08x}", str(players), str(maximum),
            str(rec.get("system_communication_version", "-")), str(rec.get("application_communication_version", "-")),
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")
    out.write(f"{len(found)} session(s) found\n")


def run_browse(args: argparse.Namespace) -> int:
    profile = _profile(args)
    key = _game_key(args)
    timeout = _number(args.timeout, "timeout", hi=3600, integer=False)
    if args.format not in ("table", "jsonl"):
        raise CliError(f"--format must be table or jsonl, got {args.format!r}")
    app_version = None if args.app_version is None else _number(args.app_version, "app-version", hi=255)
    broadcast = _broadcast(args, profile)
    bind = _bind_address(args.bind)
    try:
        client = BrowseClient(profile, key, broadcast_ip=broadcast[0], application_version=app_version)
    except (ConfigError, ValueError) as exc:
        raise CliError(str(exc)) from None

    async def main() -> list[FoundSession]:
        return await browse(profile, key, broadcast=broadcast, bind=bind, timeout=timeout, client=client)

    found = trio.run(main)
    if args.format == "jsonl":
        for f in found:
            sys.stdout.write(json.dumps(session_record(f)) + "\n")
    else:
        _print_table(found, sys.stdout)
    sys.stdout.flush()
    return 0 if found else 1
