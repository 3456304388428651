"""The node's sans-IO parts built on their own, with a host that records what they report.

Each part of :mod:`pianode.mesh` reaches the rest of the session only through
a small host protocol; :class:`RecordingHost` implements all of them and
keeps every call, so a test drives one part and reads what it asked for.
"""

from __future__ import annotations

import random

import attrs

from pianode.mesh import wire
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import Event
from pianode.mesh.handshake import StationHandshake
from pianode.mesh.links import Links
from pianode.mesh.membership import Membership
from pianode.mesh.outbox import Outbox
from pianode.mesh.peer import Peer
from pianode.mesh.stats import Tally
from protocols.pia.versions import Proto

KEY = bytes(range(16))
ADDRESS = ("127.0.0.2", 40000)


@attrs.define
class RecordingHost:
    """Every host protocol of the parts; each call is recorded in ``calls``."""

    calls: list[tuple[object, ...]] = attrs.field(factory=list)
    events: list[Event] = attrs.field(factory=list)
    accepting: bool = True
    parts: Parts | None = None

    # LinkHost, OutboxHost
    def enqueue(self, peer: Peer, proto: Proto, port: int, payload: bytes) -> None:
        self.calls.append(("enqueue", peer.address, proto, port))
        if self.parts is not None:
            self.parts.outbox.enqueue(peer, proto, port, payload)

    def peer_lost(self, peer: Peer, reason: str, now: float) -> None:
        self.calls.append(("peer_lost", peer.address, reason))
        if self.parts is not None and self.parts.membership is not None:
            self.parts.membership.peer_lost(peer, reason, now)

    def rtt_ticks(self, now: float) -> int:
        return int(now * 1_000_000)

    # HandshakeHost
    def accepts_stations(self) -> bool:
        return self.accepting

    def station_connected(self, peer: Peer, now: float) -> None:
        self.calls.append(("connected", peer.address))
        if self.parts is not None and self.parts.membership is not None:
            self.parts.membership.on_connected(peer, now)

    def station_refused(self, peer: Peer, reason: str, now: float) -> None:
        self.calls.append(("refused", peer.address, reason))

    # MembershipHost
    def emit(self, event: Event) -> None:
        self.events.append(event)

    def deliver(self, peer: Peer, data: bytes, *, reliable: bool) -> None:
        self.calls.append(("deliver", peer.address, data, reliable))

    def names(self) -> list[object]:
        return [c[0] for c in self.calls]


@attrs.define
class Parts:
    config: NodeConfig
    local: wire.Location
    tally: Tally
    host: RecordingHost
    links: Links
    outbox: Outbox
    handshake: StationHandshake
    membership: Membership | None


def build(version: str = "5.29", *, address: tuple[str, int] = ADDRESS, membership: bool = True, **settings: object) -> Parts:
    """The parts of one session at *address*, wired as the session wires them, with a codec for the key."""
    config = NodeConfig(version=version, session_key=KEY, bind=address, seed=7, **settings)  # type: ignore[arg-type]
    rng = random.Random(7)
    local = wire.local_identity(config, address, rng)
    tally = Tally()
    host = RecordingHost()
    links = Links(config, rng, 0.0, tally, host)
    source_id = local.constant_id if config.profile.message_format in wire.SOURCE_ID_FORMATS else None
    outbox = Outbox(config, address, local.variable_id, source_id, rng, links, tally, host)
    outbox.codec, _ = wire.packet_codec(config, config.profile, KEY, 1)
    handshake = StationHandshake(config, local, links, outbox, tally, host)
    handshake.use_network(1)
    parts = Parts(config, local, tally, host, links, outbox, handshake, None)
    if membership:
        parts.membership = Membership(config, local, links, outbox, handshake, tally, host)
    host.parts = parts
    return parts


def decoded(parts: Parts, datagrams: list[tuple[bytes, tuple[str, int]]]) -> list[tuple[tuple[str, int], int, int, bytes]]:
    """(address, protocol type, port, payload) of every message in *datagrams*, in order."""
    codec = parts.outbox.codec
    assert codec is not None
    out = []
    for data, addr in datagrams:
        for m in codec.decode(data, parts.local.address[0]).messages:
            out.append((addr, m.protocol_type, m.protocol_port, m.payload))
    return out
