"""Run nintendoclients 0.0.3's LAN browser or host, pinned to loopback, for pianode's interop tests.

Runs inside a separate virtualenv that has ``nintendoclients==0.0.3`` (and
its anyio/anynet) installed; it never imports pianode.  Before calling the
library it replaces, in memory only, the two system lookups the library makes:

* the local address it binds its browse socket to (normally the address of the
  default-gateway interface) becomes ``--address`` (a 127.0.0.0/8 address);
* the broadcast address it sends to and puts into the challenge nonce
  (normally the default-gateway interface's broadcast) becomes ``--broadcast``
  (127.255.255.255 by default).

Its UDP bind is wrapped too: sockets get SO_REUSEPORT so a host can share the
browse port with other hosts on the machine, datagrams from outside
127.0.0.0/8 are ignored, and sends to anything outside 127.0.0.0/8 raise.  No
file of the library is changed.

Output: one JSON object per line on stdout.  ``host`` prints ``{"ready": ...}``
once it serves, then runs for ``--duration`` seconds.  ``browse`` prints
``{"sessions": [...]}`` with each session's fields in the normalized form the
tests compare (see ``session_fields``).

Usage:
    python nc_lan.py host --version 5.18 --game-key HEX --address 127.0.0.31 [session options]
    python nc_lan.py browse --version 5.18 --game-key HEX --address 127.0.0.32 [--timeout 1] [--criteria JSON]
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import secrets
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc

LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.IPv4Address(host) in LOOPBACK
    except ValueError:
        return False


class _LoopbackOnly:
    """Wraps anynet's UDP socket: drops foreign senders, refuses foreign destinations."""

    def __init__(self, inner: Any, port_map: dict[int, int]) -> None:
        self._inner = inner
        self._port_map = port_map

    async def send(self, data: bytes, addr: tuple[str, int]) -> None:
        host, port = addr
        if not _is_loopback(host):
            raise RuntimeError(f"interop harness refuses to send to {host} (outside 127.0.0.0/8)")
        await self._inner.send(data, (host, self._port_map.get(port, port)))

    async def recv(self) -> tuple[bytes, tuple[str, int]]:
        while True:
            data, addr = await self._inner.recv()
            if _is_loopback(addr[0]):
                return data, addr

    async def close(self) -> None:
        await self._inner.close()

    def local_address(self) -> Any:
        return self._inner.local_address()


def pin_to_loopback(address: str, broadcast: str, browse_port: int) -> None:
    """Replace the library's address lookups and wrap its UDP bind (in memory only)."""
    import socket

    from anynet import udp, util

    if not (_is_loopback(address) and _is_loopback(broadcast)):
        raise SystemExit("--address and --broadcast must be in 127.0.0.0/8")
    util.local_address = lambda: address
    util.broadcast_address = lambda: broadcast
    port_map = {30000: browse_port} if browse_port != 30000 else {}

    @contextlib.asynccontextmanager
    async def bind(host: str = "", port: int = 0, *, broadcast: bool = False) -> AsyncIterator[_LoopbackOnly]:
        host = host or address
        port = port_map.get(port, port)
        sock = await anyio.create_udp_socket(local_host=host, local_port=port, reuse_port=True)
        async with sock:
            raw = sock.extra(anyio.abc.SocketAttribute.raw_socket)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            yield _LoopbackOnly(udp.UDPSocket(sock), port_map)

    udp.bind = bind


def _settings(version: str, app_version: int) -> Any:
    from nintendo.pia import settings

    major, minor = (int(x) for x in version.split(".")[:2])
    return settings.default(major * 10000 + minor * 100, app_version)


def session_fields(info: Any, version: tuple[int, int]) -> dict[str, Any]:
    """The library's LanSessionInfo as the plain dict the interop tests compare."""
    loc = info.host_location
    if version <= (5, 9):
        addr = loc.public.inet
    else:
        addr = loc.local.inet
    stations = getattr(info, "players", None) or info.stations
    return {
        "game_mode": info.game_mode,
        "network_id": info.session_id,
        "attributes": list(info.attributes),
        "current_participants": info.num_participants,
        "min_participants": info.min_participants,
        "max_participants": info.max_participants,
        "system_communication_version": info.system_version,
        "application_communication_version": info.application_version,
        "session_type": info.session_type,
        "application_data": bytes(info.application_data).hex(),
        "is_opened": bool(info.is_opened),
        "host_ip": addr.host,
        "host_port": addr.port,
        "host_constant_id": loc.pid,
        "host_variable_id": loc.cid,
        "host_service_variable_id": loc.rvcid,
        "stations": [
            {"role": s.role, "username": s.username, "constant_id": s.id} for s in stations if s.role != 0
        ],
        "session_key_param": bytes(info.session_param).hex() if version >= (5, 9) else None,
    }


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _make_session(args: argparse.Namespace, version: tuple[int, int]) -> Any:
    from nintendo.pia import lan, types

    info = lan.LanSessionInfo()
    info.game_mode = args.game_mode
    info.session_id = args.network_id
    info.attributes = [int(a) for a in args.attributes.split(",")]
    info.num_participants = 1
    info.min_participants = 1
    info.max_participants = args.max
    info.system_version = args.system_version
    info.application_version = args.app_version
    info.session_type = args.session_type
    info.application_data = bytes.fromhex(args.app_data)
    info.is_opened = True
    ip = int(ipaddress.IPv4Address(args.address))
    constant_id = (ip << 32) | args.pia_port
    service_id = ((ip & 0xFFFF) << 16) | args.pia_port
    loc = types.StationLocation()
    station_address = types.StationAddress(args.address, args.pia_port)
    if version <= (5, 9):
        loc.public = station_address
    else:
        loc.local = station_address
    loc.pid = constant_id
    loc.cid = args.variable_id
    loc.rvcid = service_id
    info.host_location = loc
    info.stations[0].role = lan.LanStationInfo.HOST
    info.stations[0].username = args.name
    info.stations[0].id = constant_id
    info.session_param = bytes.fromhex(args.session_param) if args.session_param else secrets.token_bytes(32)
    return info


async def run_host(args: argparse.Namespace) -> None:
    from nintendo.pia import lan

    version = tuple(int(x) for x in args.version.split(".")[:2])
    settings = _settings(args.version, args.app_version)
    info = _make_session(args, version)  # type: ignore[arg-type]
    key = bytes.fromhex(args.game_key)
    async with lan.serve(settings, lambda: [info], key):
        _emit({"ready": True, "session": session_fields(info, version)})  # type: ignore[arg-type]
        await anyio.sleep(args.duration)


def _criteria(lan: Any, given: dict[str, Any]) -> Any:
    """The library's LanSessionSearchCriteria from ``--criteria`` (JSON): ``min_participants`` /
    ``max_participants`` ``[min, max]``, ``opened_only``, ``vacant_only``, ``game_mode``,
    ``session_type``, ``result_range`` ``[offset, size]``, and ``attributes`` ``{"i": [values]}`` (a
    value list) or ``{"i": {"min": a, "max": b}}`` (a range)."""
    from nintendo.pia import types

    criteria = lan.LanSessionSearchCriteria()
    for name in ("min_participants", "max_participants"):
        if name in given:
            setattr(criteria, name, types.Range(*given[name]))
    for name in ("opened_only", "vacant_only", "game_mode", "session_type"):
        if name in given:
            setattr(criteria, name, given[name])
    if "result_range" in given:
        criteria.result_range = types.ResultRange(*given["result_range"])
    for index, value in given.get("attributes", {}).items():
        criteria.attributes[int(index)] = types.Range(value["min"], value["max"]) if isinstance(value, dict) else value
    return criteria


async def run_browse(args: argparse.Namespace) -> None:
    from nintendo.pia import lan

    version = tuple(int(x) for x in args.version.split(".")[:2])
    settings = _settings(args.version, args.app_version)
    criteria = _criteria(lan, json.loads(args.criteria))
    key = bytes.fromhex(args.game_key)
    sessions = await lan.browse(settings, criteria, key, timeout=args.timeout)
    _emit({"sessions": [session_fields(s, version) for s in sessions]})  # type: ignore[arg-type]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["host", "browse"])
    p.add_argument("--version", required=True, help="Pia version, e.g. 5.18")
    p.add_argument("--game-key", required=True, help="16-byte game key as hex")
    p.add_argument("--address", required=True, help="this process's loopback address")
    p.add_argument("--broadcast", default="127.255.255.255")
    p.add_argument("--browse-port", type=int, default=30000, help="remap the library's fixed port 30000")
    p.add_argument("--app-version", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1.0)
    p.add_argument("--criteria", default="{}", help="browse: search criteria as JSON (see _criteria)")
    p.add_argument("--duration", type=float, default=20.0)
    # host session
    p.add_argument("--pia-port", type=int, default=49152)
    p.add_argument("--network-id", type=int, default=0x1234)
    p.add_argument("--variable-id", type=int, default=0xABCDEF)
    p.add_argument("--game-mode", type=int, default=1)
    p.add_argument("--session-type", type=int, default=1)
    p.add_argument("--attributes", default="0,1,2,3,4,5")
    p.add_argument("--max", type=int, default=4)
    p.add_argument("--system-version", type=int, default=0)
    p.add_argument("--app-data", default="")
    p.add_argument("--name", default="nc-host")
    p.add_argument("--session-param", default="", help="32 bytes hex; random when empty")
    args = p.parse_args()
    pin_to_loopback(args.address, args.broadcast, args.browse_port)
    anyio.run(run_host if args.mode == "host" else run_browse, args)


if __name__ == "__main__":
    main()
