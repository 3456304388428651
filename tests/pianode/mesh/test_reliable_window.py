"""ReliableWindow (spec §5.8) through a deterministic lossy, duplicating, reordering channel."""

from __future__ import annotations

import hashlib
import heapq
import json
import zlib
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pianode.mesh.reliable import (
    MessageTooLarge,
    ReliableWindow,
    SendBufferFull,
    WindowConfig,
    WindowFailed,
)
from protocols.errors import DecodeError
from protocols.pia.reliable import (
    LegacyWindowHeader,
    Segment,
    WindowFlag,
    WindowHeader517,
    WindowHeader529,
    WindowLayout,
    decode_bulk_ack,
    decode_segment,
    encode_segment,
    sequence_bits,
)

DATA = WindowFlag.HAS_PAYLOAD
WHOLE = int(WindowFlag.HAS_PAYLOAD | WindowFlag.FIRST_FRAGMENT | WindowFlag.LAST_FRAGMENT)


class Link:
    """One direction of a fake network; every packet's fate is a keyed hash of (seed, link, index)."""

    def __init__(
        self, seed: int, name: str, *, loss: float = 0.0, dup: float = 0.0, latency: float = 0.02, jitter: float = 0.0
    ) -> None:
        self.seed, self.name = seed, name
        self.loss, self.dup, self.latency, self.jitter = loss, dup, latency, jitter
        self.count = 0
        self.drop_first: set[int] = set()  # explicit loss pattern by packet index

    def _u(self, n: int, k: int) -> float:
        h = hashlib.blake2b(f"{self.seed}/{self.name}/{n}/{k}".encode(), digest_size=8).digest()
        return int.from_bytes(h, "big") / 2**64

    def transmit(self, raw: bytes, now: float) -> list[tuple[float, bytes]]:
        n = self.count
        self.count += 1
        if n in self.drop_first or self._u(n, 0) < self.loss:
            return []
        out = [(now + self.latency + self._u(n, 1) * self.jitter, raw)]
        if self._u(n, 2) < self.dup:
            out.append((now + self.latency + self._u(n, 3) * self.jitter * 2, raw))
        return out


class Pair:
    """Two windows joined by two links, driven by virtual time until both are quiet."""

    def __init__(self, cfg_a: WindowConfig, cfg_b: WindowConfig, ab: Link, ba: Link) -> None:
        self.a, self.b = ReliableWindow(cfg_a), ReliableWindow(cfg_b)
        self.links = {"a": ab, "b": ba}
        self.got: dict[str, list[bytes]] = {"a": [], "b": []}
        self.queue: dict[str, deque[bytes]] = {"a": deque(), "b": deque()}
        self.heap: list[tuple[float, int, str, bytes]] = []
        self.now = 0.0
        self.ticket = 0
        self.peak_buffered = 0
        self.peak_held = 0
        self.sent_log: list[tuple[float, str, Segment]] = []

    def windows(self) -> dict[str, ReliableWindow]:
        return {"a": self.a, "b": self.b}

    def run(self, expect_a: int, expect_b: int, *, max_steps: int = 200_000, max_time: float = 3600.0) -> None:
        w = self.windows()
        for _ in range(max_steps):
            for side, win in w.items():
                q = self.queue[side]
                while q and win.can_send(len(q[0])):
                    win.send(q.popleft(), self.now)
            for side, win in w.items():
                dst = "b" if side == "a" else "a"
                for raw in win.messages_to_send(self.now):
                    self.sent_log.append((self.now, side, decode_segment(raw, win.config.layout)))
                    for arrival, r in self.links[side].transmit(raw, self.now):
                        self.ticket += 1
                        heapq.heappush(self.heap, (arrival, self.ticket, dst, r))
                self.peak_buffered = max(self.peak_buffered, win.buffered)
                self.peak_held = max(self.peak_held, win.held)
            done = (
                len(self.got["b"]) >= expect_a
                and len(self.got["a"]) >= expect_b
                and not self.queue["a"]
                and not self.queue["b"]
                and self.a.idle()
                and self.b.idle()
            )
            if done or self.a.failed or self.b.failed:
                return
            times = [self.heap[0][0]] if self.heap else []
            times += [t for t in (self.a.get_timer(), self.b.get_timer()) if t is not None]
            if not times:
                return
            self.now = max(self.now, min(times))
            if self.now > max_time:
                return
            while self.heap and self.heap[0][0] <= self.now:
                _, _, dst, raw = heapq.heappop(self.heap)
                self.got[dst].extend(w[dst].receive_message(raw, self.now))
            for win in w.values():
                win.handle_timer(self.now)
        raise AssertionError("simulation did not settle")


def _messages(prefix: str, count: int, *, big_every: int = 0, big: int = 0) -> list[bytes]:
    out = []
    for i in range(count):
        body = f"{prefix}{i}:".encode()
        if big_every and i % big_every == 0:
            body += bytes((i + k) & 0xFF for k in range(big))
        out.append(body)
    return out


def _pair(seed: int, layout: WindowLayout = WindowLayout.V5_17, **link: float) -> Pair:
    cfg = WindowConfig(layout=layout, stream_id=2, max_payload=200)
    return Pair(cfg, cfg, Link(seed, "ab", **link), Link(seed, "ba", **link))


@pytest.mark.parametrize("layout", [WindowLayout.V5_12, WindowLayout.V5_17, WindowLayout.V5_29, WindowLayout.V7_0])
def test_lossy_duplicating_reordering_channel(layout: WindowLayout) -> None:
    p = _pair(7, layout, loss=0.2, dup=0.1, latency=0.02, jitter=0.03)
    msgs_a = _messages("a", 2500)
    msgs_b = _messages("b", 1500)
    p.queue["a"].extend(msgs_a)
    p.queue["b"].extend(msgs_b)
    p.run(len(msgs_a), len(msgs_b))
    assert p.got["b"] == msgs_a  # every message exactly once, in order
    assert p.got["a"] == msgs_b
    sa, sb = p.a.statistics(), p.b.statistics()
    assert sa.sent == len(msgs_a) and sb.sent == len(msgs_b)
    assert sa.acked == len(msgs_a) and sb.acked == len(msgs_b)
    assert sb.delivered == len(msgs_a) and sa.delivered == len(msgs_b)
    assert sa.retransmitted > 0 and sb.duplicates > 0 and sb.out_of_order > 0
    assert sa.rtt_samples > 0 and 0.03 < (p.a.rtt.smoothed or 0) < 0.2
    # Bounded buffers under 20% loss.
    assert p.peak_buffered <= WindowConfig().send_buffer
    assert p.peak_held <= p.a.config.receive_limit == (64 if layout is WindowLayout.V5_12 else 127)
    # Sequence ids crossed the wrap (start 0xF82F or 0xFFFFF82F, + 2500 segments).
    seqs = [s.header.sequence_id for _, side, s in p.sent_log if side == "a" and s.header.flags & DATA]
    assert max(seqs) == (1 << sequence_bits(layout)) - 1 and min(seqs) == 0
    assert not p.a.failed and not p.b.failed


def test_fragmentation_of_large_messages_under_loss() -> None:
    p = _pair(11, loss=0.15, dup=0.05, jitter=0.02)
    msgs = _messages("m", 300, big_every=3, big=5000)  # 5 KB messages: 26 segments of 200 bytes
    msgs.append(b"")  # an empty message is one segment
    p.queue["a"].extend(msgs)
    p.run(len(msgs), 0)
    assert p.got["b"] == msgs
    frags = [s for _, side, s in p.sent_log if side == "a" and s.header.flags & DATA]
    assert all(len(s.payload) <= 200 for s in frags)
    first_only = WindowFlag.HAS_PAYLOAD | WindowFlag.FIRST_FRAGMENT
    assert any(s.header.flags == first_only for s in frags)
    assert any(s.header.flags == WHOLE for s in frags)


def test_rollover_from_0xfff0() -> None:
    cfg = WindowConfig(layout=WindowLayout.V5_29, initial_sequence_id=0xFFF0)
    p = Pair(cfg, cfg, Link(3, "ab", loss=0.1, jitter=0.01), Link(3, "ba", loss=0.1, jitter=0.01))
    msgs = _messages("r", 100)
    p.queue["a"].extend(msgs)
    p.run(len(msgs), 0)
    assert p.got["b"] == msgs
    first = [s.header.sequence_id for _, side, s in p.sent_log if side == "a" and s.header.flags & DATA]
    assert first[:17] == [*range(0xFFF0, 0x10000), 0]
    # The last ack from b names the last id, 0xFFF0 + 99 mod 2^16.
    acks = [s for _, side, s in p.sent_log if side == "b" and not s.header.flags & DATA]
    assert decode_bulk_ack(acks[-1].payload).records[0].ack_id == (0xFFF0 + 99) & 0xFFFF


def test_backoff_timing_and_give_up_after_retries() -> None:
    w = ReliableWindow(WindowConfig(initial_rto=0.5, max_rto=4.0, backoff=2.0, max_retries=6, give_up_after=1000))
    w.send(b"hello", now=0.0)
    times = []
    now = 0.0
    for _ in range(50):
        if w.segments_to_send(now):
            times.append(now)
        t = w.get_timer()
        if t is None:
            break
        now = t
        w.handle_timer(now)
    # Retransmission intervals 0.5, 1, 2, then capped at 4; failure at the timeout after the 6th retry.
    assert times == [0.0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5]
    assert w.failed and "6 retransmissions" in (w.failure or "")
    assert now == 19.5
    assert w.statistics().retransmitted == 6
    with pytest.raises(WindowFailed):
        w.send(b"more", now)
    assert w.segments_to_send(now + 10) == [] and w.get_timer() is None


def test_give_up_after_time_limit() -> None:
    w = ReliableWindow(WindowConfig(initial_rto=0.5, max_rto=1.0, max_retries=100, give_up_after=5.0))
    w.send(b"x", 10.0)
    now = 10.0
    while not w.failed:
        w.segments_to_send(now)
        t = w.get_timer()
        assert t is not None
        now = t
        w.handle_timer(now)
    assert now == 15.0
    assert "unacknowledged for 5.0 s" in (w.failure or "")


def test_send_buffer_bound_is_an_error_and_changes_nothing() -> None:
    w = ReliableWindow(WindowConfig(max_payload=10, window_size=4, send_buffer=8, max_message_size=1000))
    w.send(bytes(50), 0.0)  # 5 segments
    assert w.can_send(30) and not w.can_send(31)
    with pytest.raises(SendBufferFull):
        w.send(bytes(31), 0.0)
    assert w.buffered == 5
    w.send(bytes(30), 0.0)
    assert w.buffered == 8
    with pytest.raises(SendBufferFull):
        w.send(b"", 0.0)
    with pytest.raises(MessageTooLarge):
        w.send(bytes(1001), 0.0)
    with pytest.raises(MessageTooLarge):
        ReliableWindow(WindowConfig(max_payload=10, window_size=4, send_buffer=8)).send(bytes(81), 0.0)
    # Only the window's worth goes out.
    assert len(w.segments_to_send(0.0)) == 4
    assert w.in_flight == 4


def _seg(seq: int, payload: bytes, *, flags: int = WHOLE, low: int = 0x100, stream: int = 0) -> Segment:
    return Segment(WindowHeader517(flags=flags, stream_id=stream, sequence_id=seq, lowest_pending=low), payload)


def test_duplicates_old_ids_and_ack_bitmap_of_early_arrivals() -> None:
    w = ReliableWindow(WindowConfig())
    # First segments 0x100, 0x101 lost; 0x102 and 0x104 arrive early.  lowest_pending = 0x100 tells us where to start.
    assert w.receive(_seg(0x102, b"c").header, b"c", 1.0) == []
    assert w.receive(_seg(0x104, b"e").header, b"e", 1.0) == []
    assert w.receive(_seg(0x104, b"e").header, b"e", 1.0) == []  # duplicate early arrival
    (ack,) = w.segments_to_send(1.0)
    assert not ack.header.flags & DATA
    rec = decode_bulk_ack(ack.payload).records[0]
    # Everything <= 0x0FF acknowledged; mask bit i = 0x100 + i → bits 2 and 4.
    assert (rec.stream_id, rec.ack_id, rec.mask) == (0, 0x0FF, 0b10100)
    assert rec.acknowledged() == [0x102, 0x104]
    assert w.receive(_seg(0x100, b"a").header, b"a", 1.1) == [b"a"]
    assert w.receive(_seg(0x101, b"b").header, b"b", 1.2) == [b"b", b"c"]
    assert w.receive(_seg(0x103, b"d").header, b"d", 1.3) == [b"d", b"e"]
    assert w.receive(_seg(0x101, b"b").header, b"b", 1.4) == []  # old id
    s = w.statistics()
    assert (s.delivered, s.duplicates, s.out_of_order) == (5, 2, 2)
    rec = decode_bulk_ack(w.segments_to_send(1.5)[0].payload).records[0]
    assert (rec.ack_id, rec.mask) == (0x104, 0)


def test_too_far_ahead_and_wrong_stream_dropped() -> None:
    w = ReliableWindow(WindowConfig(receive_buffer=10))
    assert w.receive(_seg(0x100 + 11, b"x").header, b"x", 0.0) == []
    assert w.statistics().out_of_window == 1
    assert w.receive(_seg(0x100, b"x", stream=5).header, b"x", 0.0) == []
    assert w.statistics().malformed == 1
    assert w.held == 0


def test_bad_and_bogus_acks_are_counted() -> None:
    w = ReliableWindow(WindowConfig(initial_sequence_id=0x10))
    w.send(b"a", 0.0)
    w.segments_to_send(0.0)
    hdr = WindowHeader517(flags=0, stream_id=0, sequence_id=0, lowest_pending=0)
    w.receive(hdr, b"\x00\x01", 0.1)  # not a whole record
    # Acknowledges 0x11, which was never sent.
    w.receive(hdr, bytes.fromhex("00 0011" + "00" * 16), 0.1)
    assert w.statistics().bad_acks == 2
    assert w.buffered == 1
    w.receive(hdr, bytes.fromhex("00 0010" + "00" * 16), 0.1)
    assert w.buffered == 0 and w.statistics().acked == 1 and w.idle()


def test_zlib_flag_and_fragment_rule_violations() -> None:
    w = ReliableWindow(WindowConfig(max_message_size=100))
    body = b"pia " * 20
    packed = zlib.compress(body)
    z = WHOLE | WindowFlag.ZLIB
    assert w.receive(_seg(0x100, packed, flags=z).header, packed, 0) == [body]
    assert w.receive(_seg(0x101, b"junk", flags=z).header, b"junk", 0) == []  # bad zlib
    bomb = zlib.compress(bytes(10_000))
    assert w.receive(_seg(0x102, bomb, flags=z).header, bomb, 0) == []  # inflates past the limit
    mid = int(DATA)  # continuation without a first fragment
    assert w.receive(_seg(0x103, b"m", flags=mid).header, b"m", 0) == []
    first = int(DATA | WindowFlag.FIRST_FRAGMENT)
    assert w.receive(_seg(0x104, b"f", flags=first).header, b"f", 0) == []
    assert w.receive(_seg(0x105, b"g", flags=first).header, b"g", 0) == []  # restarts: "f" abandoned
    last = int(DATA | WindowFlag.LAST_FRAGMENT)
    assert w.receive(_seg(0x106, b"h", flags=last).header, b"h", 0) == [b"gh"]
    assert w.statistics().malformed == 3 and w.statistics().oversized == 1  # the bomb is counted by its size


def test_messages_round_trip_through_the_529_codec() -> None:
    cfg = WindowConfig(layout=WindowLayout.V5_29, stream_id=9)
    a, b = ReliableWindow(cfg), ReliableWindow(cfg)
    a.send(b"one", 0.0)
    (raw,) = a.messages_to_send(0.0)
    seg = decode_segment(raw, "5.29")
    assert seg.header == WindowHeader529(flags=WHOLE, stream_id=9, sequence_id=0xF82F, lowest_pending=0xF82F)
    assert encode_segment(seg, "5.29") == raw
    assert b.receive_message(raw, 0.01) == [b"one"]
    (ack,) = b.messages_to_send(0.01)
    assert a.receive_message(ack, 0.02) == []
    assert a.idle() and a.rtt.latest == pytest.approx(0.02)


def test_ack_delay_and_piggyback() -> None:
    cfg = WindowConfig(ack_delay=0.05)
    a, b = ReliableWindow(cfg), ReliableWindow(cfg)
    a.send(b"x", 0.0)
    (raw,) = a.messages_to_send(0.0)
    b.receive_message(raw, 0.0)
    assert b.messages_to_send(0.01) == []  # in order: the ack waits for ack_delay
    assert b.get_timer() == pytest.approx(0.05)
    b.send(b"reply", 0.02)
    out = b.segments_to_send(0.02)  # data goes out, so the owed ack rides along
    assert [bool(s.header.flags & DATA) for s in out] == [False, True]


@settings(max_examples=25, deadline=None)
@given(
    st.sets(st.integers(0, 400), max_size=150),
    st.sets(st.integers(0, 400), max_size=150),
    st.integers(0, 2**16),
    st.integers(1, 60),
)
def test_random_loss_patterns(drop_ab: set[int], drop_ba: set[int], seed: int, count: int) -> None:
    cfg = WindowConfig(max_payload=8, window_size=8, initial_sequence_id=seed & 0xFFFF, max_retries=50)
    ab = Link(seed, "ab", jitter=0.03, dup=0.1)
    ba = Link(seed, "ba", jitter=0.03, dup=0.1)
    ab.drop_first, ba.drop_first = drop_ab, drop_ba
    p = Pair(cfg, cfg, ab, ba)
    msgs = _messages("h", count, big_every=4, big=20)
    p.queue["a"].extend(msgs)
    p.queue["b"].extend(msgs[: count // 2])
    p.run(count, count // 2)
    assert p.got["b"] == msgs
    assert p.got["a"] == msgs[: count // 2]


# -- <=5.12 layout against real 3.x traffic (shared/captures mgba frames) -----------------


def _capture_payload(captures, name: str, protocol: int, port: int) -> bytes:
    doc = json.loads((captures / "mgba-uds-frames.expected.json").read_text())
    (frame,) = [f for f in doc["frames"] if f["name"] == name]
    (msg,) = [m for m in frame["pia"]["messages"] if (m["protocol_type"], m["protocol_port"]) == (protocol, port)]
    return bytes.fromhex(msg["payload_hex"])


def test_legacy_window_reproduces_the_captured_mesh_update_and_ack(captures) -> None:
    update = _capture_payload(captures, "join 12", 0x0200, 1)
    ack = _capture_payload(captures, "join 13", 0x0200, 1)
    cfg = WindowConfig(layout=WindowLayout.V5_12)
    host, joiner = ReliableWindow(cfg), ReliableWindow(cfg)
    host.send(update[24:], now=0.318)
    # The host's first reliable segment, byte for byte: flags 3, seq = ack = 0xFFFFF82F.
    assert host.messages_to_send(0.318) == [update]
    assert joiner.receive_message(update, 0.330) == [update[24:]]
    # The joiner's pure ack, byte for byte: flags 0, seq 0, ack id = next expected 0xFFFFF830.
    assert joiner.messages_to_send(0.335) == [ack]
    assert host.receive_message(ack, 0.350) == []
    assert host.idle() and host.statistics().acked == 1


def test_legacy_window_reads_the_captured_host_window(captures) -> None:
    doc = json.loads((captures / "mgba-uds-frames.expected.json").read_text())
    (frame,) = [f for f in doc["frames"] if f["name"] == "host window"]
    raws = [bytes.fromhex(m["payload_hex"]) for m in frame["pia"]["messages"]]
    # A joiner that has delivered everything before 0xFFFFF87A (frames in between are not in the capture).
    w = ReliableWindow(WindowConfig(layout=WindowLayout.V5_12, initial_sequence_id=0xFFFFF87A))
    got = [m for raw in raws for m in w.receive_message(raw, 18.5)]
    assert got == [decode_segment(raw, "3.10").payload for raw in raws]
    assert len(got) == 25
    (pure_ack,) = w.segments_to_send(18.5)
    assert pure_ack.header == LegacyWindowHeader(flags=0, sequence_id=0, ack_id=0xFFFFF87A + 25)


def test_legacy_fragments_end_with_flag_2_and_bitmap_acks() -> None:
    cfg = WindowConfig(layout=WindowLayout.V5_12, max_payload=4)
    a, b = ReliableWindow(cfg), ReliableWindow(cfg)
    a.send(b"0123456789", 0.0)
    segs = a.segments_to_send(0.0)
    assert [s.header.flags for s in segs] == [1, 1, 3]  # flag 2 marks the end of the message
    assert [s.header.sequence_id for s in segs] == [0xFFFFF82F, 0xFFFFF830, 0xFFFFF831]
    # Only the last fragment arrives: b holds it and reports it in the bitmap (bit k = ack id + 1 + k).
    assert b.receive(segs[2].header, segs[2].payload, 0.01) == []
    (ack,) = b.segments_to_send(0.01)
    assert ack.header == LegacyWindowHeader(flags=0, sequence_id=0, ack_id=0xFFFFF82F, ack_bitmap=0b10)
    a.receive(ack.header, ack.payload, 0.02)
    assert a.buffered == 2 and a.statistics().acked == 1
    assert b.receive(segs[0].header, segs[0].payload, 0.03) == []
    assert b.receive(segs[1].header, segs[1].payload, 0.03) == [b"0123456789"]
    # b's next data segment piggybacks the cumulative ack; no separate ack is needed.
    b.send(b"r", 0.04)
    (data,) = b.segments_to_send(0.04)
    assert data.header.ack_id == 0xFFFFF832 and data.header.flags == 3
    a.receive(data.header, data.payload, 0.05)
    assert a.buffered == 0


@pytest.mark.parametrize("fast", [3, 0])
def test_fast_retransmit_on_later_acks(fast: int) -> None:
    cfg = WindowConfig(min_rto=0.5, fast_retransmit=fast)
    a, b = ReliableWindow(cfg), ReliableWindow(cfg)
    # One exchange gives a an RTT sample of 0.1 s (smoothed 0.1, deviation 0.05, RTO floor 0.5).
    a.send(b"warm-up", 0.0)
    for seg in a.segments_to_send(0.0):
        b.receive(seg.header, seg.payload, 0.05)
    for seg in b.segments_to_send(0.05):
        a.receive(seg.header, seg.payload, 0.1)
    assert a.rtt.smoothed == pytest.approx(0.1) and a.rtt.rto == 0.5
    for i in range(10):
        a.send(b"m%d" % i, 1.0)
    segs = a.segments_to_send(1.0)
    for seg in segs[1:]:  # the first one is lost
        b.receive(seg.header, seg.payload, 1.05)
    (ack,) = b.segments_to_send(1.05)
    a.receive(ack.header, ack.payload, 1.2)  # 0.2 s after sending >= 0.1 + 0.05
    again = a.segments_to_send(1.2)
    if fast:
        assert [s.header.sequence_id for s in again] == [segs[0].header.sequence_id]
        assert a.statistics().fast_retransmits == 1
    else:
        assert again == []  # waits for the timeout at 1.5
        assert [s.header.sequence_id for s in a.segments_to_send(1.5)] == [segs[0].header.sequence_id]


def test_ack_records_fill_the_documented_32() -> None:
    a, b = ReliableWindow(WindowConfig()), ReliableWindow(WindowConfig(ack_records=32))
    a.send(b"x", 0.0)
    (seg,) = a.segments_to_send(0.0)
    b.receive(seg.header, seg.payload, 0.1)
    (ack,) = b.segments_to_send(0.1)
    assert len(ack.payload) == 32 * 19  # the 5.18 size (spec §5.8)
    assert len(set(decode_bulk_ack(ack.payload).records)) == 1
    a.receive(ack.header, ack.payload, 0.2)
    assert a.idle() and a.statistics().acked == 1


@st.composite
def _garbage_segment(draw: st.DrawFn) -> tuple[WindowHeader517, bytes]:
    flags = draw(st.integers(0, 0xFF))
    header = WindowHeader517(
        flags=flags,
        stream_id=draw(st.sampled_from([0, 0, 0, 1])),
        sequence_id=draw(st.one_of(st.integers(0xF820, 0xF8A0), st.integers(0, 0xFFFF))),
        lowest_pending=draw(st.one_of(st.just(0xF82F), st.integers(0, 0xFFFF))),
    )
    if flags & DATA:
        payload = draw(st.binary(max_size=40))
    else:
        payload = draw(st.one_of(st.binary(max_size=60), st.builds(lambda k: bytes(19 * k), st.integers(0, 3))))
    return header, payload


@settings(max_examples=80, deadline=None)
@given(st.lists(_garbage_segment(), max_size=200))
def test_garbage_segments_never_raise_and_stay_bounded(segments: list[tuple[WindowHeader517, bytes]]) -> None:
    cfg = WindowConfig(receive_buffer=20, max_message_size=100)
    w = ReliableWindow(cfg)
    w.send(b"ours", 0.0)
    assert len(w.segments_to_send(0.0)) == 1
    now = 0.0
    for header, payload in segments:
        now += 0.01
        for message in w.receive(header, payload, now):
            assert len(message) <= 100
        w.segments_to_send(now)
        assert w.held <= 20
        timer = w.get_timer()
        assert timer is None or timer > now  # nothing left due: a driver never spins
    assert w.statistics().sent == 1


def test_config_for_version() -> None:
    assert WindowConfig.for_version("5.18").layout is WindowLayout.V5_17
    assert WindowConfig.for_version("5.29", stream_id=3).stream_id == 3
    assert WindowConfig.for_version("5.10").first_sequence_id == 0xFFFFF82F
    assert WindowConfig.for_version("5.43").first_sequence_id == 0xF82F
    with pytest.raises(ValueError, match="5.14"):
        WindowConfig.for_version("5.14")
    with pytest.raises(ValueError, match="receive_buffer"):
        WindowConfig(layout=WindowLayout.V5_12, receive_buffer=65)


# -- the plain-int paths against the attrs-valued ones -------------------------------------
# messages_to_send / receive_message encode and decode from plain ints; segments_to_send +
# encode_segment and decode_segment + receive go through header values.  Two pairs of
# windows driven by the same operations, one pair on each path, must agree on every byte
# sent, every message delivered, and every counter, timer and state after each step.

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(0, 1), st.sampled_from([0, 1, 40, 200, 201, 450])),
        # exchange: both sides output, then everything queued arrives except the lost ones
        st.tuples(st.just("exchange"), st.integers(0, 2**12 - 1)),
        st.tuples(st.just("tick"), st.sampled_from([0.0, 0.02, 0.3, 1.0, 5.0])),
        st.tuples(st.just("junk"), st.integers(0, 1), st.binary(max_size=30)),
    ),
    max_size=30,
)
_VARIANTS = [
    {},
    {"ack_records": 32},
    {"ack_delay": 0.05},
    {"window_size": 2, "send_buffer": 6},
    {"max_retries": 1, "give_up_after": 3.0},
    {"max_message_size": 300},
]


class _PathDriver:
    """Two windows exchanging segments over one path (plain ints, or header values)."""

    def __init__(self, cfg: WindowConfig, *, plain: bool) -> None:
        self.w = [ReliableWindow(cfg), ReliableWindow(cfg)]
        self.plain = plain
        self.queue: list[list[bytes]] = [[], []]  # by destination side

    def output(self, side: int, now: float) -> list[bytes]:
        w = self.w[side]
        if self.plain:
            return w.messages_to_send(now)
        return [encode_segment(s, w.config.layout) for s in w.segments_to_send(now)]

    def input(self, side: int, raw: bytes, now: float) -> tuple[str, object]:
        w = self.w[side]
        try:
            if self.plain:
                return "delivered", w.receive_message(raw, now)
            seg = decode_segment(raw, w.config.layout)
            return "delivered", w.receive(seg.header, seg.payload, now)
        except DecodeError as exc:
            return "raised", (type(exc), str(exc))

    def step(self, op: tuple, now: float) -> object:
        if op[0] == "send":
            try:
                self.w[op[1]].send(bytes(i & 0xFF for i in range(op[2])), now)
            except (SendBufferFull, WindowFailed, MessageTooLarge) as exc:
                return type(exc)
            return None
        if op[0] == "exchange":
            result: list[object] = []
            for side in (0, 1):
                sent = self.output(side, now)
                self.queue[1 - side].extend(sent)
                result.append(sent)
            k = 0
            for side in (0, 1):
                arrived, self.queue[side] = self.queue[side], []
                for raw in arrived:
                    k += 1
                    if not op[1] >> k & 1:
                        result.append(self.input(side, raw, now))
            return result
        if op[0] == "tick":
            for w in self.w:
                w.handle_timer(now)
            return None
        return self.input(op[1], op[2], now)

    def state(self) -> list[object]:
        return [
            (w.statistics(), w.idle(), w.failure, w.get_timer(), w.in_flight, w.buffered, w.held) for w in self.w
        ]


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from([WindowLayout.V5_12, WindowLayout.V5_17, WindowLayout.V5_29, WindowLayout.V7_0]),
    st.sampled_from(_VARIANTS),
    _OPS,
)
def test_plain_int_paths_equal_header_value_paths(layout: WindowLayout, extra: dict, ops: list[tuple]) -> None:
    cfg = WindowConfig(layout=layout, max_payload=200, **extra)
    plain, values = _PathDriver(cfg, plain=True), _PathDriver(cfg, plain=False)
    now = 0.0
    for op in ops:
        if op[0] == "tick":
            now += op[1]
        assert plain.step(op, now) == values.step(op, now), op
        assert plain.state() == values.state(), op


def test_idle_window_outputs_nothing_and_has_no_timer() -> None:
    for layout in (WindowLayout.V5_12, WindowLayout.V5_17, WindowLayout.V5_29, WindowLayout.V7_0):
        a, b = ReliableWindow(WindowConfig(layout=layout)), ReliableWindow(WindowConfig(layout=layout))
        assert a.messages_to_send(0.0) == [] and a.get_timer() is None
        a.send(b"x", 0.0)
        assert a.get_timer() == 0.0  # queued: due at once
        (raw,) = a.messages_to_send(0.0)
        assert a.get_timer() == pytest.approx(a.config.initial_rto)  # in flight: its retransmission
        assert b.receive_message(raw, 0.01) == [b"x"]
        assert b.get_timer() == 0.01  # an ack is owed
        (ack,) = b.messages_to_send(0.01)
        assert b.idle() and b.get_timer() is None and b.messages_to_send(0.02) == []
        assert a.receive_message(ack, 0.02) == []
        assert a.idle() and a.get_timer() is None and a.messages_to_send(0.03) == []
        assert a.statistics().acked == 1 and b.statistics().acks_sent == 1


def test_config_is_fixed_for_the_windows_life() -> None:
    w = ReliableWindow(WindowConfig(stream_id=3))
    with pytest.raises(AttributeError):
        w.config = WindowConfig()  # type: ignore[misc]  # the hot paths keep copies of it
    assert w.config.stream_id == 3


def test_timer_with_nothing_in_flight_is_the_earlier_of_ack_and_queued_data() -> None:
    a, b = ReliableWindow(WindowConfig()), ReliableWindow(WindowConfig(ack_delay=0.05))
    a.send(b"x", 1.0)
    (raw,) = a.messages_to_send(1.0)
    b.receive_message(raw, 1.0)
    assert b.get_timer() == 1.05  # the delayed ack
    b.send(b"y", 1.01)
    assert b.get_timer() == 1.01  # new data is due first, and the ack rides with it
    assert len(b.messages_to_send(1.01)) == 2 and b.statistics().acks_sent == 1


def test_fragments_past_the_message_bound_are_dropped_while_reassembling() -> None:
    """A message whose fragments add up past max_message_size is dropped as soon as it passes the
    bound (the reassembly buffer never grows further); the next message is delivered."""
    w = ReliableWindow(WindowConfig(max_message_size=100))
    first = int(DATA | WindowFlag.FIRST_FRAGMENT)
    last = int(DATA | WindowFlag.LAST_FRAGMENT)
    assert w.receive(_seg(0x100, b"a" * 60, flags=first).header, b"a" * 60, 0) == []
    assert w.receive(_seg(0x101, b"b" * 60, flags=int(DATA)).header, b"b" * 60, 0) == []
    assert w.receive(_seg(0x102, b"c" * 10, flags=last).header, b"c" * 10, 0) == []
    assert w.statistics().oversized == 1 and w.oversized == 1
    assert w.receive(_seg(0x103, b"ok", flags=WHOLE).header, b"ok", 0) == [b"ok"]
