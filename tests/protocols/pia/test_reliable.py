"""Sliding-window segment codecs (spec §5.8) against real 3.x traffic, layout tables and properties."""

from __future__ import annotations

import json
import struct

import attrs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pia_type_strategies import u8, u16

from protocols.errors import ConfigError, DecodeError, EncodeError, ShortData, TrailingData
from protocols.pia import reliable as codec
from protocols.pia.reliable import (
    BULK_ACK_RECORD_SIZE,
    BULK_ACK_RECORDS,
    AckRecord,
    BulkAck,
    LegacyWindowHeader,
    Segment,
    WindowFlag,
    WindowHeader70,
    WindowHeader514,
    WindowHeader517,
    WindowHeader529,
    WindowLayout,
    decode_bulk_ack,
    decode_segment,
    decode_segment_fields,
    encode_ack_record,
    encode_bulk_ack,
    encode_segment,
    encode_segment_fields,
    find_ack_record,
    layout_for,
    sequence_bits,
)
from protocols.pia.versions import DOCUMENTED_VERSIONS, profile_for


def _window_messages(captures):
    """(frame name, from_host, protocol type, port, payload) of every sliding-window message in the mgba frames."""
    doc = json.loads((captures / "mgba-uds-frames.expected.json").read_text())
    out = []
    for frame in doc["frames"]:
        pia = frame["pia"]
        if pia is None:
            continue
        for m in pia["messages"]:
            # Mesh port 1 and protocol 0x3000 carry sliding-window segments (spec §5.4, §5.8).
            if (m["protocol_type"], m["protocol_port"]) in ((0x0200, 1), (0x3000, 0)):
                out.append((frame["name"], frame["from_host"], bytes.fromhex(m["payload_hex"])))
    return out


def test_capture_segments_decode_and_reencode_byte_exact(captures) -> None:
    msgs = _window_messages(captures)
    assert len(msgs) == 30  # 2 mesh port-1 messages + 28 protocol 0x3000 messages
    for _name, _host, raw in msgs:
        seg = decode_segment(raw, "3.10")
        assert isinstance(seg.header, LegacyWindowHeader)
        assert encode_segment(seg, "3.10") == raw
        # payload size field at offset 2 equals the payload carried
        assert struct.unpack_from(">H", raw, 2)[0] == len(seg.payload)


def test_capture_mesh_update_and_its_ack(captures) -> None:
    msgs = {name: (host, raw) for name, host, raw in _window_messages(captures)}
    update = decode_segment(msgs["join 12"][1], "3.10")
    # Host's first reliable segment: sequence and ack ids both start at 0xFFFFF82F (spec §5.8 NC-old).
    assert update.header == LegacyWindowHeader(flags=3, sequence_id=0xFFFFF82F, ack_id=0xFFFFF82F)
    assert update.payload[0] == 0x20  # an Update mesh message (spec §5.4)
    assert len(update.payload) == 124
    ack = decode_segment(msgs["join 13"][1], "3.10")
    # The joiner's pure ack: flags 0, no payload, ack id = next expected = update's id + 1.
    assert ack.header == LegacyWindowHeader(flags=0, sequence_id=0, ack_id=0xFFFFF830)
    assert ack.payload == b""


def test_capture_host_window_is_consecutive(captures) -> None:
    segs = [decode_segment(raw, "3.10") for name, _h, raw in _window_messages(captures) if name == "host window"]
    assert len(segs) == 25
    ids = [s.header.sequence_id for s in segs]
    assert ids == list(range(0xFFFFF87A, 0xFFFFF87A + 25))
    # One packet: the same cumulative ack in every segment, all complete single-fragment messages.
    assert {s.header.ack_id for s in segs} == {0xFFFFF90F}
    assert {s.header.flags for s in segs} == {WindowFlag.HAS_PAYLOAD | WindowFlag.FIRST_FRAGMENT}


@pytest.mark.parametrize(
    ("version", "layout"),
    [
        ("3.3", WindowLayout.V5_12),
        ("4.10", WindowLayout.V5_12),
        ("5.10", WindowLayout.V5_12),
        ("5.12", WindowLayout.V5_12),
        ("5.13", WindowLayout.V5_12),
        ("5.14", WindowLayout.V5_14),
        ("5.15", WindowLayout.V5_14),
        ("5.16", WindowLayout.V5_17),
        ("5.17", WindowLayout.V5_17),
        ("5.18", WindowLayout.V5_17),
        ("5.19", WindowLayout.V5_17),
        ("5.26", WindowLayout.V5_17),
        ("5.27", WindowLayout.V5_29),
        ("5.29", WindowLayout.V5_29),
        ("5.43", WindowLayout.V5_29),
        ("5.45", WindowLayout.V5_29),
        ("6.30", WindowLayout.V5_29),
        ("6.32", WindowLayout.V7_0),
        ("7.0", WindowLayout.V7_0),
        ("7.2", WindowLayout.V7_0),
    ],
)
def test_layout_for_versions(version: str, layout: WindowLayout) -> None:
    assert layout_for(version) is layout


def test_layout_for_accepts_profiles() -> None:
    assert layout_for(profile_for("5.18")) is WindowLayout.V5_17
    assert layout_for(profile_for("5.29")) is WindowLayout.V5_29
    assert all(isinstance(layout_for(profile_for(v)), WindowLayout) for v in DOCUMENTED_VERSIONS)
    assert sequence_bits(WindowLayout.V5_12) == 32
    assert sequence_bits(WindowLayout.V5_29) == 16


# Hand-assembled layouts from the §5.8 table.
_TABLE = [
    (
        WindowLayout.V5_14,
        WindowHeader514(flags=7, sequence_id=0x1234, unknown1=b"ABCDEFGH", unknown2=b"12345678"),
        b"xy",
        bytes.fromhex("0007 0002 1234") + b"ABCDEFGH12345678xy",
    ),
    (
        WindowLayout.V5_17,
        WindowHeader517(flags=7, stream_id=3, sequence_id=0xFFFF, lowest_pending=0xFFF0, multicast_ids=(1, 2)),
        b"abc",
        bytes.fromhex("07 03 0003 ffff fff0 02 0000000000000001 0000000000000002") + b"abc",
    ),
    (
        WindowLayout.V5_29,
        WindowHeader529(
            flags=1, stream_id=0, sequence_id=5, lowest_pending=4, destination_count=4, destination_bitmap=0xA
        ),
        b"",
        bytes.fromhex("01 00 0000 0005 0004 04 0000000a"),
    ),
    (
        WindowLayout.V5_29,
        WindowHeader529(flags=0, stream_id=9, sequence_id=5, lowest_pending=4),
        b"z",
        bytes.fromhex("00 09 0001 0005 0004 00") + b"z",
    ),
    (
        WindowLayout.V7_0,
        WindowHeader70(flags=0x41, sequence_id=1, lowest_pending=2, destination_words=(0xDEADBEEF,)),
        b"q",
        bytes.fromhex("41 0001 0001 0002 01 deadbeef") + b"q",
    ),
]


@pytest.mark.parametrize(("layout", "header", "payload", "raw"), _TABLE)
def test_table_layouts(layout: WindowLayout, header: object, payload: bytes, raw: bytes) -> None:
    seg = Segment(header, payload)  # type: ignore[arg-type]
    assert encode_segment(seg, layout) == raw
    assert decode_segment(raw, layout) == seg


def test_529_header_is_9_or_13_bytes() -> None:
    # spec §10.3: KW's "8 or 12 bytes" contradicts its table; we follow the table.
    empty = encode_segment(Segment(WindowHeader529(1, 0, 0, 0)), WindowLayout.V5_29)
    assert len(empty) == 9
    one = encode_segment(Segment(WindowHeader529(1, 0, 0, 0, 32, 0xFFFFFFFF)), WindowLayout.V5_29)
    assert len(one) == 13


def test_size_mismatch_errors() -> None:
    raw = encode_segment(Segment(WindowHeader517(1, 0, 1, 1), b"abcd"), "5.18")
    with pytest.raises(ShortData):
        decode_segment(raw[:-1], "5.18")
    with pytest.raises(TrailingData):
        decode_segment(raw + b"\0", "5.18")
    with pytest.raises(ShortData):
        decode_segment(raw[:5], "5.18")


def test_encode_rejects_wrong_header_type_and_overflow() -> None:
    with pytest.raises(EncodeError):
        encode_segment(Segment(WindowHeader517(1, 0, 1, 1)), "5.29")
    with pytest.raises(EncodeError):
        encode_segment(Segment(WindowHeader529(1, 0, 0x10000, 1)), "5.29")
    with pytest.raises(EncodeError):
        encode_segment(Segment(WindowHeader529(1, 0, 1, 1, 1, 1 << 32)), "5.29")
    with pytest.raises(EncodeError):
        encode_segment(Segment(WindowHeader517(1, 0, 1, 1), bytes(0x10000)), "5.18")
    with pytest.raises(EncodeError):
        encode_segment(Segment(WindowHeader514(1, 1, b"short")), "5.14")


def test_bulk_ack_5_18_form() -> None:
    records = tuple(AckRecord(stream_id=i, ack_id=(0xFFF0 + i) & 0xFFFF, mask=1 << i) for i in range(BULK_ACK_RECORDS))
    raw = encode_bulk_ack(BulkAck(records))
    assert len(raw) == 32 * 19 == BULK_ACK_RECORDS * BULK_ACK_RECORD_SIZE
    assert raw[:19] == bytes.fromhex("00 fff0") + (1).to_bytes(16, "big")
    assert decode_bulk_ack(raw) == BulkAck(records)
    assert BulkAck(records).for_stream(5) == records[5]
    assert BulkAck(records).for_stream(200) is None


def test_ack_record_mask_bits_wrap() -> None:
    rec = AckRecord(stream_id=0, ack_id=0xFFFE, mask=0b1011)
    # bit i acknowledges ack_id + 1 + i, mod 2^16
    assert rec.acknowledged() == [0xFFFF, 0x0000, 0x0002]
    assert AckRecord(0, 7, 1 << 127).acknowledged() == [7 + 128]


def test_bulk_ack_bad_lengths() -> None:
    with pytest.raises(ShortData):
        decode_bulk_ack(bytes(20))
    assert decode_bulk_ack(b"") == BulkAck(())


# -- properties ------------------------------------------------------------------

payloads = st.binary(max_size=64)


@st.composite
def segments(draw: st.DrawFn) -> tuple[WindowLayout, Segment]:
    layout = draw(st.sampled_from(list(WindowLayout)))
    header: object
    if layout is WindowLayout.V5_12:
        header = LegacyWindowHeader(
            flags=draw(u16),
            sequence_id=draw(st.integers(0, 2**32 - 1)),
            ack_id=draw(st.integers(0, 2**32 - 1)),
            ack_bitmap=draw(st.integers(0, 2**64 - 1)),
            reserved=draw(st.integers(0, 2**32 - 1)),
        )
    elif layout is WindowLayout.V5_14:
        eight = st.binary(min_size=8, max_size=8)
        header = WindowHeader514(draw(u16), draw(u16), draw(eight), draw(eight))
    elif layout is WindowLayout.V5_17:
        header = WindowHeader517(
            draw(u8), draw(u8), draw(u16), draw(u16), tuple(draw(st.lists(st.integers(0, 2**64 - 1), max_size=4)))
        )
    elif layout is WindowLayout.V5_29:
        n = draw(st.integers(0, 80))
        bitmap = draw(st.integers(0, 2 ** (32 * ((n + 31) // 32)) - 1))
        header = WindowHeader529(draw(u8), draw(u8), draw(u16), draw(u16), n, bitmap)
    else:
        words = tuple(draw(st.lists(st.integers(0, 2**32 - 1), max_size=4)))
        header = WindowHeader70(draw(u8), draw(u16), draw(u16), words)
    return layout, Segment(header, draw(payloads))  # type: ignore[arg-type]


@settings(max_examples=300)
@given(segments())
def test_segment_round_trip(case: tuple[WindowLayout, Segment]) -> None:
    layout, seg = case
    raw = encode_segment(seg, layout)
    assert decode_segment(raw, layout) == seg


@settings(max_examples=300)
@given(st.sampled_from(list(WindowLayout)), st.binary(max_size=80))
def test_garbage_is_value_or_decode_error(layout: WindowLayout, data: bytes) -> None:
    try:
        seg = decode_segment(data, layout)
    except DecodeError:
        return
    assert encode_segment(seg, layout) == data


@settings(max_examples=200)
@given(segments(), st.data())
def test_mutated_segments(case: tuple[WindowLayout, Segment], data: st.DataObject) -> None:
    layout, seg = case
    raw = bytearray(encode_segment(seg, layout))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] = data.draw(u8)
    cut = data.draw(st.integers(0, len(raw)))
    try:
        back = decode_segment(bytes(raw[:cut]), layout)
    except DecodeError:
        return
    assert encode_segment(back, layout) == bytes(raw[:cut])


@settings(max_examples=200)
@given(st.lists(st.builds(AckRecord, u8, u16, st.integers(0, 2**128 - 1)), max_size=40))
def test_bulk_ack_round_trip(records: list[AckRecord]) -> None:
    ack = BulkAck(tuple(records))
    assert decode_bulk_ack(encode_bulk_ack(ack)) == ack


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_bulk_ack_garbage(data: bytes) -> None:
    try:
        ack = decode_bulk_ack(data)
    except DecodeError:
        return
    assert encode_bulk_ack(ack) == data


def test_segment_unpacks_as_header_and_payload() -> None:
    header = WindowHeader529(1, 0, 2, 3)
    h, p = Segment(header, b"data")
    assert (h, p) == (header, b"data")


# -- fast paths against the general code ---------------------------------------------
# The struct fast paths must be invisible: same bytes, same values, and for bad input
# the same error (type and message) as the field-by-field Reader/Writer code.


def _outcome(fn, *args):
    """A call's result, or the type and text of what it raised."""
    try:
        return ("value", fn(*args))
    except Exception as exc:  # compared, not swallowed: both sides must agree
        return ("raised", type(exc), str(exc))


# Mostly in range, sometimes just out of it, so the fallback for unfit values runs.
def _field(bits: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, 2**bits - 1), st.sampled_from([-1, 2**bits, 2**bits + 1]))


@st.composite
def fast_shaped_segments(draw: st.DrawFn) -> tuple[WindowLayout, Segment]:
    """Segments of the fast-path shapes (no receivers), fields sometimes out of range."""
    layout = draw(st.sampled_from([WindowLayout.V5_12, WindowLayout.V5_17, WindowLayout.V5_29, WindowLayout.V7_0]))
    header: object
    if layout is WindowLayout.V5_12:
        f16, f32, f64 = _field(16), _field(32), _field(64)
        header = LegacyWindowHeader(draw(f16), draw(f32), draw(f32), draw(f64), draw(f32))
    elif layout is WindowLayout.V5_17:
        header = WindowHeader517(draw(_field(8)), draw(_field(8)), draw(_field(16)), draw(_field(16)))
    elif layout is WindowLayout.V5_29:
        # A zero count with a stray bitmap cannot be encoded; the fast path must say so too.
        stray = draw(st.sampled_from([0, 0, 1]))
        header = WindowHeader529(draw(_field(8)), draw(_field(8)), draw(_field(16)), draw(_field(16)), 0, stray)
    else:
        header = WindowHeader70(draw(_field(8)), draw(_field(16)), draw(_field(16)))
    return layout, Segment(header, draw(payloads))  # type: ignore[arg-type]


any_segments = st.one_of(segments(), fast_shaped_segments())


@settings(max_examples=300)
@given(any_segments)
def test_fast_encode_equals_general_encode(case: tuple[WindowLayout, Segment]) -> None:
    layout, seg = case
    fast = _outcome(encode_segment, seg, layout)
    assert fast == _outcome(codec._encode_segment_general, seg.header, seg.payload, layout)
    if fast[0] == "value":
        # and the decode of those bytes is the same value on both paths, equal to the input
        assert decode_segment(fast[1], layout) == codec._decode_segment_general(fast[1], layout) == seg


@settings(max_examples=300)
@given(st.sampled_from(list(WindowLayout)), st.binary(max_size=40), st.data())
def test_fast_decode_equals_general_decode_on_garbage(layout: WindowLayout, data: bytes, draw: st.DataObject) -> None:
    # Garbage often has a zero count byte and a size field near the length: force it sometimes.
    if draw.draw(st.booleans()) and len(data) >= 9:
        head = {WindowLayout.V5_12: 24, WindowLayout.V7_0: 8}.get(layout, 9)
        if len(data) >= head:
            raw = bytearray(data)
            raw[head - 1] = 0 if layout is not WindowLayout.V5_12 else raw[head - 1]
            size_at = 1 if layout is WindowLayout.V7_0 else 2
            struct.pack_into(">H", raw, size_at, len(raw) - head + draw.draw(st.sampled_from([0, 0, -1, 1])) & 0xFFFF)
            data = bytes(raw)
    fast = _outcome(decode_segment, data, layout)
    assert fast == _outcome(codec._decode_segment_general, data, layout)
    if fast[0] == "raised":
        assert issubclass(fast[1], DecodeError)


@settings(max_examples=200)
@given(any_segments, st.data())
def test_fast_decode_equals_general_decode_on_mutations(
    case: tuple[WindowLayout, Segment], data: st.DataObject
) -> None:
    layout, seg = case
    try:
        raw = bytearray(encode_segment(seg, layout))
    except EncodeError:
        return
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] = data.draw(u8)
    cut = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    fast = _outcome(decode_segment, cut, layout)
    assert fast == _outcome(codec._decode_segment_general, cut, layout)
    assert fast[0] == "value" or issubclass(fast[1], DecodeError)


@pytest.mark.parametrize("layout", [WindowLayout.V5_12, WindowLayout.V5_17, WindowLayout.V5_29, WindowLayout.V7_0])
def test_payload_too_long_for_the_size_field_same_error_on_every_path(layout: WindowLayout) -> None:
    header = {
        WindowLayout.V5_12: LegacyWindowHeader(1, 2, 3),
        WindowLayout.V5_17: WindowHeader517(1, 0, 2, 3),
        WindowLayout.V5_29: WindowHeader529(1, 0, 2, 3),
        WindowLayout.V7_0: WindowHeader70(1, 2, 3),
    }[layout]
    big = bytes(0x10000)  # one byte more than the u16 payload-size field holds
    fast = _outcome(encode_segment, Segment(header, big), layout)
    assert fast[:2] == ("raised", EncodeError)
    assert fast == _outcome(codec._encode_segment_general, header, big, layout)
    if layout is not WindowLayout.V5_12:
        assert _outcome(encode_segment_fields, 1, 0, 2, 3, big, layout) == fast


def test_decode_accepts_bytearray_and_memoryview_like_the_reader() -> None:
    raw = encode_segment(Segment(WindowHeader529(7, 1, 2, 3), b"abc"), "5.29")
    for data in (bytearray(raw), memoryview(raw)):
        seg = decode_segment(data, "5.29")
        assert type(seg.payload) is bytes and seg == decode_segment(raw, "5.29")
        assert decode_segment_fields(data, "5.29") == (7, 1, 2, 3, b"abc")


_FIELD_LAYOUTS = [WindowLayout.V5_17, WindowLayout.V5_29, WindowLayout.V7_0]


def _fields_of(seg: Segment) -> tuple[int, int | None, int, int, bytes]:
    h = seg.header
    stream = getattr(h, "stream_id", None)
    return h.flags, stream, h.sequence_id, h.lowest_pending, seg.payload  # type: ignore[union-attr]


@settings(max_examples=300)
@given(any_segments, st.data())
def test_decode_segment_fields_equals_decode_segment(case: tuple[WindowLayout, Segment], data: st.DataObject) -> None:
    layout, seg = case
    try:
        raw = bytearray(encode_segment(seg, layout))
    except EncodeError:
        return
    if data.draw(st.booleans()):  # and a mutated, maybe cut, copy
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(u8)
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    raw = bytes(raw)
    if layout not in _FIELD_LAYOUTS:
        with pytest.raises(ConfigError):
            decode_segment_fields(raw, layout)
        return
    whole = _outcome(decode_segment, raw, layout)
    fields = _outcome(decode_segment_fields, raw, layout)
    assert fields == (whole if whole[0] == "raised" else ("value", _fields_of(whole[1])))


@settings(max_examples=300)
@given(fast_shaped_segments())
def test_encode_segment_fields_equals_encode_segment(case: tuple[WindowLayout, Segment]) -> None:
    layout, seg = case
    if layout not in _FIELD_LAYOUTS:
        with pytest.raises(ConfigError):
            encode_segment_fields(seg.header.flags, 0, seg.header.sequence_id, 0, seg.payload, layout)
        return
    flags, stream, seq, low, payload = _fields_of(seg)
    if isinstance(seg.header, WindowHeader529) and seg.header.destination_bitmap:
        seg = Segment(attrs.evolve(seg.header, destination_bitmap=0), payload)  # the fields form has no bitmap
    out = _outcome(encode_segment_fields, flags, stream, seq, low, payload, layout)
    assert out == _outcome(encode_segment, seg, layout)
    if out[0] == "value":
        assert encode_segment_fields(*decode_segment_fields(out[1], layout), layout) == out[1]
    else:
        assert out[1] is EncodeError


def test_fields_form_of_a_7_0_segment_has_no_stream_id() -> None:
    raw = encode_segment_fields(WHOLE_FLAGS, 99, 0x1234, 0x1200, b"x", "7.0")  # 7.0 has no stream id to carry it
    assert raw == encode_segment(Segment(WindowHeader70(WHOLE_FLAGS, 0x1234, 0x1200), b"x"), "7.0")
    assert decode_segment_fields(raw, "7.0") == (WHOLE_FLAGS, None, 0x1234, 0x1200, b"x")


WHOLE_FLAGS = int(WindowFlag.HAS_PAYLOAD | WindowFlag.FIRST_FRAGMENT | WindowFlag.LAST_FRAGMENT)


def _reference_bulk_ack(data: bytes) -> list[tuple[int, int, int]]:
    """Records read by slicing, independent of the codec (valid lengths only)."""
    return [
        (data[i], int.from_bytes(data[i + 1 : i + 3], "big"), int.from_bytes(data[i + 3 : i + 19], "big"))
        for i in range(0, len(data), BULK_ACK_RECORD_SIZE)
    ]


records = st.builds(AckRecord, u8, u16, st.integers(0, 2**128 - 1))
unfit_records = st.builds(AckRecord, _field(8), _field(16), _field(128))


@settings(max_examples=200)
@given(st.one_of(st.lists(records, max_size=40), st.lists(unfit_records, max_size=3)),
       st.one_of(st.none(), st.integers(1, 40)))
def test_fast_bulk_ack_equals_general(recs: list[AckRecord], repeat: int | None) -> None:
    if repeat is not None and recs:
        recs = [recs[0]] * repeat  # one record object repeated, the padded 5.18 form
    ack = BulkAck(tuple(recs))
    out = _outcome(encode_bulk_ack, ack)
    assert out == _outcome(codec._encode_bulk_ack_general, ack.records)
    if out[0] == "value":
        assert _reference_bulk_ack(out[1]) == [(r.stream_id, r.ack_id, r.mask) for r in recs]
        assert decode_bulk_ack(out[1]) == ack


@settings(max_examples=200)
@given(st.one_of(st.binary(max_size=80), st.binary(min_size=19, max_size=19), st.binary(min_size=38, max_size=38)), u8)
def test_bulk_ack_readers_agree_on_any_bytes(data: bytes, stream: int) -> None:
    whole = _outcome(decode_bulk_ack, data)
    if whole[0] == "raised":
        assert issubclass(whole[1], DecodeError)
        assert _outcome(find_ack_record, data, stream) == whole
        return
    assert [(r.stream_id, r.ack_id, r.mask) for r in whole[1].records] == _reference_bulk_ack(data)
    rec = whole[1].for_stream(stream)
    assert find_ack_record(data, stream) == (None if rec is None else (rec.ack_id, rec.mask))
    if data:  # the stream of the first record is always found, in the first record
        first = whole[1].records[0]
        assert find_ack_record(data, first.stream_id) == (first.ack_id, first.mask)


def test_bulk_ack_too_many_records_same_error_everywhere() -> None:
    data = bytes(BULK_ACK_RECORD_SIZE * 256)
    with pytest.raises(DecodeError) as whole:
        decode_bulk_ack(data)
    with pytest.raises(DecodeError) as found:
        find_ack_record(data, 0)
    assert (type(whole.value), str(whole.value)) == (type(found.value), str(found.value))


@settings(max_examples=200)
@given(_field(8), _field(16), _field(128), st.integers(0, 40))
def test_encode_ack_record_equals_encode_bulk_ack(stream: int, ack: int, mask: int, count: int) -> None:
    out = _outcome(encode_ack_record, stream, ack, mask, count)
    assert out == _outcome(encode_bulk_ack, BulkAck((AckRecord(stream, ack, mask),) * count))
    assert out[0] == "value" or out[1] is EncodeError


def test_layout_for_cache_is_consistent_and_bounded() -> None:
    for v in DOCUMENTED_VERSIONS:
        text = f"{v[0]}.{v[1]}"
        first = [layout_for(text), layout_for(v), layout_for(profile_for(text))]
        assert [layout_for(text), layout_for(v), layout_for(profile_for(text))] == first
        assert first == [codec._layout_of(v)] * 3
    for minor in range(200):  # many distinct version texts: the cache stops growing
        assert layout_for(f"9.{minor}") is WindowLayout.V7_0
    assert len(codec._LAYOUT_CACHE) <= codec._LAYOUT_CACHE_LIMIT
    with pytest.raises(ConfigError):
        layout_for("not a version")
