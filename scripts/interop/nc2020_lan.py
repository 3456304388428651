"""Run NintendoClients at e8f85f5 (2020, "NC-2020") as a Pia 5.x LAN joiner or host, for pianode's interop tests.

Runs under its own Python 3.11 virtualenv with ``pycryptodome`` and
``netifaces``, with ``PYTHONPATH`` pointing at the unmodified NC-2020 tree
(``../shared/peers/nintendoclients-e8f85f5``); it never imports pianode.  The
tests run it inside a network namespace of their own.

Everything below changes NC-2020 in memory only; no file of it is edited.

Pinned lookups and binds
    ``nintendo.common.util.local_address`` / ``broadcast_address`` (normally
    the default-gateway interface, through netifaces) return ``--address`` and
    ``--broadcast``; a socket NC binds to ``""`` (its Pia socket, its browse
    socket) is bound to ``--address`` instead.

Defects of this NC-2020 commit worked around (see the README's interop section)
    * ``Mesh.get_num_participants`` and ``LANSession.update_session_info``
      iterate the empty (None) slots of the 32-slot station table: the host
      crashes on creating its session.  Both see only the occupied slots here.
    * ``nintendo/pia/message.py`` logs through ``logger`` without defining it:
      a name error on its error paths.  The module gets its logger.
    * It adopts the connection ids negotiated in the handshake only for the
      host, and only after parsing the join response: it drops the join
      response itself when the host sends it with its own connection id, as the
      real 3DS host does (captures/mgba-uds-frames, frame "join 8"), stamps
      every packet to another member with connection id 0, and drops every
      packet of theirs that carries their id ("unexpected connection id").
      Here a station's id is accepted once its handshake completes, and both
      ids are used once it is connected and NC has joined.
    * A Pia packet that reaches its socket before it has a session key (before
      it joins: e.g. from a mesh it was in a moment ago at the same address,
      whose stations keep sending to the old identity until it times out) makes
      ``PIAPacket.decrypt`` raise (``AES.new`` with a ``None`` key), and its
      scheduler then kills the socket's receive event for good: NC never hears
      anything again.  Here such a packet is dropped and counted
      (``dropped_before_key`` in the summary), as NC's own checks drop a packet
      they cannot read.
    * Version-specific paths NC-2020 never ran (it targeted 5.18): its 5.11-5.17
      write and accept header version 4 where the docs give 3 (spec §0.3, §10.1
      item 1), set to 3 here; its 5.9/5.10 timer path reads an undefined
      ``session_timer``, fixed here; up to 5.9 it reads a StationLocation's one
      address into ``public`` but connects to ``local``, copied here; and it
      writes that address from ``public``, which it never fills for itself
      (its 5.9 host publishes 0.0.0.0:0), so ``local`` is written there.
    * It reads a connection response's PlayerInfo array as four slots only, where
      the docs give 2 or 4 (spec §5.3), and a node whose MTU cannot carry four
      sends fewer: such a response is padded here to four zero-filled slots
      (counted as ``short_player_arrays`` in the summary).
    * It has no Keep Alive and no RTT protocol: this harness sends an empty
      keep-alive (protocol 0x08, port 0) every second to each connected
      station and answers RTT requests (protocol 0x58) on their port.

Output: one JSON object per line on stdout (``event`` names what happened):
``found`` (a session answered the browse and its challenge verified),
``connection_request`` / ``connection_response`` (station messages received),
``connected`` (a station handshake completed, with who started it),
``join_response`` (a fragment parsed), ``joined`` / ``join_failed``,
``data`` (the first unreliable message from each station; the summary counts
them all by station and by payload size), ``join_request``
(host mode: a join request arrived), ``nc_log`` (the first of each distinct
warning NC logged), and last ``summary``.

Usage:
    python nc2020_lan.py join --address 10.0.0.3 --broadcast 10.0.0.255 --game-key HEX [--duration 12]
    python nc2020_lan.py host --address 10.0.0.2 --broadcast 10.0.0.255 --game-key HEX [--duration 30]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import struct
import sys
import threading
import time
from typing import Any

KEEP_ALIVE_PROTOCOL = 0x08  # spec §5.1, protocol type revision 1 (5.9+)
RTT_PROTOCOL = 0x58
UNRELIABLE_PROTOCOL = 0x68
PLAYER_INFO_SIZE = 0xC3  # 5.7+ (spec §5.2)

_lock = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    with _lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


class _FirstOfEachWarning(logging.Handler):
    """NC's warnings and errors: the first of each distinct text printed, all counted."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        self.counts[text] += 1
        if self.counts[text] == 1:
            emit({"event": "nc_log", "level": record.levelname, "logger": record.name, "message": text})


def pin_lookups(address: str, broadcast: str) -> None:
    """NC's own-address and broadcast lookups, and its wildcard binds, pinned to the namespace's addresses."""
    from nintendo.common import socket as nc_socket
    from nintendo.common import util

    util.local_address = lambda: address
    util.broadcast_address = lambda: broadcast
    original_bind = nc_socket.SocketWrapper.bind

    def bind(self: Any, host: str, port: int) -> None:
        original_bind(self, host or address, port)

    nc_socket.SocketWrapper.bind = bind


#: Pia packets NC received before it had a session key, dropped (see the module docstring).
dropped_before_key = 0


def work_around_defects() -> None:
    """The defects of this commit listed in the module docstring, fixed in memory."""
    from nintendo.pia import mesh, message, packet, session, types

    message.logger = logging.getLogger("nintendo.pia.message")
    original_handle_recv = packet.PacketTransport.handle_recv

    def handle_recv(self: Any, pair: Any) -> None:
        global dropped_before_key
        if self.session.get_session_key() is None:
            dropped_before_key += 1
            return
        original_handle_recv(self, pair)

    packet.PacketTransport.handle_recv = handle_recv
    def send(self: Any, station: Any, pia_packet: Any) -> None:
        # PacketTransport.send as NC has it, but for the header-version-0 path (5.9, 5.10), which reads
        # an undefined ``session_timer`` (meaning ``session_time``) once a station's timer is known.
        if self.settings.get("pia.header_version") == 0:
            session_time = self.get_session_time()
            pia_packet.session_timer = session_time & 0xFFFF
            if station.rtt_timer is not None:
                pia_packet.rtt_timer = (station.rtt_timer + session_time - station.base_timer) & 0xFFFF
            else:
                pia_packet.rtt_timer = 0
        pia_packet.connection_id = station.connection_id_out
        pia_packet.sequence_id = station.next_sequence_id()
        self.nonce = (self.nonce + 1) & 0xFFFFFFFFFFFFFFFF
        pia_packet.nonce = self.nonce
        pia_packet.address = self.local_address()
        self.socket.send(pia_packet.encode(), station.address)

    packet.PacketTransport.send = send
    original_location_decode = types.StationLocation.decode

    def location_decode(self: Any, stream: Any) -> None:
        # Up to 5.9 a StationLocation carries one address (spec §5.2), which NC reads into
        # ``public``; but it connects to, and finds stations by, ``local``, left empty there.
        original_location_decode(self, stream)
        if stream.settings.get("pia.version") < 51000:
            self.local = self.public

    types.StationLocation.decode = location_decode
    original_location_encode = types.StationLocation.encode

    def location_encode(self: Any, stream: Any) -> None:
        # The other half of the same defect: up to 5.9 it writes that one address from ``public``, which
        # it never fills for itself (its own address is in ``local``), so its 5.9 host publishes its
        # session, and its connection requests, with the address 0.0.0.0:0.
        if stream.settings.get("pia.version") < 51000 and self.public.address.port == 0:
            public, self.public = self.public, self.local
            try:
                original_location_encode(self, stream)
            finally:
                self.public = public
            return
        original_location_encode(self, stream)

    types.StationLocation.encode = location_encode

    def get_num_participants(self: Any) -> int:
        return sum(s.identification_info.participants for s in self.stations if s is not None)

    mesh.Mesh.get_num_participants = get_num_participants
    original_update = session.LANSession.update_session_info

    def update_session_info(self: Any) -> None:
        slots = self.mesh.stations
        self.mesh.stations = [s for s in slots if s is not None]
        try:
            original_update(self)
        finally:
            self.mesh.stations = slots

    session.LANSession.update_session_info = update_session_info


def accept_connection_id(station: Any) -> None:
    """Once the handshake is done, accept the peer's own connection id (NC accepts it only after the join)."""
    station.connection_id_in = station.connection_id_in_temp


def adopt_connection_ids(station: Any) -> None:
    """A connected station that is in the mesh: use the ids its handshake negotiated (NC does so for the host only)."""
    station.connection_id_in = station.connection_id_in_temp
    station.connection_id_out = station.connection_id_out_temp


class _Observer:
    """Wraps NC's protocol handlers to report what happened, and runs the protocols NC lacks."""

    def __init__(self, nc: Any, interval: float) -> None:
        from nintendo.pia.stations import ConnectionState

        self.nc = nc
        self.interval = interval
        self.connected_state = ConnectionState.CONNECTED
        self.initiator: dict[int, str] = {}
        self.reported: set[int] = set()
        self.received: collections.Counter[int] = collections.Counter()
        self.received_sizes: collections.Counter[int] = collections.Counter()  # payload length: messages
        self.first_heard: dict[int, float] = {}
        self.last_heard: dict[int, float] = {}
        self.sent: collections.Counter[int] = collections.Counter()
        self.rtt_answered = 0
        self.keep_alives_sent = 0
        self.join_requests = 0
        self.short_player_arrays = 0  # connection responses with fewer than 4 PlayerInfo slots (see four_player_slots)
        self.sending = False
        self.joined = False
        self.number = 0
        #: Payload sizes the unreliable messages cycle through (message N has sizes[N % len]); empty: the bare text.
        self.sizes: list[int] = []

    # ------------------------------------------------------------------ hooks
    def install(self) -> None:
        from nintendo.common import scheduler

        nc = self.nc
        station_protocol = nc.station_protocol
        mesh_protocol = nc.mesh_protocol
        on_request = station_protocol.handle_connection_request
        on_response = station_protocol.handle_connection_response
        on_join_response = mesh_protocol.handle_join_response
        on_join_request = mesh_protocol.handle_join_request
        connect = station_protocol.connect

        def handle_connection_request(station: Any, data: bytes) -> None:
            inverse = len(data) > 3 and data[3] != 0
            emit({"event": "connection_request", "from": _where(station), "inverse": inverse})
            if not inverse:
                self.initiator.setdefault(id(station), "peer")
            on_request(station, data)

        def handle_connection_response(station: Any, data: bytes) -> None:
            result = data[1] if len(data) > 1 else None
            data = self.four_player_slots(data)
            on_response(station, data)
            if station.connection_state == self.connected_state:
                accept_connection_id(station)
                if self.joined and station.index != 0xFD:
                    adopt_connection_ids(station)
            players = []
            info = station.identification_info
            if info is not None and result == 0:
                players = [p.name.split("\0")[0] for p in info.players]
            emit({"event": "connection_response", "from": _where(station), "result": result, "players": players,
                  "state": station.connection_state})  # fmt: skip

        def handle_join_response(station: Any, data: bytes) -> None:
            # Taken before NC handles it: NC's join() on the main thread resets the parser as soon as
            # this fragment completes it, which may be before the lines below run on the scheduler's.
            parser = mesh_protocol.join_response_parser
            on_join_response(station, data)
            record: dict[str, Any] = {"event": "join_response", "from": _where(station), "size": len(data)}
            if len(data) > 1 and data[1] == 0:
                record["denied"] = data[4] if len(data) > 4 else None
            if parser is not None and parser.num_stations is not None:
                record.update(
                    stations=parser.num_stations, host_index=parser.host_index, join_index=parser.join_index,
                    fragments=parser.num_fragments, fragment_index=data[5] if len(data) > 5 else None,
                    received=sum(parser.fragments), error=parser.error,
                )  # fmt: skip
            emit(record)

        def handle_join_request(station: Any, data: bytes) -> None:
            self.join_requests += 1
            emit({"event": "join_request", "from": _where(station), "size": len(data)})
            on_join_request(station, data)

        def connect_station(station: Any) -> None:
            self.initiator.setdefault(id(station), "nc")
            connect(station)

        station_protocol.handlers[station_protocol.MESSAGE_CONNECTION_REQUEST] = handle_connection_request
        station_protocol.handlers[station_protocol.MESSAGE_CONNECTION_RESPONSE] = handle_connection_response
        mesh_protocol.handlers[mesh_protocol.MESSAGE_JOIN_RESPONSE] = handle_join_response
        mesh_protocol.handlers[mesh_protocol.MESSAGE_JOIN_REQUEST] = handle_join_request
        station_protocol.connect = connect_station
        nc.unreliable_protocol.handle = self.on_data
        nc.register_protocol(_Protocol(KEEP_ALIVE_PROTOCOL, lambda station, message: None))
        nc.register_protocol(_Protocol(RTT_PROTOCOL, self.on_rtt))
        # Everything below runs on NC's scheduler thread, like NC's own handlers.
        scheduler.add_timeout(self.watch, 0.05, True)
        scheduler.add_timeout(self.keep_alive, 1.0, True)
        scheduler.add_timeout(self.send_data, self.interval, True)

    def four_player_slots(self, data: bytes) -> bytes:
        """An accepting 5.7-5.18 connection response with 2 or 1 PlayerInfo slots, padded to the 4 NC reads."""
        fixed = 0x38  # type, result, version, platform, fragment id, target ids, token, network id, 3 counts
        if self.nc.station_protocol.version < 8 or len(data) < fixed + 4 or data[1] != 0:
            return data
        slots, rest = divmod(len(data) - fixed - 4, PLAYER_INFO_SIZE)
        if rest or not 1 <= slots < 4:
            return data
        self.short_player_arrays += 1
        return data[:-4] + bytes(PLAYER_INFO_SIZE * (4 - slots)) + data[-4:]

    # ------------------------------------------------------------ protocols
    def on_data(self, station: Any, message: Any) -> None:
        index = station.index
        self.received[index] += 1
        self.received_sizes[len(message.payload)] += 1
        now = time.monotonic()
        self.first_heard.setdefault(index, now)
        self.last_heard[index] = now
        if self.received[index] == 1:
            emit({"event": "data", "from_index": index, "from": _where(station), "size": len(message.payload),
                  "text": bytes(message.payload).decode("utf-8", "replace")[:80]})  # fmt: skip

    def on_rtt(self, station: Any, message: Any) -> None:
        payload = bytes(message.payload)
        if len(payload) == 16 and struct.unpack_from(">I", payload)[0] == 0:
            reply = struct.pack(">II", 1, 0) + payload[8:16]
            self._send(station, RTT_PROTOCOL, message.protocol_port, reply)
            self.rtt_answered += 1

    def keep_alive(self) -> None:
        for station in self._connected():
            self._send(station, KEEP_ALIVE_PROTOCOL, 0, b"")
            self.keep_alives_sent += 1

    def send_data(self) -> None:
        if not self.sending:
            return
        for station in self.nc.mesh.get_stations():
            if station is self.nc.local_station() or not station.is_connected():
                continue
            text = f"nc2020 #{self.number} to station {station.index}".encode()
            if self.sizes:
                size = self.sizes[self.number % len(self.sizes)]
                text = (text + b"." * size)[:size]
            self._send(station, UNRELIABLE_PROTOCOL, 0, text)
            self.sent[station.index] += 1
        self.number += 1

    def watch(self) -> None:
        """Report each station once its handshake completes; adopt its ids once it is a mesh member."""
        for station in self._connected():
            if self.joined and station.index != 0xFD:
                adopt_connection_ids(station)
            if id(station) in self.reported:
                continue
            self.reported.add(id(station))
            emit({"event": "connected", "address": _where(station), "index": _index(station),
                  "initiator": self.initiator.get(id(station), "unknown"), "station_id": station.id})  # fmt: skip

    # ------------------------------------------------------------------ helpers
    def _connected(self) -> list[Any]:
        me = self.nc.local_station()
        return [s for s in self.nc.stations if s is not me and s.connection_state == self.connected_state]

    def _send(self, station: Any, protocol: int, port: int, payload: bytes) -> None:
        from nintendo.pia.message import PIAMessage

        message = PIAMessage()
        message.protocol_id = protocol
        message.protocol_port = port
        message.payload = payload
        self.nc.transport.send(station, message)


class _Protocol:
    """A protocol NC lacks, registered on its session (NC dispatches on ``get_protocol_type``)."""

    def __init__(self, protocol_type: int, handler: Any) -> None:
        self._type = protocol_type
        self.handle = handler

    def get_protocol_type(self) -> int:
        return self._type


def _where(station: Any) -> str | None:
    return None if station.address is None else f"{station.address[0]}:{station.address[1]}"


def _index(station: Any) -> int | None:
    return None if station.index == 0xFD else station.index


def _identification(name: str) -> Any:
    from nintendo.pia.types import IdentificationInfo, PlayerInfo

    player = PlayerInfo()
    player.name = name
    player.nickname = name
    info = IdentificationInfo()
    info.token = "nc2020"
    info.players = [player]
    return info


def _version_number(text: str) -> int:
    major, minor = (int(x) for x in text.split(".")[:2])
    return major * 10000 + minor * 100


def _session(args: argparse.Namespace) -> Any:
    from nintendo.pia.session import LANSession
    from nintendo.settings import Settings

    nc = LANSession(Settings("switch.cfg"), bytes.fromhex(args.game_key))
    version = _version_number(args.version)
    nc.configure(version, args.app_version)
    if 51100 <= version < 51800:
        # NC writes and accepts header version 4 for every version from 5.11; 5.11-5.17 send 3
        # (spec §0.3, §10.1 item 1): NC-2020 targeted 5.18 only.
        nc.settings.set("pia.header_version", 3)
    nc.prepare(_identification(args.name))
    return nc


def _summary(nc: Any, observer: _Observer, log: _FirstOfEachWarning, **extra: Any) -> None:
    me = nc.local_station()
    stations = []
    for s in nc.stations:
        if s is me:
            continue
        stations.append({"address": _where(s), "index": _index(s), "connected": s.is_connected(),
                         "initiator": observer.initiator.get(id(s), "unknown")})  # fmt: skip
    emit({
        "event": "summary", "address": _where(me), "index": _index(me), "host_index": nc.mesh.get_host_index(),
        "stations": stations, "received": {str(k): v for k, v in sorted(observer.received.items())},
        "received_for_s": {str(k): round(observer.last_heard[k] - observer.first_heard[k], 2)
                           for k in sorted(observer.received)},
        "sent": {str(k): v for k, v in sorted(observer.sent.items())}, "rtt_answered": observer.rtt_answered,
        "keep_alives_sent": observer.keep_alives_sent, "join_requests": observer.join_requests,
        "short_player_arrays": observer.short_player_arrays,
        "dropped_before_key": dropped_before_key,
        "received_sizes": {str(k): v for k, v in sorted(observer.received_sizes.items())},
        "warnings": dict(log.counts), **extra,
    })  # fmt: skip


def run_join(args: argparse.Namespace, log: _FirstOfEachWarning) -> int:
    from nintendo.pia import lan
    from nintendo.settings import Settings

    nc = _session(args)
    observer = _Observer(nc, args.interval)
    observer.sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    observer.install()
    emit({"event": "ready", "address": _where(nc.local_station()), "station_id": nc.local_station().id})
    browser = lan.LANBrowser(Settings("switch.cfg"), bytes.fromhex(args.game_key))
    browser.configure(_version_number(args.version))
    deadline = time.monotonic() + args.browse_timeout
    found = None
    while found is None and time.monotonic() < deadline:
        for info in browser.browse(lan.LanSessionSearchCriteria(), timeout=0.5):
            if args.network_id is None or info.session_id == args.network_id:
                found = info
                break
    if found is None:
        emit({"event": "join_failed", "reason": f"no session found in {args.browse_timeout} s"})
        _summary(nc, observer, log)
        return 1
    host = found.host_location
    emit({"event": "found", "network_id": found.session_id, "host": f"{host.local.address.host}:{host.local.address.port}",
          "host_constant_id": host.pid, "host_variable_id": host.cid, "participants": found.num_participants,
          "stations": [{"role": p.role, "username": p.username, "constant_id": p.id} for p in found.players if p.role]})  # fmt: skip
    try:
        nc.join(found)
    except RuntimeError as exc:
        emit({"event": "join_failed", "reason": str(exc)})
        _summary(nc, observer, log)
        return 1
    observer.joined = True
    emit({"event": "joined", "index": _index(nc.local_station()), "host_index": nc.mesh.get_host_index(),
          "stations": [{"index": s.index, "address": _where(s), "connected": s.is_connected()}
                       for s in nc.mesh.get_stations()]})  # fmt: skip
    observer.sending = True
    time.sleep(args.duration)
    observer.sending = False
    _summary(nc, observer, log)
    return 0


def run_host(args: argparse.Namespace, log: _FirstOfEachWarning) -> int:
    from nintendo.pia.session import SessionSettings

    nc = _session(args)
    observer = _Observer(nc, args.interval)
    observer.install()
    settings = SessionSettings()
    settings.game_mode = args.game_mode
    settings.session_type = args.session_type
    settings.max_participants = args.max
    nc.create(settings)
    info = nc.get_session_info()
    emit({"event": "ready", "address": _where(nc.local_station()), "network_id": info.session_id,
          "station_id": nc.local_station().id, "host_constant_id": info.host_location.pid,
          "host_variable_id": info.host_location.cid})  # fmt: skip
    time.sleep(args.duration)
    _summary(nc, observer, log, network_id=info.session_id)
    return 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["join", "host"])
    p.add_argument("--address", required=True, help="this namespace's address: NC's own address and its binds")
    p.add_argument("--broadcast", required=True, help="this namespace's broadcast address")
    p.add_argument("--game-key", required=True, help="16-byte game key as hex")
    p.add_argument("--version", default="5.18", help="Pia version (NC-2020 speaks 5.x up to 5.18)")
    p.add_argument("--app-version", type=int, default=3, help="application communication version")
    p.add_argument("--name", default="nc2020")
    p.add_argument("--duration", type=float, default=12.0, help="join: seconds of data after joining; host: run time")
    p.add_argument("--interval", type=float, default=0.2, help="seconds between unreliable messages to each member")
    p.add_argument("--sizes", default="", help="join: payload sizes (comma-separated) the messages cycle through; "
                   "each is its text cut or padded with dots to that size (0: empty)")
    p.add_argument("--browse-timeout", type=float, default=10.0)
    p.add_argument("--network-id", type=int, default=None)
    p.add_argument("--game-mode", type=int, default=0)
    p.add_argument("--session-type", type=int, default=0)
    p.add_argument("--max", type=int, default=8)
    args = p.parse_args()
    log = _FirstOfEachWarning()
    logging.getLogger().addHandler(log)
    logging.getLogger().setLevel(logging.INFO)
    pin_lookups(args.address, args.broadcast)
    work_around_defects()
    status = run_join(args, log) if args.mode == "join" else run_host(args, log)
    sys.stdout.flush()
    os._exit(status)  # NC's scheduler thread never ends on its own


if __name__ == "__main__":
    main()
