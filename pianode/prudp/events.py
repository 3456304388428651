"""Events and settings of the PRUDP runtime (sans-IO; no Trio here).

Events come out of :meth:`pianode.prudp.core.EndpointCore.next_event`; each
names the connection by its :class:`ConnectionId` (UDP address, local virtual
port, remote virtual port: spec ../shared/spec/prudp.md §1.1).
"""

from __future__ import annotations

from typing import Any

import attrs

from protocols.errors import ConfigError
from protocols.prudp.variants import Variant, variant_for

__all__ = [
    "Connected",
    "ConnectionFailed",
    "ConnectionId",
    "Disconnected",
    "Event",
    "MessageReceived",
    "Settings",
]

Address = tuple[str, int]


@attrs.frozen
class ConnectionId:
    address: Address
    local_vport: int
    remote_vport: int

    def __str__(self) -> str:
        return f"{self.address[0]}:{self.address[1]} {self.local_vport:02x}<->{self.remote_vport:02x}"


@attrs.frozen
class Connected:
    connection: ConnectionId
    is_client: bool


@attrs.frozen
class MessageReceived:
    connection: ConnectionId
    data: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    substream: int = 0
    #: False for an unreliable DATA packet (no substream of its own: 0).
    reliable: bool = True


@attrs.frozen
class Disconnected:
    """The connection ended: ``reason`` says why (closed, closed by peer, timeout, keep-alive)."""

    connection: ConnectionId
    reason: str


@attrs.frozen
class ConnectionFailed:
    """The handshake did not complete; ``reason`` is a clear, user-facing message."""

    connection: ConnectionId
    reason: str


Event = Connected | MessageReceived | Disconnected | ConnectionFailed


def _variant(value: str | Variant) -> Variant:
    return variant_for(value)


def _key_bytes(key: str | bytes) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


@attrs.frozen
class Settings:
    """Everything a PRUDP endpoint needs to know; ``None`` means "the variant's default".

    Attributes:
        variant: the PRUDP flavour (name or :class:`Variant`).
        access_key: the game's access key (checksums and signatures).
        compression: NEX: whether DATA carries the ratio byte and is zlib-compressed
            (both ends must agree, spec §2.8).  Quazal/Rendez-Vous: whether we
            compress (the ratio byte is always there, spec §3.5 / §4.4).
        certificate: Rendez-Vous only.  A host needs the certificate *private*
            key (to sign its ephemeral key); a client needs the certificate
            *public* key it trusts (spec §4.3).
        aggregate_ack: v1 only: acknowledge reliable DATA with aggregate acks
            (spec §6.4) instead of one ack per packet.
        adaptive_rto: derive the retransmission timeout from measured round
            trips (spec §6.5, RFC 6298) instead of keeping the variant's fixed
            value; ``min_rto`` is its floor.
    """

    variant: Variant = attrs.field(converter=_variant)
    access_key: bytes = attrs.field(default=b"", converter=_key_bytes)
    compression: bool | None = None
    fragment_size: int | None = None
    resend_timeout: float | None = None
    resend_backoff: float | None = None
    resend_timeout_max: float | None = None
    max_transmissions: int | None = None
    ping_interval: float | None = None
    send_window: int = 32
    receive_window: int = 256
    max_substream: int = 0
    minor_version: int | None = None
    supported_functions: int = 0
    aggregate_ack: bool = False
    adaptive_rto: bool = True
    min_rto: float = 0.2
    certificate: Any = None
    #: The largest message taken or sent (reassembled and inflated); a peer's bigger one ends the
    #: connection.  1 MiB is above what a NEX RMC call carries.
    max_message_size: int = 1 << 20
    stream_type: int | None = None
    #: Bytes queued to send on one connection before ``send`` waits (back-pressure).
    send_queue_bytes: int = 4 << 20
    #: Bytes received but not read by the application before the connection is ended.
    receive_queue_bytes: int = 4 << 20
    #: Connections a host keeps from one source IP; more are refused.
    max_connections_per_source: int = 16
    #: Connections a host keeps in all (from any number of source IPs); more are refused.
    max_connections: int = 1024
    #: Payload bytes of early reliable packets one connection holds for reordering; an early packet beyond
    #: it is dropped unacknowledged (``dropped_hold_full``) and comes again (the next in order is always taken).
    max_held_bytes: int = 1 << 20
    #: Bytes all of a host's connections buffer on receipt together (early packets held, partial messages): an
    #: early packet beyond it is dropped unacknowledged, and in-order data beyond it ends the connection that
    #: buffers the most (``aborted: buffer bound``).  Without it, max_connections peers each filling their own
    #: bounds would make a host hold gigabytes.
    max_buffered_bytes: int = 128 << 20
    #: Bytes all of an endpoint's connections hold received and not read by the application, together (the Trio
    #: driver's bound; ``receive_queue_bytes`` bounds each one).  Past it, a DATA packet for a connection whose
    #: application has something left to read is dropped before it is acknowledged (``dropped_unread_full``), so
    #: its peer sends it again later; a connection whose application has read everything is always served (so
    #: what such a connection took before, at most max_held_bytes and one message's fragments, may still complete
    #: past the bound, once).  Without it, max_connections peers nobody reads would each fill receive_queue_bytes.
    max_unread_bytes: int = 64 << 20
    #: Bytes all of an endpoint's connections hold queued to send (not yet in their windows), together: past it,
    #: ``send`` on a connection that has something queued waits (back-pressure, as at send_queue_bytes); one with
    #: nothing queued may always queue a message.  Without it, max_connections peers that never acknowledge
    #: would each make an echoing application queue send_queue_bytes.
    max_queued_bytes: int = 64 << 20

    def __attrs_post_init__(self) -> None:
        if not 0 < self.receive_window < 32768:
            raise ConfigError("receive_window must be between 1 and 32767 (spec §6.3)")
        if self.max_buffered_bytes < 1:
            raise ConfigError("max_buffered_bytes must be positive")
        if self.max_unread_bytes < 1:
            raise ConfigError("max_unread_bytes must be positive")
        if self.max_queued_bytes < 1:
            raise ConfigError("max_queued_bytes must be positive")
        if self.send_window < 1:
            raise ConfigError("send_window must be positive")
        if self.fragment_size is not None and not 0 < self.fragment_size <= 60000:
            raise ConfigError("fragment_size must be between 1 and 60000 (the payload size is a u16)")

    # resolved values
    @property
    def use_compression(self) -> bool:
        return self.variant.compression if self.compression is None else self.compression

    @property
    def ratio_byte(self) -> bool:
        return self.variant.ratio_byte_always or self.use_compression

    @property
    def frag_size(self) -> int:
        return self.fragment_size or self.variant.fragment_size

    @property
    def rto(self) -> float:
        return self.resend_timeout if self.resend_timeout is not None else self.variant.resend_timeout

    @property
    def backoff(self) -> float:
        return self.resend_backoff if self.resend_backoff is not None else self.variant.resend_backoff

    @property
    def rto_max(self) -> float:
        return self.resend_timeout_max if self.resend_timeout_max is not None else self.variant.resend_timeout_max

    @property
    def transmissions(self) -> int:
        return self.max_transmissions if self.max_transmissions is not None else self.variant.max_transmissions

    @property
    def ping(self) -> float:
        return self.ping_interval if self.ping_interval is not None else self.variant.ping_interval

    @property
    def minor(self) -> int:
        return self.minor_version if self.minor_version is not None else self.variant.minor_version

    @property
    def stype(self) -> int:
        return self.stream_type if self.stream_type is not None else self.variant.default_stream_type
