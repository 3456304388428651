"""LDN session management with the Local protocol: the host's update-session announcer (spec §5.10).

Theory of operation: in an LDN network (Pia 5.x) the host keeps every
station's view of the session in step with *update session* messages.  It
sends one whenever a station joins or leaves or participation is toggled;
each carries a sequence id (random start, +1 per change), a network id of its
own (a random value, *not* the application data's), the host's identities
and eight node slots: each station's address with its host-migration ranking
(0 = the oldest station; rankings are recomputed only on joins, so a leave
leaves a gap; unused slots have ranking 255 and a zero address).  The host
resends the current message every 100 ms to each station that has not yet
answered with an *update session ack* carrying the same sequence id.

:class:`UpdateSessionAnnouncer` is that host logic as a pure state machine:
:meth:`~UpdateSessionAnnouncer.set_members` with the mesh's current stations
and ``now``, :meth:`~UpdateSessionAnnouncer.due` for the payloads to send,
:meth:`~UpdateSessionAnnouncer.receive` for a station's reply.
:func:`answer_update_session` is the station side.  Payload bytes come from
:mod:`protocols.pia.local`.  The node carries them once it can send and
deliver Local protocol messages (Proto.LOCAL, port 0); see the project report.
"""

from __future__ import annotations

import random

import attrs

from protocols.errors import BadValue
from protocols.pia.local import (
    LOCAL_NODE_SLOTS,
    LocalNode,
    UpdateSession,
    UpdateSessionAck,
    decode_local_message,
)
from protocols.pia.types import InetAddress, StationAddress
from protocols.pia.versions import VersionProfile

__all__ = ["RESEND_INTERVAL", "HostIdentity", "UpdateSessionAnnouncer", "answer_update_session"]

RESEND_INTERVAL = 0.1  # spec §5.10: resent every 100 ms until every station acked

Address = tuple[str, int]


@attrs.frozen
class HostIdentity:
    variable_id: int
    service_variable_id: int
    constant_id: int


class UpdateSessionAnnouncer:
    """The host's update-session state (spec §5.10); pure, time passed in."""

    def __init__(self, profile: VersionProfile, host: HostIdentity, *, rng: random.Random) -> None:
        self.profile = profile
        self.host = host
        self.sequence_id = rng.getrandbits(32)
        self.network_id = rng.getrandbits(32)  # the Local protocol's own network id (§5.10)
        self.allow_participation = True
        self._order: list[Address] = []  # current members, oldest first
        self._ranking: dict[Address, int] = {}
        self._unacked: set[Address] = set()
        self._next_send: float | None = None
        self._payload = b""
        self.sent = 0

    @property
    def members(self) -> tuple[Address, ...]:
        return tuple(self._order)

    def ranking(self, address: Address) -> int | None:
        return self._ranking.get(address)

    def set_members(self, addresses: list[Address], now: float, *, allow_participation: bool | None = None) -> bool:
        """The mesh's stations (host first, then in join order); returns True when a new update starts."""
        if len(addresses) > LOCAL_NODE_SLOTS:
            raise ValueError(f"an LDN session has at most {LOCAL_NODE_SLOTS} nodes")
        joined = [a for a in addresses if a not in self._ranking]
        left = [a for a in self._order if a not in addresses]
        toggled = allow_participation is not None and allow_participation != self.allow_participation
        if not (joined or left or toggled) and self._payload:
            return False
        if allow_participation is not None:
            self.allow_participation = allow_participation
        for a in left:
            self._order.remove(a)
            del self._ranking[a]
        self._order += joined
        if joined or not self._payload:
            # Rankings follow age and are recomputed only when someone joins (§5.10).
            self._ranking = {a: i for i, a in enumerate(self._order)}
        self.sequence_id = (self.sequence_id + (1 if self._payload else 0)) & 0xFFFFFFFF
        self._payload = self.message().encode(self.profile)
        self._unacked = set(self._order[1:])  # every station but the host
        self._next_send = now if self._unacked else None
        return True

    def message(self) -> UpdateSession:
        nodes = tuple(
            LocalNode(StationAddress(InetAddress.from_ip(ip, port)), self._ranking[(ip, port)])
            for ip, port in self._order
        )
        host_ids = {}
        if self.profile.version >= (5, 7):  # (5.2-5.6 carry neither: spec §5.10)
            host_ids = {"host_service_variable_id": self.host.service_variable_id, "host_constant_id": self.host.constant_id}
        return UpdateSession(
            sequence_id=self.sequence_id,
            network_id=self.network_id,
            host_variable_id=self.host.variable_id & 0xFFFFFFFF,
            allow_participation=int(self.allow_participation),
            nodes=nodes,
            **host_ids,
        )

    def get_timer(self) -> float | None:
        return self._next_send

    def due(self, now: float) -> list[tuple[Address, bytes]]:
        """The update-session payloads to send now (one per station that has not acked)."""
        if self._next_send is None or now < self._next_send:
            return []
        self._next_send = now + RESEND_INTERVAL
        self.sent += len(self._unacked)
        return [(a, self._payload) for a in self._order if a in self._unacked]

    def receive(self, address: Address, payload: bytes) -> bool:
        """A Local message from a station; True when it acknowledged the current update."""
        msg = decode_local_message(payload, self.profile)
        if not isinstance(msg, UpdateSessionAck) or msg.sequence_id != self.sequence_id:
            return False
        if address not in self._unacked:
            return False
        self._unacked.discard(address)
        if not self._unacked:
            self._next_send = None
        return True

    @property
    def settled(self) -> bool:
        """Every station acknowledged the current update."""
        return not self._unacked


def answer_update_session(profile: VersionProfile, payload: bytes) -> tuple[UpdateSession, bytes]:
    """Station side: decode an update session and build its ack (same sequence id)."""
    msg = decode_local_message(payload, profile)
    if not isinstance(msg, UpdateSession):
        raise BadValue(f"expected an update session, got {type(msg).__name__}")
    return msg, UpdateSessionAck(msg.sequence_id).encode(profile)
