"""One remote station as this node knows it: the link state of a :class:`Peer`.

A peer is one remote address.  Everything about the link to it lives here,
in one record per peer: its handshake progress (``state``, ``initiator``,
the connection ids), its identity (constant and variable id, station index
once the mesh table names it), the reliable windows, the RTT estimator and
header timers, the replay filter, the packet id counter, the queue of
messages for its next packet, the station/mesh messages awaiting its ack, and
the per-peer sealer and opener of the codec's fast paths.

Which part changes which field: the station handshake
(:mod:`pianode.mesh.handshake`) the handshake progress and identity; the
membership (:mod:`pianode.mesh.membership`) the station index and the
fragments of join responses and updates; the link registry
(:mod:`pianode.mesh.links`) the timers, liveness and state changes to
CLOSED; the outbox (:mod:`pianode.mesh.outbox`) the queues, packet ids and
sealer; the session's receive path the counters of what was heard and the
opener.
"""

from __future__ import annotations

import enum
import operator
from typing import Any

import attrs

from pianode.mesh.packet_ids import PacketIdCounter
from pianode.mesh.reliable import ReliableWindow
from pianode.mesh.replay import NonceReplayFilter
from pianode.mesh.rtt import HeaderTimers, RttEstimator
from pianode.mesh.wire import JoinResponse, UpdateMesh
from protocols.pia.message import Message
from protocols.pia.packet_fast import StreamOpener, StreamSealer
from protocols.pia.versions import Proto

__all__ = ["Peer", "PeerState", "Pending", "StationStats"]


class PeerState(enum.Enum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


@attrs.frozen
class StationStats:
    """One row of ``node.stations()``."""

    index: int | None
    constant_id: int
    variable_id: int
    address: tuple[str, int]
    is_host: bool
    is_self: bool
    state: str
    rtt: float | None
    rtt_variance: float | None
    packets_sent: int
    packets_received: int
    lost: int


@attrs.define
class Pending:
    """A message carrying an ack id, resent until the peer acks it."""

    proto: Proto
    port: int
    payload: bytes
    next_send: float
    interval: float
    tries: int = 0
    kind: str = ""


def _identity(name: str, doc: str) -> Any:
    """A property over the slot ``_<name>`` whose setter also forgets the peer's stream paths
    (:meth:`Peer.forget_streams`): they were made for the old value.  Read as a slot is read
    (``operator.attrgetter``)."""
    private = "_" + name

    def set_field(peer: Peer, value: object) -> None:
        setattr(peer, private, value)
        peer.inbound = peer.outbound = None

    return property(operator.attrgetter(private), set_field, doc=doc)


@attrs.define(eq=False)
class Peer:
    address: tuple[str, int]
    # (The identity fields are properties, below: setting one forgets the stream paths made for the old value.)
    _own_conn_id: int = attrs.field(alias="own_conn_id")
    initiator: bool
    created: float
    # (What the stream paths read for every frame comes first: it shares the object's first lines.)
    #: ``(what it was made for, seal or None)``: the codec's sealer of this peer's
    #: unreliable packets (see :meth:`pianode.mesh.outbox.Outbox.seal_unreliable`).
    sealer: tuple[tuple[object, ...], StreamSealer | None] | None = None
    #: ``(what it was made for, open or None)``: the codec's opener of this peer's
    #: unreliable packets to us (see :meth:`pianode.mesh.session.MeshSession.receive_datagram`).
    opener: tuple[tuple[object, ...], StreamOpener | None] | None = None
    #: The stream paths of :mod:`pianode.mesh.stream` (its ``Inbound`` and ``Outbound``): made from the
    #: opener and sealer above for this peer's identity, and forgotten whenever an identity field is set.
    inbound: Any = None
    outbound: Any = None
    replay: NonceReplayFilter = attrs.field(factory=NonceReplayFilter)
    last_heard: float = 0.0
    last_sent: float = -1e9
    packets_sent: int = 0
    packets_received: int = 0
    state: PeerState = PeerState.CONNECTING
    _constant_id: int = attrs.field(default=0, alias="constant_id")
    _variable_id: int = attrs.field(default=0, alias="variable_id")
    _peer_conn_id: int = attrs.field(default=0, alias="peer_conn_id")
    _index: int | None = attrs.field(default=None, alias="index")
    announced: bool = False
    got_response: bool = False
    sent_response: bool = False
    tx_ids: PacketIdCounter = attrs.field(factory=PacketIdCounter)
    outbox: list[Message] = attrs.field(factory=list)
    pending: dict[int, Pending] = attrs.field(factory=dict)
    mesh_window: ReliableWindow | None = None
    data_window: ReliableWindow | None = None
    rtt: RttEstimator = attrs.field(factory=RttEstimator)
    header_timers: HeaderTimers = attrs.field(factory=lambda: HeaderTimers(0.0))
    next_keepalive: float = 0.0
    next_rtt: float = 0.0
    #: Join response fragments by (joiner index, update counter, fragment count, fragment index).
    join_fragments: dict[tuple[int, int, int, int], JoinResponse] = attrs.field(factory=dict)
    update_fragments: dict[int, UpdateMesh] = attrs.field(factory=dict)
    held: list[tuple[bytes, bool]] = attrs.field(factory=list)
    held_bytes: int = 0
    #: When this peer's join request was last answered (a re-sent one gets the response alone, rate-limited).
    join_answered: float = -1e9
    #: When this peer's handshake completed (the host tells a connected station without a place
    #: the table only once it had time to send its join request: see ``Membership._heal``).
    connected_at: float = 0.0
    #: The host sent this station, connected but not in the table, the table once (``Membership._heal``).
    told_table: bool = False
    #: A connection request naming a new identity came from this peer's address at this time, and
    #: the old identity was probed (see :meth:`pianode.mesh.handshake.StationHandshake.confirm_restart`).
    restart_seen: float | None = None
    #: The nonces (as the replay filter reads them) of those requests: a replayed one proves nothing.
    restart_nonces: set[int] = attrs.field(factory=set)
    #: Our RTT requests to this peer still unanswered: the time each carried (what a response echoes,
    #: spec §5.6) and when it went out (see :meth:`pianode.mesh.links.Links.ask_rtt`).
    rtt_asked: dict[int, float] = attrs.field(factory=dict)
    #: Time of this peer's live entry in the link registry's timer heap (None: none).
    scheduled: float | None = None
    #: ``state is CONNECTED``, kept as a flag of its own (a property, below).
    _connected: bool = attrs.field(default=False, alias="connected")

    def forget_streams(self) -> None:
        """Drop the stream paths made for this peer's identity (an identity field changed)."""
        self.inbound = self.outbound = None

    own_conn_id = _identity("own_conn_id", "Our connection id on this link.")
    constant_id = _identity("constant_id", "The peer's constant id (spec §5.3).")
    variable_id = _identity("variable_id", "The peer's variable id (spec §5.3).")
    peer_conn_id = _identity("peer_conn_id", "The peer's connection id on this link.")
    index = _identity("index", "The peer's station index, once the mesh table names it.")
    connected = _identity("connected", "``state is CONNECTED``, kept as a flag of its own.")
