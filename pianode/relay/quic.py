"""One relay connection over aioquic's sans-IO QUIC: peer checks, traffic classes and their send order.

Theory of operation
-------------------
:class:`RelayConnection` wraps an ``aioquic`` :class:`QuicConnection` the way
the rest of pianode wraps a protocol: bytes and ``now`` in
(:meth:`receive_datagram`, :meth:`handle_timer`), datagrams out
(:meth:`datagrams_to_send`, each with the address QUIC gives it), a deadline
(:meth:`get_timer`), and events for the owner (:class:`RelayEvent`).  The
Trio tasks around it are in ``hub.py`` and ``client.py``.

**Who may talk.**  The hub asks every client for a certificate (aioquic's
server does not by itself; :class:`_ServerConnection` turns the request on);
each side checks the other's certificate with
:func:`~pianode.relay.certificates.check_peer` as soon as the TLS handshake
completes, which proves the peer holds the certificate's key.  Until that
check passed, nothing the peer sent is handed on and nothing is sent but the
close: a refused peer gets a CONNECTION_CLOSE whose reason is the one-line
reason, and the refusing side reports the same line.

**Traffic classes**, most urgent first (seed 004: "packets queued for sending
on higher-priority streams go out first"):

1. control: room membership and addresses, on client bidirectional stream 0;
2. Pia datagrams: QUIC DATAGRAM frames (RFC 9221), never retransmitted by
   QUIC (Pia's reliable protocol does that), never behind a lost packet;
3. bulk: large blobs (a capture, a session file), on client bidirectional stream 4.

aioquic writes DATAGRAM frames before stream frames in each packet and serves
streams round-robin; it has no priorities.  So bulk bytes wait in our own
queue and are handed to aioquic only while the bytes in flight plus the bulk
bytes aioquic holds stay under half the congestion window: the other half is
always free for control and datagrams, which are handed over at once, and
never more than ``BULK_WINDOW``, so bulk cannot build a long queue at the
bottleneck in front of them either.  Without this, a full window would hold
them behind bulk until acknowledgements free it, and every queue on the path
would be full of bulk.
"""

from __future__ import annotations

import enum
import ssl
from collections import Counter, deque
from collections.abc import Callable

import attrs
from aioquic.quic import events as quic_events
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.packet import QuicErrorCode
from cryptography import x509

from pianode.relay.certificates import CertificateRefused, Credentials, check_peer
from pianode.relay.limits import SharedFrame
from protocols.errors import DecodeError
from protocols.relay_control import ControlMessage, FrameDecoder, Ping, encode_frame, envelope_sender
from protocols.text import one_line

__all__ = ["ALPN", "CONTROL_STREAM", "BULK_STREAM", "EventKind", "RelayConnection", "RelayEvent", "configuration"]

ALPN = "pianode-relay/1"
CONTROL_STREAM = 0
BULK_STREAM = 4
#: QUIC packet size: a 1500-byte Ethernet MTU less IPv4/UDP headers and a margin for tunnels.
MAX_PACKET = 1452
#: Largest DATAGRAM frame payload that fits one packet of MAX_PACKET (short header, AEAD tag, frame header).
MAX_DATAGRAM_PAYLOAD = MAX_PACKET - 64
#: Real-time datagrams waiting for congestion window; beyond this the oldest of the sender with the most
#: waiting is dropped (it is stale, and no sender can crowd the others out).
MAX_PENDING_DATAGRAMS = 512
#: Most bulk bytes in flight or waiting inside aioquic: beyond the half window, a bound on
#: the queue bulk can build at the bottleneck (the hub's receive queue, a router's) in front
#: of the datagrams that follow it.  16 KiB is ~11 full packets: about a millisecond at the rates a
#: Python hub relays, and still 320 KB/s of bulk over a 50 ms path.
BULK_WINDOW = 16 * 1024
#: Most bulk bytes a connection queues for its peer; more is refused (counted): a site cannot make
#: the hub hold without bound what a slow member has not taken yet.
MAX_BULK_BACKLOG = 64 * 1024 * 1024
#: Largest bulk frame body.
MAX_BULK_FRAME = 16 * 1024 * 1024
#: Error code of a CONNECTION_CLOSE that refuses the peer: the TLS alert bad_certificate (42) as a
#: QUIC crypto error (0x100 + alert), sent as a transport close.  An application close sent before
#: the handshake is confirmed loses its reason on the way (RFC 9000 §10.2.3); this one keeps it.
REFUSED = 0x100 + 42
_CRYPTO_FRAME = 0x06
#: How long a connection may be silent before QUIC gives it up; the client pings well within it.
IDLE_TIMEOUT = 5.0
#: aioquic's reason phrase when the idle timeout ended a connection.
_IDLE_PHRASE = "Idle timeout"


def _drop_busiest_senders_oldest(pending: deque[bytes], incoming: bytes) -> None:
    """Make room in a full queue of envelopes: drop the oldest of the sender with the most
    waiting, *incoming* counted (its oldest is stale).  Dropping the oldest of all let one
    site that floods a member push every other site's datagrams to that member out."""
    counts = Counter(map(envelope_sender, pending))
    counts[envelope_sender(incoming)] += 1
    busiest = max(counts, key=counts.__getitem__)  # a tie: the sender of the oldest
    for i, waiting in enumerate(pending):
        if envelope_sender(waiting) == busiest:
            del pending[i]
            return
    pending.popleft()  # only the incoming one is the busiest's: all others have one each


@attrs.define
class _QueuedBulk:
    frame: SharedFrame
    sent: int = 0  # bytes of it handed to QUIC


class EventKind(enum.Enum):
    ADMITTED = "admitted"  # the peer's certificate passed; value: its name
    CONTROL = "control"  # value: a ControlMessage
    DATAGRAM = "datagram"  # value: envelope bytes
    BULK = "bulk"  # value: a BulkData
    CLOSED = "closed"  # value: the reason (one line)
    CID_ISSUED = "cid issued"  # value: a connection id of ours the peer may now use (the hub routes by it)
    CID_RETIRED = "cid retired"
    DEADLINE = "deadline"  # value: the label given to set_deadline; the time came first


@attrs.frozen
class RelayEvent:
    kind: EventKind
    value: object


def configuration(credentials: Credentials, *, is_client: bool) -> QuicConfiguration:
    """aioquic settings for one side.  aioquic's own certificate check is off
    (``CERT_NONE``): :func:`check_peer` does it, for both sides, with usages."""
    return QuicConfiguration(
        alpn_protocols=[ALPN],
        is_client=is_client,
        certificate=credentials.certificate,
        private_key=credentials.key,
        verify_mode=ssl.CERT_NONE,
        max_datagram_frame_size=65536,
        max_datagram_size=MAX_PACKET,
        idle_timeout=IDLE_TIMEOUT,
        initial_rtt=0.05,
        max_data=64 * 1024 * 1024,
        max_stream_data=32 * 1024 * 1024,
    )


class _ServerConnection(QuicConnection):
    """The hub's side: asks the client for its certificate in the handshake.

    aioquic builds its TLS context when the first Initial arrives and only
    sends a CertificateRequest when the context's ``_request_client_certificate``
    is set; nothing in its public API sets it.  (Tested: a hub that did not ask
    would see no client certificate and refuse everyone.)
    """

    def _initialize(self, peer_cid: bytes) -> None:
        super()._initialize(peer_cid)
        self.tls._request_client_certificate = True


class RelayConnection:
    """One side of a relay connection.  *ca* is the authority the peer must hold a
    certificate of, for *peer_role* (``client`` on the hub, ``server`` on a site)."""

    def __init__(
        self,
        quic_configuration: QuicConfiguration,
        ca: x509.Certificate,
        *,
        original_destination_connection_id: bytes | None = None,
        check: Callable[..., str] = check_peer,
    ) -> None:
        self.is_client = quic_configuration.is_client
        cls = QuicConnection if self.is_client else _ServerConnection
        self.quic = cls(
            configuration=quic_configuration,
            original_destination_connection_id=original_destination_connection_id,
        )
        self._ca = ca
        self._check = check
        self.peer_role = "server" if self.is_client else "client"
        self.peer_label = "hub" if self.is_client else "site"
        self.peer_name: str | None = None
        self.peer_certificate: x509.Certificate | None = None  # once admitted: the certificate that passed
        self.admitted = False
        self.closed_reason: str | None = None
        self._decoders = {CONTROL_STREAM: FrameDecoder(), BULK_STREAM: FrameDecoder(MAX_BULK_FRAME)}
        self._bulk_queue: deque[_QueuedBulk] = deque()
        self._bulk_queued = 0
        self._held: list[tuple[str, object]] = []
        self._deadline: tuple[float, str] | None = None  # see set_deadline
        self._head_started = False  # the first queued bulk frame is partly handed over
        #: See BULK_WINDOW; None hands every bulk byte to aioquic at once (no priority: for comparison).
        self.bulk_window: int | None = BULK_WINDOW  # sends asked for before admission (a client's Hello)
        self.counters: dict[str, int] = {
            "datagrams_sent": 0, "datagrams_received": 0, "stale_dropped": 0, "oversized": 0, "datagrams_waiting": 0,
            "control_waiting": 0, "bulk_refused": 0,
        }  # fmt: skip

    # ------------------------------------------------------------------ input
    def connect(self, addr: tuple[str, int], now: float) -> None:
        self.quic.connect(addr, now)

    def receive_datagram(self, data: bytes, addr: tuple[str, int], now: float) -> list[RelayEvent]:
        self.quic.receive_datagram(data, addr, now)
        return self._events()

    def handle_timer(self, now: float) -> list[RelayEvent]:
        due: list[RelayEvent] = []
        if self._deadline is not None and now >= self._deadline[0]:
            due.append(RelayEvent(EventKind.DEADLINE, self._deadline[1]))
            self._deadline = None
        self.quic.handle_timer(now)
        return due + self._events()

    def set_deadline(self, when: float | None, label: str = "") -> None:
        """Report a DEADLINE event (value: *label*) from :meth:`handle_timer` at *when*, once,
        unless this is called again first (None: no deadline).  :meth:`get_timer` includes it."""
        self._deadline = None if when is None else (when, label)

    def _events(self) -> list[RelayEvent]:
        out: list[RelayEvent] = []
        while (event := self.quic.next_event()) is not None:
            if isinstance(event, quic_events.HandshakeCompleted):
                self._on_handshake(out)
            elif isinstance(event, quic_events.ConnectionTerminated):
                if self.closed_reason is None:
                    self.closed_reason = self._termination_reason(event)
                out.append(RelayEvent(EventKind.CLOSED, self.closed_reason))
            elif isinstance(event, quic_events.ConnectionIdIssued):
                out.append(RelayEvent(EventKind.CID_ISSUED, event.connection_id))
            elif isinstance(event, quic_events.ConnectionIdRetired):
                out.append(RelayEvent(EventKind.CID_RETIRED, event.connection_id))
            elif not self.admitted:
                continue  # nothing from a peer whose certificate has not passed
            elif isinstance(event, quic_events.DatagramFrameReceived):
                self.counters["datagrams_received"] += 1
                out.append(RelayEvent(EventKind.DATAGRAM, event.data))
            elif isinstance(event, quic_events.StreamDataReceived):
                decoder = self._decoders.get(event.stream_id)
                if decoder is None:
                    self.close(f"data on unknown stream {event.stream_id}", refused=False)
                    continue
                try:
                    messages = decoder.feed(event.data)
                except DecodeError as exc:
                    self.close(f"bad relay frame: {exc}", refused=False)
                    continue
                kind = EventKind.CONTROL if event.stream_id == CONTROL_STREAM else EventKind.BULK
                out.extend(RelayEvent(kind, m) for m in messages)
        return out

    def _termination_reason(self, event: quic_events.ConnectionTerminated) -> str:
        """Why the connection ended, in one line: the peer's own words (from the network: made
        :func:`~protocols.text.one_line`), or what ended it here."""
        phrase = one_line(event.reason_phrase)
        if event.error_code == REFUSED:
            return f"refused by the {self.peer_label}: {phrase}"
        if not self.admitted and event.reason_phrase == _IDLE_PHRASE:
            return f"no TLS handshake within {IDLE_TIMEOUT:g} s"
        return phrase or self._wordless_close(event.error_code)

    def _wordless_close(self, code: int) -> str:
        """A close without a reason phrase, in words: the peer's (every close of ours has its reason)."""
        when = "" if self.admitted else " before the TLS handshake completed"
        if code == QuicErrorCode.APPLICATION_ERROR and not self.admitted:
            # RFC 9000 10.2.3: an application close sent that early travels as this, without its reason.
            return f"closed by the {self.peer_label}{when} (an application close: QUIC sends no reason that early)"
        if QuicErrorCode.CRYPTO_ERROR <= code <= QuicErrorCode.CRYPTO_ERROR + 0xFF:
            what = f"TLS alert {code - QuicErrorCode.CRYPTO_ERROR}"
        else:
            try:
                what = QuicErrorCode(code).name.lower().replace("_", " ")
            except ValueError:
                what = "unknown QUIC error"
        return f"closed by the {self.peer_label}{when}: {what} ({code:#x}), no reason given"

    def _on_handshake(self, out: list[RelayEvent]) -> None:
        tls = self.quic.tls
        try:
            self.peer_name = self._check(tls._peer_certificate, list(tls._peer_certificate_chain), self._ca, role=self.peer_role)
        except CertificateRefused as exc:
            self.close(str(exc), refused=True)
            out.append(RelayEvent(EventKind.CLOSED, self.closed_reason))
            return
        self.admitted = True
        self.peer_certificate = tls._peer_certificate
        out.append(RelayEvent(EventKind.ADMITTED, self.peer_name))
        held, self._held = self._held, []
        for kind, value in held:
            if kind == "control":
                self.send_control(value)  # type: ignore[arg-type]
        if self.is_client:
            # Open the bulk stream (client-initiated, after the control stream) so the hub can send on it too.
            self.quic.send_stream_data(BULK_STREAM, encode_frame(Ping(0)))

    # ------------------------------------------------------------------ output
    def send_control(self, msg: ControlMessage) -> None:
        if not self.admitted:
            self._held.append(("control", msg))
            return
        self.quic.send_stream_data(CONTROL_STREAM, encode_frame(msg))

    def send_datagram(self, envelope: bytes) -> bool:
        """Queue one relayed datagram; False when it cannot go (not admitted, or too large)."""
        if not self.admitted or self.closed_reason is not None:
            return False
        if len(envelope) > MAX_DATAGRAM_PAYLOAD:
            self.counters["oversized"] += 1
            return False
        pending = self.quic._datagrams_pending
        if len(pending) >= MAX_PENDING_DATAGRAMS:
            _drop_busiest_senders_oldest(pending, envelope)
            self.counters["stale_dropped"] += 1
        self.quic.send_datagram_frame(envelope)
        self.counters["datagrams_sent"] += 1
        return True

    def send_bulk(self, msg: ControlMessage) -> bool:
        """Queue a bulk frame; False (counted) when the backlog is full."""
        frame = SharedFrame(encode_frame(msg))
        try:
            return self.queue_bulk(frame) is None
        finally:
            frame.release()

    def queue_bulk(self, frame: SharedFrame) -> str | None:
        """Queue a bulk frame (held until sent or dropped, so one frame can go to several peers);
        None, or why not (counted): the backlog is full."""
        if self._bulk_queued + len(frame.data) > MAX_BULK_BACKLOG:
            self.counters["bulk_refused"] += 1
            return "bulk backlog of a member full"
        frame.hold()
        self._bulk_queue.append(_QueuedBulk(frame))
        self._bulk_queued += len(frame.data)
        return None

    def drop_queued_bulk(self, *, partial: bool = False) -> int:
        """Forget the bulk frames not yet begun, and a partly sent one too with *partial* (the
        connection is gone: nobody will read its end); returns the bytes dropped."""
        keep = [self._bulk_queue.popleft()] if self._head_started and self._bulk_queue and not partial else []
        dropped = 0
        for queued in self._bulk_queue:
            dropped += len(queued.frame.data) - queued.sent
            queued.frame.release()
        self._bulk_queue.clear()
        self._bulk_queue.extend(keep)
        self._bulk_queued -= dropped
        self._head_started = bool(keep)
        return dropped

    @property
    def bulk_backlog(self) -> int:
        """Bulk bytes not yet handed to QUIC."""
        return self._bulk_queued

    def _release_bulk(self) -> None:
        """Hand bulk bytes to aioquic while in flight + held stays under half the window."""
        if not self._bulk_queue or not self.admitted:
            return
        loss = self.quic._loss
        stream = self.quic._streams.get(BULK_STREAM)
        if stream is None and not self.is_client:
            return  # the site has not opened it yet
        held = 0 if stream is None else stream.sender._buffer_stop - stream.sender.next_offset  # not yet sent
        if self.bulk_window is None:
            room = self._bulk_queued
        else:
            room = min(loss.congestion_window // 2, self.bulk_window) - loss.bytes_in_flight - held
        while room > 0 and self._bulk_queue:
            head = self._bulk_queue[0]
            piece = head.frame.data[head.sent : head.sent + room]
            head.sent += len(piece)
            if head.sent == len(head.frame.data):
                self._bulk_queue.popleft()
                self._head_started = False
                head.frame.release()
            else:
                self._head_started = True
            self._bulk_queued -= len(piece)
            room -= len(piece)
            self.quic.send_stream_data(BULK_STREAM, piece)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, tuple[str, int]]]:
        self._release_bulk()
        out = [(data, (str(addr[0]), int(addr[1]))) for data, addr in self.quic.datagrams_to_send(now)]
        # What the congestion window held back: with the scheduler, bulk never leaves the
        # higher classes waiting (measured in tests/pianode/relay/test_relay_priority.py).
        if self.quic._datagrams_pending:
            self.counters["datagrams_waiting"] += 1
        control = self.quic._streams.get(CONTROL_STREAM)
        if control is not None and control.sender._buffer_stop > control.sender.next_offset:
            self.counters["control_waiting"] += 1
        return out

    def get_timer(self) -> float | None:
        timer = self.quic.get_timer()
        if self._deadline is not None and self.closed_reason is None and (timer is None or self._deadline[0] < timer):
            return self._deadline[0]
        return timer

    def close(self, reason: str, *, refused: bool) -> None:
        """Close with *reason*, which goes to the peer as one short printable line (a long one
        would not fit the packet of the close), and is kept whole in ``closed_reason``."""
        if self.closed_reason is None:
            self.closed_reason = f"refused the {self.peer_label}: {reason}" if refused else reason
        if refused:
            self.quic.close(error_code=REFUSED, frame_type=_CRYPTO_FRAME, reason_phrase=one_line(reason))
        else:
            self.quic.close(error_code=0, reason_phrase=one_line(reason))
