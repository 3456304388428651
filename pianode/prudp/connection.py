"""One PRUDP connection as a sans-IO state machine (no Trio, no clock: every call takes ``now``).

Theory of operation (spec ../shared/spec/prudp.md §1.4, §5, §6):

* **Handshake.**  Client: SYN (retransmitted until SYN+ACK) → CONNECT (reliable
  seq 1) → CONNECT+ACK → connected; the Rendez-Vous variant adds the ECDH
  exchange inside CONNECT and a reliable USER packet that must be acked before
  the client counts as connected (spec §4.2).  Host: built from a CONNECT by
  :meth:`Connection.accept`, answers CONNECT+ACK and is connected at once; its
  receive window skips the CONNECT's sequence id.
* **Sequence counters** (spec §5): one reliable counter per substream (from 1,
  CONNECT takes 1 on the client), one for unreliable PINGs and one for unreliable
  DATA.  All wrap at 2**16; comparisons use serial arithmetic (spec §6.3, §6.10).
* **Sending.**  A message is cut into fragments (ids 1, 2, …, 0, spec §6.8) and
  queued; fragments get their sequence id and are transformed (suffix, ratio
  byte/zlib, cipher) only when they enter the send window, in order, so the NEX
  RC4 keystream advances in sequence order.  The exact datagram is kept for
  retransmission (never re-encrypted, spec §6.10 item 5), with an RTO that
  backs off up to a ceiling; too many transmissions end the connection.  The
  first RTO is the variant's; once acks give RTT samples (Karn's rule) it follows
  SRTT + 4·RTTVAR (RFC 6298, as spec §6.5 recommends), never below ``min_rto``.
* **Acks** (spec §6.1): every valid NEED_ACK packet is acked, duplicates and
  early packets included, except packets too far ahead of the window.  In-flight
  packets are matched on (type, substream, seq), so a PING ack never clears DATA.
  v1 can acknowledge with aggregate acks (spec §6.4), old and new formats.
* **Receiving** (spec §6.3): early reliable packets are held back (at most
  ``Settings.max_held_bytes`` of them: an early packet beyond it is dropped
  unacked and comes again; so is one past what all the endpoint's connections buffer together, its
  :class:`BufferPool`), old ones are dropped after acking; in-order packets are decrypted, decompressed and
  reassembled, and a message is delivered on fragment id 0.  Reliable PINGs,
  USERs occupy their slot as no-ops (spec §6.9).  Unreliable DATA (one whole message, fragment id 0) is
  delivered unordered but once: an id seen in the last 256, or older, is a replay and dropped (spec §6.2).
* **Keep-alive** (spec §6.6, seeds 000/001): after ``ping`` seconds without any
  valid *new* inbound packet (a new id, an ack of something in flight or of
  our last ping: a replayed packet is no sign of life) an unreliable PING is sent; a ping is *missed* when the
  next one falls due with still nothing received; two misses end the connection.
"""

from __future__ import annotations

import enum
import math
import os
import struct
from collections import Counter, deque
from collections.abc import Callable

import attrs

from pianode.prudp.payload_cipher import PayloadCipher
from pianode.prudp.events import (
    Connected,
    ConnectionFailed,
    ConnectionId,
    Disconnected,
    Event,
    MessageReceived,
    Settings,
)
from protocols.errors import DecodeError
from protocols.prudp import rendezvous
from protocols.prudp.codec import PacketCodec, quazal_seal
from protocols.prudp.identify import signature_variants
from protocols.prudp.packet import Flag, PacketType, PrudpPacket
from protocols.prudp.signatures import expected_signature
from protocols.prudp.variants import Framing

__all__ = ["BufferPool", "Connection", "State", "count_other_variant"]


def count_other_variant(stats: Counter[str], heard: tuple[str, ...], otherwise: str) -> None:
    """Count a dropped packet: of another variant (``dropped_other_variant``, and which under
    ``other_variant:<names>``) when *heard* names one, else ``dropped_<otherwise>``."""
    if heard:
        stats["dropped_other_variant"] += 1
        stats["other_variant:" + " or ".join(heard)] += 1
    else:
        stats[f"dropped_{otherwise}"] += 1

RandomBytes = Callable[[int], bytes]
UNRELIABLE_ACKS_KEPT = 64  # ids of our unreliable DATA whose acks we still tell from reliable ones


class _UnreliableIds:
    """Ids of our recent unreliable DATA (NEED_ACK) not yet acked.

    An ack names (type, substream, id) only (spec §6.2), and our unreliable DATA ids run apart from the
    reliable ones: an ack of an id that is both is taken for the unreliable packet, so a reliable one of
    that id, lost, is still resent (at worst once more than needed, the copy dropped as a duplicate),
    never taken for delivered."""

    def __init__(self) -> None:
        self._ids: dict[int, None] = {}

    def sent(self, seq: int) -> None:
        self._ids[seq] = None
        if len(self._ids) > UNRELIABLE_ACKS_KEPT:
            del self._ids[next(iter(self._ids))]

    def acked(self, p: PrudpPacket) -> bool:
        """Whether *p* acks one of them (and takes it off)."""
        if p.type != PacketType.DATA or p.substream_id != 0 or p.sequence_id not in self._ids:
            return False
        del self._ids[p.sequence_id]
        return True


class State(enum.Enum):
    SYN_SENT = "syn-sent"
    CONNECT_SENT = "connect-sent"
    USER_SENT = "user-sent"
    CONNECTED = "connected"
    CLOSING = "closing"
    CLOSED = "closed"


@attrs.define
class _InFlight:
    data: bytes
    sends: int
    deadline: float
    rto: float
    first_sent: float


@attrs.define
class _Outgoing:
    type: PacketType
    flags: Flag
    substream: int
    fragment_id: int | None
    plain: bytes


def _read_aggregate_ack(p: PrudpPacket) -> tuple[int, int, tuple[int, ...]]:
    """``(substream, base, extra ids)`` of a v1 aggregate ack, old or new format (spec §6.4)."""
    if p.substream_id == 1:  # new format
        if len(p.payload) < 4 or len(p.payload) != 4 + 2 * p.payload[1]:
            raise DecodeError("aggregate ack of the wrong size")
        sub, n, base = struct.unpack_from("<BBH", p.payload)
        return sub, base, struct.unpack_from(f"<{n}H", p.payload, 4)
    if len(p.payload) % 2:
        raise DecodeError("aggregate ack of odd size")
    return 0, p.sequence_id, struct.unpack(f"<{len(p.payload) // 2}H", p.payload)


def _aggregate_ack_fields(sub: int, expected: int, held: dict[int, PrudpPacket], minor: int) -> dict[str, object]:
    """Sequence id, substream and payload of a v1 aggregate ack of *sub*: everything before *expected*, plus the
    held extras (spec §6.4: the new format from minor version 2, the old one before)."""
    base = (expected - 1) & 0xFFFF
    extras = sorted(held, key=lambda s: _serial_diff(s, expected))[:255]
    ids = b"".join(struct.pack("<H", e) for e in extras)
    if minor >= 2:
        return {"substream_id": 1, "sequence_id": 0, "payload": struct.pack("<BBH", sub, len(extras), base) + ids}
    return {"substream_id": 0, "sequence_id": base, "payload": ids}


def _handshake_options(p: PrudpPacket, conn: Connection, conn_sig: bytes, unreliable: int | None) -> PrudpPacket:
    """*p* (a client's SYN or CONNECT) with its connection signature and, in v1, the negotiation options (§2.3)."""
    if conn.variant.framing != Framing.V1:
        return attrs.evolve(p, connection_signature=conn_sig)
    functions = (conn._minor & 0xFF) | (conn._functions << 8)
    return attrs.evolve(p, connection_signature=conn_sig, supported_functions=functions, max_substream=conn._max_sub,
                        initial_unreliable_id=unreliable)  # fmt: skip


class BufferPool:
    """What the connections of one endpoint buffer on receipt, counted together: early packets held for
    reordering and partial messages (``used``).  An early packet that does not fit ``limit`` is dropped unacked
    (it comes again); the endpoint ends the connection buffering the most when in-order data passed it
    (:meth:`pianode.prudp.core.EndpointCore` and ``Settings.max_buffered_bytes``)."""

    def __init__(self, limit: float = math.inf) -> None:
        self.limit = limit
        self.used = 0


def _rtt_sample(conn: Connection, entry: _InFlight, now: float) -> None:
    """One round-trip sample into the connection's SRTT and RTTVAR (spec §6.5, RFC 6298 constants)."""
    # Karn: only packets acked after a single transmission give an unambiguous sample
    if entry.sends != 1:
        return
    rtt = now - entry.first_sent
    if conn._srtt is None:
        conn._srtt, conn._rttvar = rtt, rtt / 2
    else:
        conn._rttvar = 0.75 * conn._rttvar + 0.25 * abs(conn._srtt - rtt)
        conn._srtt = 0.875 * conn._srtt + 0.125 * rtt


def _newer(last_seen: dict[PacketType, int], kind: PacketType, seq: int) -> bool:
    """Whether an unreliable packet's id is past every one seen of its kind (a replayed one is not); notes it."""
    last = last_seen.get(kind)
    if last is not None and not 0 < _serial_diff(seq, last) < 0x8000:
        return False
    last_seen[kind] = seq
    return True


class _ReplayWindow:
    """The peer's unreliable DATA ids seen lately: the newest and a bitmap of the :data:`SIZE` before it.

    Unreliable DATA is delivered unordered (spec §6.2), so a late id is still new; but a copy of one already
    delivered (a replay, or a duplicating network) is not, and neither is one too old to tell (the window of
    IPsec's anti-replay check, RFC 4303 §3.4.3, in the serial arithmetic of spec §6.3)."""

    SIZE = 256

    def __init__(self) -> None:
        self.top: int | None = None
        self.bits = 0  # bit k: id top - k seen

    def refusal(self, p: PrudpPacket, max_substream: int) -> str | None:
        """Why unreliable DATA *p* is dropped (None: it is new, and noted): one whole message per packet,
        fragment id 0 (spec §6.2), on a substream the connection has (§2.3), not seen before."""
        if p.fragment_id:
            return "fragmented_unreliable"
        if p.substream_id > max_substream:
            return "bad_substream"
        return None if self.fresh(p.sequence_id) else "replayed"

    def fresh(self, seq: int) -> bool:
        """Whether *seq* is new; notes it."""
        if self.top is None:
            self.top, self.bits = seq, 1
            return True
        ahead = _serial_diff(seq, self.top)
        if 0 < ahead < 0x8000:
            self.bits = ((self.bits << ahead) | 1) & ((1 << self.SIZE) - 1) if ahead < self.SIZE else 1
            self.top = seq
            return True
        back = _serial_diff(self.top, seq)
        if back >= self.SIZE or self.bits >> back & 1:
            return False
        self.bits |= 1 << back
        return True


def _serial_diff(a: int, b: int) -> int:
    """``(a - b) mod 2**16``: how far *a* is ahead of *b* (spec §6.3)."""
    return (a - b) & 0xFFFF


class Connection:
    """A PRUDP connection (client or host) over one codec."""

    def __init__(self, settings: Settings, codec: PacketCodec, cid: ConnectionId, *, is_client: bool,
                 local_signature: bytes, random_bytes: RandomBytes = os.urandom,
                 pool: BufferPool | None = None) -> None:  # fmt: skip
        self.settings = settings
        self._pool = pool if pool is not None else BufferPool()
        self.variant = settings.variant
        self.codec = codec
        self.id = cid
        self.is_client = is_client
        self.state = State.SYN_SENT if is_client else State.CONNECTED
        self.local_signature = local_signature
        self.remote_signature: bytes | None = None
        self._random = random_bytes
        self.local_session = random_bytes(1)[0]
        self.remote_session: int | None = None
        self.stats: Counter[str] = Counter()
        self.events: deque[Event] = deque()
        self._out: list[bytes] = []
        self._inflight: dict[tuple[int, int, int], _InFlight] = {}
        nsub = settings.max_substream + 1
        self._next_seq = [1] * nsub
        self._queues: list[deque[_Outgoing]] = [deque() for _ in range(nsub)]
        #: Payload bytes queued to send, not yet in the window (Settings.send_queue_bytes bounds it).
        self.queued_bytes = 0
        self._expected = [1] * nsub
        self._held: list[dict[int, PrudpPacket]] = [{} for _ in range(nsub)]
        self._held_bytes = 0  # payload bytes in _held (Settings.max_held_bytes bounds it; and the pool, all held)
        self._fragments = [bytearray() for _ in range(nsub)]
        self._agg_pending: set[int] = set()
        self._ping_seq = 1
        self._unreliable_seq = 1
        self._unreliable_unacked = _UnreliableIds()
        if self.variant.framing == Framing.V1:
            self._unreliable_seq = int.from_bytes(random_bytes(2), "little")
        self._minor = settings.minor
        self._functions = settings.supported_functions
        self._max_sub = settings.max_substream
        self._ecdh_key: rendezvous.EccKey | None = None
        self.cipher = PayloadCipher(
            self.variant, settings.max_substream, ratio_byte=settings.ratio_byte,
            compress=settings.use_compression, random_bytes=random_bytes,
        )
        self._last_rx = 0.0
        self._ping_due: float | None = None
        self._ping_outstanding = False
        self._missed_pings = 0
        self._last_seen: dict[PacketType, int] = {}  # the peer's last unreliable id per type (see _newer)
        self._unreliable_seen = _ReplayWindow()  # the peer's unreliable DATA ids
        self._connect_ack: bytes | None = None  # host: resent when the client's CONNECT comes again
        self._srtt: float | None = None  # smoothed RTT and its variation (spec §6.5, RFC 6298 constants)
        self._rttvar = 0.0
        rto, total = settings.rto, 0.0
        for _ in range(settings.transmissions):
            total += rto
            rto = min(rto * settings.backoff, settings.rto_max)
        self._give_up_after = total  # e.g. NEX: 1 + 1.5 + 2.25 s

    # ------------------------------------------------------------------ setup
    def _emit(self, event: Event) -> None:
        self.events.append(event)

    def _packet(self, ptype: PacketType, flags: Flag, **fields: object) -> PrudpPacket:
        return PrudpPacket(
            source=self.id.local_vport,
            destination=self.id.remote_vport,
            type=ptype,
            flags=flags,
            session_id=fields.pop("session_id", self.local_session),  # type: ignore[arg-type]
            **fields,  # type: ignore[arg-type]
        )

    def _sign(self, p: PrudpPacket, *, peer: bytes | None | bool = True) -> PrudpPacket:
        sig_peer = self.remote_signature if peer is True else (None if peer is False else peer)
        sig = expected_signature(
            p, self.variant, self.settings.access_key, session_key=self.cipher.session_key, peer_signature=sig_peer
        )
        return attrs.evolve(p, signature=sig)

    # ---------------------------------------------------------------- client
    def start(self, now: float) -> None:
        """Client: send SYN."""
        syn = self._packet(PacketType.SYN, Flag.NEED_ACK, session_id=0)
        syn = _handshake_options(syn, self, bytes(self.variant.connection_signature_bytes), None)
        self._transmit_tracked(self._sign(syn, peer=False), (PacketType.SYN, 0, 0), now)
        self._last_rx = now

    def _on_syn_ack(self, p: PrudpPacket, now: float) -> None:  # (in SYN_SENT: receive_packet counts the others)
        if p.signature != expected_signature(p, self.variant, self.settings.access_key):
            self._bad_signature(p, inbound=False)
            return
        if self.variant.framing == Framing.V1:
            if p.supported_functions is None or p.max_substream is None:
                self._fail("SYN+ACK lacks the v1 negotiation options", now)
                return
            minor, functions = p.supported_functions & 0xFF, p.supported_functions >> 8
            if minor > self._minor or functions & ~self._functions or p.max_substream > self._max_sub:
                self._fail("SYN+ACK raised a negotiated value (spec §2.3)", now)
                return
            self._minor, self._functions, self._max_sub = minor, functions, p.max_substream
        syn = self._inflight.pop((PacketType.SYN, 0, 0), None)
        if syn is not None:
            _rtt_sample(self, syn, now)
        self.remote_signature = p.connection_signature
        payload = b""
        if self.variant.ecdh_connect:
            self._ecdh_key = rendezvous.generate_key()
            payload = rendezvous.public_bytes(self._ecdh_key)
        elif self.variant.transform_connect:
            payload = quazal_seal(b"", self.variant, PacketType.CONNECT, self.id.local_vport, compress=False)
        connect = self._packet(PacketType.CONNECT, Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE, payload=payload)
        connect = _handshake_options(connect, self, self.local_signature, self._unreliable_seq)
        seq = self._take_seq(0)
        connect = self._sign(attrs.evolve(connect, sequence_id=seq))
        self._transmit_tracked(connect, (PacketType.CONNECT, 0, seq), now)
        self.state = State.CONNECT_SENT

    def _on_connect_ack(self, p: PrudpPacket, now: float) -> None:
        if (PacketType.CONNECT, 0, p.sequence_id) not in self._inflight:
            self.stats["dropped_unexpected_handshake"] += 1
            return
        if p.signature != self._expected_inbound(p):
            self._bad_signature(p)
            return
        if self.variant.framing == Framing.V1:
            offered = (self._minor & 0xFF) | (self._functions << 8)
            if p.supported_functions != offered or p.max_substream != self._max_sub:
                self._fail("CONNECT+ACK changed the negotiated values (spec §2.3)", now)
                return
        _rtt_sample(self, self._inflight.pop((PacketType.CONNECT, 0, p.sequence_id)), now)
        self.remote_session = p.session_id
        if self.variant.ecdh_connect:
            assert self._ecdh_key is not None
            try:
                hello = rendezvous.HostHello.decode(p.payload)
                self.cipher.aes_key = rendezvous.client_finish(self._ecdh_key, hello, self.settings.certificate)
            except DecodeError as exc:
                self._fail(f"connection refused: {exc}", now)
                return
        if self.variant.user_after_connect:
            seq = self._take_seq(0)
            user = self._sign(self._packet(PacketType.USER, Flag.RELIABLE | Flag.NEED_ACK, sequence_id=seq))
            self._transmit_tracked(user, (PacketType.USER, 0, seq), now)
            self.state = State.USER_SENT
            return
        self._become_connected(now)

    def _become_connected(self, now: float) -> None:
        self.state = State.CONNECTED
        self._last_rx = now
        self._ping_due = now + self.settings.ping
        self._emit(Connected(self.id, self.is_client))
        self._pump(now)

    def _fail(self, reason: str, now: float) -> None:
        self.stats["handshake_failed"] += 1
        if self.remote_signature is not None and self.remote_session is not None:
            self._abort_packets()
        self._close(now, reason, failed=True)

    # ------------------------------------------------------------------ host
    @classmethod
    def accept(
        cls,
        settings: Settings,
        codec: PacketCodec,
        cid: ConnectionId,
        connect: PrudpPacket,
        local_signature: bytes,
        now: float,
        *,
        random_bytes: RandomBytes = os.urandom,
        avoid_session: int | None = None,
        pool: BufferPool | None = None,
    ) -> Connection:
        """Host: build a connection from a client's CONNECT, with another session id than *avoid_session*.

        Raises:
            DecodeError: the CONNECT is not acceptable (bad signature, negotiation or key); the message says which.
        """
        conn = cls(settings, codec, cid, is_client=False, local_signature=local_signature, random_bytes=random_bytes,
                   pool=pool)  # fmt: skip
        conn.local_session ^= 0x80 if conn.local_session == avoid_session else 0
        if connect.signature != conn._expected_inbound(connect):
            raise DecodeError("CONNECT signature does not verify")
        v = settings.variant
        if v.framing == Framing.V1:
            if connect.supported_functions is None or connect.max_substream is None:
                raise DecodeError("CONNECT lacks the v1 negotiation options")
            minor, functions = connect.supported_functions & 0xFF, connect.supported_functions >> 8
            if minor > settings.minor or functions & ~settings.supported_functions:
                raise DecodeError("CONNECT offers values beyond what we support")
            if connect.max_substream > settings.max_substream:
                raise DecodeError("CONNECT asks for more substreams than we support")
            conn._minor, conn._functions, conn._max_sub = minor, functions, connect.max_substream
        conn.remote_signature = connect.connection_signature
        conn.remote_session = connect.session_id
        payload = b""
        if v.ecdh_connect:
            if settings.certificate is None or not settings.certificate.has_private():
                raise DecodeError("this host has no certificate private key to sign its key exchange")
            hello, conn.cipher.aes_key = rendezvous.host_accept(connect.payload, settings.certificate)
            payload = hello.encode()
        elif v.transform_connect:
            payload = quazal_seal(b"", v, PacketType.CONNECT, cid.local_vport, compress=False)
        conn._expected[0] = (connect.sequence_id + 1) & 0xFFFF  # the CONNECT used its slot (spec §5)
        ack = conn._packet(
            PacketType.CONNECT, Flag.ACK | Flag.HAS_SIZE, sequence_id=connect.sequence_id, payload=payload
        )
        size = v.connection_signature_bytes
        if v.framing == Framing.V1:
            ack = attrs.evolve(
                ack,
                connection_signature=bytes(size),
                supported_functions=connect.supported_functions,
                max_substream=connect.max_substream,
                initial_unreliable_id=0,
            )
        else:
            ack = attrs.evolve(ack, connection_signature=bytes(size))
        conn._connect_ack = codec.encode(conn._sign(ack))
        conn._out.append(conn._connect_ack)
        conn._become_connected(now)
        return conn

    def repeat_connect_ack(self) -> None:
        """Host: the client sent its CONNECT again (our CONNECT+ACK was lost): answered as many times as a
        client retransmits, not for every copy a replay sends (it is larger than the CONNECT)."""
        if self._connect_ack is not None and self.state in (State.CONNECTED, State.CLOSING):
            done = self.stats["connect_ack_repeated"] >= self.settings.transmissions
            self._out.extend([] if done else [self._connect_ack])
            self.stats["connect_ack_not_repeated" if done else "connect_ack_repeated"] += 1

    # ------------------------------------------------------------- user verbs
    def send(self, data: bytes, substream: int = 0, now: float = 0.0) -> None:
        """Queue a message; it is fragmented, and sent as the window allows."""
        if self.state not in (State.CONNECTED, State.SYN_SENT, State.CONNECT_SENT, State.USER_SENT):
            raise ConnectionError(f"PRUDP connection {self.id} is {self.state.value}")
        if not 0 <= substream <= self._max_sub:
            raise ValueError(f"substream {substream} out of range 0..{self._max_sub}")
        if len(data) > self.settings.max_message_size:
            raise ValueError(f"message of {len(data)} bytes is larger than max_message_size")
        size = self.settings.frag_size
        chunks = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
        self.queued_bytes += len(data)
        for n, chunk in enumerate(chunks, start=1):
            # ids run 1, 2, …, 0 (spec §6.8); a u8 id wraps 255 → 1, never to 0 mid-message [A]
            limit = 0xFF if self.variant.fragment_id_bytes == 1 else 0xFFFFFFFF
            frag = 0 if n == len(chunks) else (n - 1) % limit + 1
            flags = Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE
            self._queues[substream].append(_Outgoing(PacketType.DATA, flags, substream, frag, chunk))
        if self.state == State.CONNECTED:
            self._pump(now)

    @property
    def buffered(self) -> int:
        """Bytes this connection buffers on receipt: early packets held and partial messages."""
        return self._held_bytes + sum(len(f) for f in self._fragments)

    def can_send(self, size: int) -> bool:
        """Whether a message of *size* bytes fits the send queue now (an empty queue takes any message)."""
        return self.queued_bytes == 0 or self.queued_bytes + size <= self.settings.send_queue_bytes

    def send_unreliable(self, data: bytes, now: float) -> None:
        """One unreliable DATA packet (NEED_ACK, not ordered, not retransmitted; spec §6.2)."""
        if self.state != State.CONNECTED:
            raise ConnectionError(f"PRUDP connection {self.id} is {self.state.value}")
        seq = self._unreliable_seq
        self._unreliable_seq = (seq + 1) & 0xFFFF
        self._unreliable_unacked.sent(seq)
        p = self._packet(PacketType.DATA, Flag.NEED_ACK | Flag.HAS_SIZE, sequence_id=seq, fragment_id=0)
        p = attrs.evolve(p, payload=self.cipher.seal(p, data))
        self._out.append(self.codec.encode(self._sign(p)))

    def close(self, now: float) -> None:
        """Graceful close: a reliable DISCONNECT after the queued data (spec §6.7)."""
        if self.state in (State.CLOSING, State.CLOSED):
            return
        if self.state != State.CONNECTED:
            self._close(now, "closed before the handshake completed")
            return
        self._queues[0].append(_Outgoing(PacketType.DISCONNECT, Flag.RELIABLE | Flag.NEED_ACK, 0, None, b""))
        self.state = State.CLOSING
        self._pump(now)

    def abort(self, now: float, reason: str = "aborted") -> None:
        """Forced close: three unreliable DISCONNECTs, then closed (spec §6.7)."""
        if self.state == State.CLOSED:
            return
        if self.remote_session is not None:
            self._abort_packets()
        self._close(now, reason)

    def _abort_packets(self) -> None:
        p = self._sign(self._packet(PacketType.DISCONNECT, Flag.NONE))
        data = self.codec.encode(p)
        self._out.extend([data] * 3)

    def _close(self, now: float, reason: str, *, failed: bool = False) -> None:
        if self.state == State.CLOSED:
            return
        self.state = State.CLOSED
        self._inflight.clear()
        self._pool.used -= self.buffered  # what it held goes with it
        self._held_bytes = 0
        for parts in (self._queues, self._held, self._fragments):
            for part in parts:
                part.clear()
        self._emit(ConnectionFailed(self.id, reason) if failed else Disconnected(self.id, reason))

    # -------------------------------------------------------------- sending
    def _take_seq(self, substream: int) -> int:
        seq = self._next_seq[substream]
        self._next_seq[substream] = (seq + 1) & 0xFFFF
        return seq

    def _transmit_tracked(self, p: PrudpPacket, key: tuple[int, int, int], now: float) -> None:
        data = self.codec.encode(p)
        self._out.append(data)
        rto = self._rto()
        self._inflight[key] = _InFlight(data, 1, now + rto, rto, now)

    def _rto(self) -> float:
        """Retransmission timeout: the variant's fixed value, or RFC 6298's SRTT + 4·RTTVAR once sampled."""
        s = self.settings
        if not s.adaptive_rto or self._srtt is None:
            return s.rto
        return min(max(self._srtt + 4 * self._rttvar, s.min_rto), s.rto_max)

    def _pump(self, now: float) -> None:
        """Move queued packets into the send window, assigning sequence ids in order."""
        if self.state not in (State.CONNECTED, State.CLOSING):
            return
        for sub, queue in enumerate(self._queues):
            room = self.settings.send_window - sum(1 for (t, s, _) in self._inflight if s == sub and t != PacketType.PING)
            while queue and room > 0:
                item = queue.popleft()
                self.queued_bytes -= len(item.plain)
                seq = self._take_seq(sub)
                p = self._packet(
                    item.type, item.flags, sequence_id=seq, substream_id=sub, fragment_id=item.fragment_id
                )
                if item.type == PacketType.DATA:
                    p = attrs.evolve(p, payload=self.cipher.seal(p, item.plain))
                self._transmit_tracked(self._sign(p), (int(item.type), sub, seq), now)
                room -= 1

    def _ack(self, p: PrudpPacket) -> None:
        flags = Flag.ACK | (p.flags & Flag.MULTI_ACK)
        ack = self._packet(
            p.type,
            flags,
            sequence_id=p.sequence_id,
            substream_id=p.substream_id,
            fragment_id=p.fragment_id if p.type == PacketType.DATA else None,
        )
        if p.type == PacketType.DATA and ack.fragment_id is None:
            ack = attrs.evolve(ack, fragment_id=0)
        data = self.codec.encode(self._sign(ack))
        # NEX acks a DISCONNECT three times (spec §6.7)
        self._out.extend([data] * (3 if p.type == PacketType.DISCONNECT and self.variant.flags_bytes == 2 else 1))
        self.stats["acks_sent"] += 1

    def _aggregate_ack(self, sub: int) -> None:
        """v1 aggregate ack (spec §6.4): everything up to base, plus the held extras."""
        fields = _aggregate_ack_fields(sub, self._expected[sub], self._held[sub], self._minor)
        p = self._packet(PacketType.DATA, Flag.MULTI_ACK | Flag.HAS_SIZE, fragment_id=0, **fields)
        self._out.append(self.codec.encode(self._sign(p)))
        self.stats["aggregate_acks_sent"] += 1

    # ------------------------------------------------------------- receiving
    def _expected_inbound(self, p: PrudpPacket) -> bytes:
        # a receiver verifies with its own connection signature (spec §1.6)
        return expected_signature(
            p, self.variant, self.settings.access_key, session_key=self.cipher.session_key, peer_signature=self.local_signature
        )

    def _bad_signature(self, p: PrudpPacket, *, inbound: bool = True) -> None:
        """Drop *p*: of another variant if its rule signs *p* so, else signed with another access key."""
        kw = {"session_key": self.cipher.session_key, "peer_signature": self.local_signature} if inbound else {}
        heard = signature_variants(p, self.variant, self.settings.access_key, **kw)  # type: ignore[arg-type]
        count_other_variant(self.stats, heard, "bad_signature")

    def receive_packet(self, p: PrudpPacket, now: float) -> None:
        """Feed one decoded packet addressed to this connection."""
        if self.state == State.CLOSED:
            return
        if p.type == PacketType.SYN:
            if p.flags & Flag.ACK and self.is_client and self.state == State.SYN_SENT:
                self._on_syn_ack(p, now)
            else:  # a replayed or late handshake packet
                self.stats["dropped_unexpected_handshake"] += 1
            return
        if p.type == PacketType.CONNECT:
            if p.flags & Flag.ACK and self.is_client and self.state == State.CONNECT_SENT:
                self._on_connect_ack(p, now)
            elif not p.flags & Flag.ACK and not self.is_client:
                self.repeat_connect_ack()
            else:
                self.stats["dropped_unexpected_handshake"] += 1
            return
        if self.remote_session is None or p.session_id != self.remote_session:
            self.stats["dropped_bad_session"] += 1
            return
        if p.signature != self._expected_inbound(p):
            self._bad_signature(p)
            return
        if p.flags & Flag.ACK or (p.flags & Flag.MULTI_ACK and self.variant.framing == Framing.V1):
            fresh = self._on_ack(p, now)
        else:
            fresh = self._on_request(p, now)
        if fresh:  # only something new is a sign of life: replayed packets keep no vanished peer alive
            self._last_rx, self._missed_pings, self._ping_outstanding = now, 0, False
            if self.state in (State.CONNECTED, State.CLOSING):
                self._ping_due = now + self.settings.ping
        self._pump(now)

    def _on_ack(self, p: PrudpPacket, now: float) -> bool:  # whether it acked something we wait for
        if p.flags & Flag.MULTI_ACK and self.variant.framing == Framing.V1 and p.type == PacketType.DATA:
            return self._on_aggregate_ack(p)
        if self._unreliable_unacked.acked(p):  # (before the reliable ones: see _UnreliableIds)
            return True
        entry = self._inflight.pop((int(p.type), p.substream_id, p.sequence_id), None)
        if entry is None:  # (our pings are unreliable, not in flight: the ack of the last one counts)
            ping = p.type == PacketType.PING and self._ping_outstanding and p.sequence_id == (self._ping_seq - 1) & 0xFFFF
            self.stats["acks_unmatched"] += not ping
            return ping
        _rtt_sample(self, entry, now)
        if p.type == PacketType.USER and self.state == State.USER_SENT:
            self._become_connected(now)
        elif p.type == PacketType.DISCONNECT and self.state == State.CLOSING:
            self._close(now, "closed")
        return True

    def _on_aggregate_ack(self, p: PrudpPacket) -> bool:
        try:
            sub, base, extras = _read_aggregate_ack(p)
            # a base ahead of the last id sent acks ids never sent: ignored (spec §6.4, §6.10 item 4)
            if sub > self._max_sub or 0 < _serial_diff(base, (self._next_seq[sub] - 1) & 0xFFFF) < 0x8000:
                raise DecodeError("aggregate ack beyond the ids sent")
        except DecodeError:
            self.stats["dropped_bad_aggregate_ack"] += 1
            return False
        before = len(self._inflight)
        for key in list(self._inflight):
            t, s, seq = key
            # serial "seq <= base" (spec §6.4, fixing §6.10 item 1); never touches PING entries
            if t != PacketType.PING and s == sub and _serial_diff(base, seq) < 0x8000:
                self._inflight.pop(key)
                if t == PacketType.DISCONNECT and self.state == State.CLOSING:
                    self._close(0.0, "closed")
                    return True
        for seq in extras:
            self._inflight.pop((int(PacketType.DATA), sub, seq), None)
        return len(self._inflight) < before

    def _on_request(self, p: PrudpPacket, now: float) -> bool:  # whether it was new (a replay is not)
        if p.type == PacketType.PING:
            self.stats["pings_received"] += 1
        if not p.flags & Flag.RELIABLE:
            if p.type == PacketType.DATA:
                return self._on_unreliable_data(p)
            if p.flags & Flag.NEED_ACK:
                self._ack(p)
            if p.type == PacketType.DISCONNECT:
                self._close(now, "closed by peer (forced)")
            return _newer(self._last_seen, p.type, p.sequence_id)
        sub = p.substream_id
        if sub > self._max_sub:
            self.stats["dropped_bad_substream"] += 1
            return False
        d = _serial_diff(p.sequence_id, self._expected[sub])
        if self.settings.receive_window <= d < 0x8000:
            self.stats["dropped_beyond_window"] += 1  # no ack: the sender will try again (spec §6.3 step 5)
            return False
        size = len(p.payload)
        full = self._held_bytes + size > self.settings.max_held_bytes or self._pool.used + size > self._pool.limit
        if full and 0 < d < 0x8000 and p.sequence_id not in self._held[sub]:
            self.stats["dropped_hold_full"] += 1  # unacked: it comes again once the window moved (spec §6.3 step 5)
            return False
        use_agg = self.settings.aggregate_ack and p.type == PacketType.DATA and self.variant.framing == Framing.V1
        if p.flags & Flag.NEED_ACK:
            if use_agg:
                self._agg_pending.add(sub)
            else:
                self._ack(p)
        if d >= 0x8000 or p.sequence_id in self._held[sub]:
            self.stats["duplicates"] += 1
            return False
        self._held[sub][p.sequence_id] = p
        self._held_bytes += size
        self._pool.used += size
        while self._expected[sub] in self._held[sub] and self.state != State.CLOSED:
            q = self._held[sub].pop(self._expected[sub])
            self._held_bytes -= len(q.payload)
            self._pool.used -= len(q.payload)
            self._expected[sub] = (self._expected[sub] + 1) & 0xFFFF
            self._process_in_order(q, now)
        return True

    def _on_unreliable_data(self, p: PrudpPacket) -> bool:  # whether it was new
        why = self._unreliable_seen.refusal(p, self._max_sub)
        if why in (None, "replayed") and p.flags & Flag.NEED_ACK:
            self._ack(p)  # a copy is acked too: the first ack may have been lost (spec §6.1)
        try:
            data = self.cipher.open(p) if why is None else b""
        except DecodeError:
            why = "bad_payload"
        if why is not None:
            self.stats[f"dropped_{why}"] += 1
            return False
        self._emit(MessageReceived(self.id, data, p.substream_id, reliable=False))
        return True

    def _process_in_order(self, p: PrudpPacket, now: float) -> None:
        if p.type == PacketType.DATA:
            try:
                piece = self.cipher.open(p)
            except DecodeError:
                # the slot is consumed either way; a corrupt fragment spoils its message
                self.stats["dropped_bad_payload"] += 1
                self._pool.used -= len(self._fragments[p.substream_id])
                self._fragments[p.substream_id].clear()
                return
            buf = self._fragments[p.substream_id]
            buf += piece
            self._pool.used += len(piece)
            if len(buf) > self.settings.max_message_size:
                self.abort(now, "message larger than max_message_size")
                return
            if p.fragment_id == 0:
                self._emit(MessageReceived(self.id, bytes(buf), p.substream_id))
                self._pool.used -= len(buf)
                buf.clear()
        elif p.type == PacketType.DISCONNECT:
            self._close(now, "closed by peer")
        # reliable PING / USER: a no-op that only advances the window (spec §6.9)

    # ---------------------------------------------------------------- timers
    def get_timer(self) -> float | None:
        if self.state == State.CLOSED:
            return None
        times = [e.deadline for e in self._inflight.values()]
        if self._ping_due is not None and self.state in (State.CONNECTED, State.CLOSING):
            times.append(self._ping_due)
        return min(times) if times else None

    def handle_timer(self, now: float) -> None:
        if self.state == State.CLOSED:
            return
        limit = self.settings.transmissions
        for key, entry in list(self._inflight.items()):
            if entry.deadline > now:
                continue
            # give up after `limit` transmissions, but never sooner than the fixed-RTO
            # profile would (a short measured RTT must not shorten the outage we ride out)
            if entry.sends >= limit and now - entry.first_sent >= self._give_up_after - 1e-9:
                what = PacketType(key[0]).name
                if self.state in (State.SYN_SENT, State.CONNECT_SENT, State.USER_SENT):
                    self._fail(f"no answer to {what} after {entry.sends} transmissions", now)
                else:
                    self._close(now, f"timeout: {what} {key[2]} unacknowledged after {entry.sends} transmissions")
                return
            entry.sends += 1
            entry.rto = min(entry.rto * self.settings.backoff, self.settings.rto_max)
            entry.deadline = now + entry.rto
            if entry.sends >= limit:
                entry.deadline = min(entry.deadline, max(now, entry.first_sent + self._give_up_after))
            self._out.append(entry.data)
            self.stats["retransmissions"] += 1
        if self._ping_due is not None and now >= self._ping_due and self.state in (State.CONNECTED, State.CLOSING):
            if self._ping_outstanding:
                self._missed_pings += 1
                if self._missed_pings >= 2:
                    self._close(now, "keep-alive: two pings unanswered")
                    return
            seq = self._ping_seq
            self._ping_seq = (seq + 1) & 0xFFFF
            ping = self._sign(self._packet(PacketType.PING, Flag.NEED_ACK, sequence_id=seq))
            self._out.append(self.codec.encode(ping))
            self._ping_outstanding = True
            self._ping_due = now + self.settings.ping
            self.stats["pings_sent"] += 1

    def datagrams_to_send(self) -> list[bytes]:
        for sub in sorted(self._agg_pending):
            self._aggregate_ack(sub)
        self._agg_pending.clear()
        out, self._out = self._out, []
        return out
