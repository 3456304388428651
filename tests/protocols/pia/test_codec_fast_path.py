"""The per-profile fast paths of the Pia codec equal the general code they shortcut.

``header_decoder`` (protocols/pia/header.py) against ``decode_header``;
``lone_message_encoder``/``lone_message_decoder``
(protocols/pia/message.py) against ``encode_messages``/``decode_messages``; and
``PacketCodec.encode``/``decode`` against ``_encode_general``/``_decode_general``
(protocols/pia/packet.py).  Inputs mix well-formed values of every header and
message format (H-A..H-G, M-A..M-G) with values the general code rejects, so
each pair must give the same bytes or value, or an error of the same class.
Each property also checks that the fast path is really taken for the common
shape, so a fast path that silently always falls back fails the test.  The
codec properties run every network's nonce builder (the codec composes nonces
from ``NonceParts`` inline) and sources the builders reject.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pia_type_strategies import u8, u16, u32, u64

from protocols.crypto.aead import available_backends, gcm
from protocols.errors import AuthenticationError, DecodeError, EncodeError
from protocols.pia.header import (
    HEADER_SIZES,
    HEADER_VERSIONS,
    PacketHeader,
    decode_header,
    encode_header,
    header_decoder,
)
from protocols.pia.message import (
    Message,
    decode_messages,
    encode_messages,
    full_presence,
    lone_delta_layout,
    lone_message_decoder,
    lone_message_encoder,
)
from protocols.pia.nonce import nonce_builder, nonce_parts
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.packet_values import LoneMessage
from protocols.pia.stream_plan import open_by_plan, seal_by_plan
from protocols.errors import ConfigError
from protocols.pia.versions import DOCUMENTED_VERSIONS, Cipher, HeaderFormat, MessageFormat, VersionProfile, profile_for

SRC_IP = "10.0.0.7"
#: Sources for the codec properties: LDN knows only SRC_IP's MAC; 5.x LAN/LDN take IPv4 only.
SOURCES = [SRC_IP, SRC_IP, SRC_IP, "10.0.0.8", "fe80::7", "no address"]
NETWORK_PARAMS: dict[str, dict[str, Any]] = {
    "lan": {},
    "nex": {"gathering_id": 0x12345678},
    "ldn": {"network_id": 0xCAFEBABE, "macs": {SRC_IP: "02:00:5e:10:00:07"}},
    "npln": {"network_id": 0x0A0B0C0D},
}
BACKENDS = available_backends()
#: One version per (header format, message format, cipher, footer) combination.
PROFILES = sorted(
    {(p.header_format.value, p.message_format.value, p.footer): p for p in map(profile_for, DOCUMENTED_VERSIONS)}.values(),
    key=lambda p: p.version,
)
GCM_PROFILES = [p for p in PROFILES if p.cipher is Cipher.GCM]
_DELTA_FORMATS = (MessageFormat.E, MessageFormat.F, MessageFormat.G)
#: The lone-message closures serve the fixed formats; the codec packs delta messages inline.
FIXED_FORMAT_PROFILES = [p for p in PROFILES if p.message_format not in _DELTA_FORMATS]


def test_lone_message_closures_only_for_fixed_formats() -> None:
    assert FIXED_FORMAT_PROFILES and len(FIXED_FORMAT_PROFILES) < len(PROFILES)
    for p in PROFILES:
        delta = p.message_format in _DELTA_FORMATS
        assert (lone_message_encoder(p) is None) is delta and (lone_message_decoder(p) is None) is delta


def networks(profile: VersionProfile) -> list[str]:
    """The network types with a nonce rule for *profile* (none for the AES-ECB era)."""
    out = []
    for name, params in NETWORK_PARAMS.items():
        try:
            nonce_builder(profile, name, **params)
        except ConfigError:
            continue
        out.append(name)
    return out


def builder_for(profile: VersionProfile, network: str) -> Any:
    return nonce_builder(profile, network, **NETWORK_PARAMS[network]) if profile.cipher is Cipher.GCM else None


def test_profiles_cover_every_format() -> None:
    assert {p.header_format for p in PROFILES} == set(HeaderFormat)
    assert {p.message_format for p in PROFILES} == set(MessageFormat)


def outcome(call: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """("ok", value) or ("error", exception class): what both paths must agree on."""
    try:
        return "ok", call(*args, **kwargs)
    except Exception as e:  # compared by class below
        return "error", type(e)


def flips(span: int, n: int) -> st.SearchStrategy[list[tuple[int, int]]]:
    """Byte overwrites, half of them in the first bytes (magic, version byte, message version)."""
    return st.lists(st.tuples(st.one_of(st.integers(0, 5), st.integers(0, span)), u8), max_size=n)


def mostly(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Usually *valid*, sometimes *invalid* (one_of picks a branch uniformly)."""
    return st.one_of(valid, valid, valid, invalid)


# -- headers ---------------------------------------------------------------


@st.composite
def header_case(draw: st.DrawFn, profile: VersionProfile) -> tuple[PacketHeader, bytes, int, int, bool]:
    """(header, tag, footer_size, padding_size, well_formed) for *profile*'s layout."""
    fmt = profile.header_format
    old = fmt in (HeaderFormat.A, HeaderFormat.B)
    has_conn = fmt in (HeaderFormat.A, HeaderFormat.B, HeaderFormat.C, HeaderFormat.D)
    has_vars = not has_conn
    is_g = fmt is HeaderFormat.G
    var = u32 if fmt is HeaderFormat.E else u16
    versions = sorted(HEADER_VERSIONS.get(fmt, ()))
    tag_len = 0 if fmt is HeaderFormat.A else 16 if fmt in (HeaderFormat.B, HeaderFormat.C) else 8
    good = {
        "encrypted": st.booleans(),
        "packet_id": u16,
        "connection_id": u8 if has_conn else st.just(0),
        "version": st.just(None) if old else st.sampled_from([None, *versions]),
        "source_timer": u16 if old else st.just(None),
        "destination_timer": u16 if old else st.just(None),
        "destination_variable_id": var if has_vars else st.just(None),
        "source_variable_id": var if has_vars else st.just(None),
        "packet_flags": st.integers(0, 15) if is_g else st.just(0),
        "nonce": st.just(b"") if fmt is HeaderFormat.A else st.binary(min_size=8, max_size=8),
        "tag": st.binary(min_size=tag_len, max_size=tag_len),
        "footer_size": u8 if has_vars else st.just(0),
        "padding_size": st.integers(0, 15) if is_g else st.just(0),
    }
    bad = {
        "encrypted": st.booleans(),
        "packet_id": st.sampled_from([-1, 0x10000]),
        "connection_id": st.sampled_from([256, -1]) if has_conn else st.integers(1, 5),
        "version": st.sampled_from([1, 7, 14, 0x7F]),
        "source_timer": st.just(0x10000) if old else u16,
        "destination_timer": st.just(-1) if old else u16,
        "destination_variable_id": st.just(2**32) if has_vars else u16,
        "source_variable_id": st.just(-1) if has_vars else u16,
        "packet_flags": st.just(16) if is_g else st.integers(1, 15),
        "nonce": st.sampled_from([b"", b"1234567", b"123456789"]),
        "tag": st.sampled_from([b"", b"t" * 4, b"t" * 17]),
        "footer_size": st.just(256) if has_vars else st.integers(1, 9),
        "padding_size": st.just(16) if is_g else st.integers(1, 15),
    }
    broken = draw(st.sets(st.sampled_from(sorted(good)), max_size=2))
    values = {name: draw(bad[name] if name in broken else good[name]) for name in good}
    tag, footer_size, padding_size = values.pop("tag"), values.pop("footer_size"), values.pop("padding_size")
    return PacketHeader(**values), tag, footer_size, padding_size, not broken


@st.composite
def header_bytes(draw: st.DrawFn, profile: VersionProfile) -> bytes:
    """Encoded well-formed headers (plus some body), mutated, truncated, or garbage."""
    h, tag, fs, ps, _ = draw(header_case(profile).filter(lambda c: c[4]))
    raw = bytearray(encode_header(h, profile, tag=tag, footer_size=fs, padding_size=ps))
    raw += draw(st.binary(max_size=40))
    for pos, value in draw(flips(60, 3)):
        if pos < len(raw):
            raw[pos] = value
    cut = draw(st.one_of(st.none(), st.integers(0, len(raw))))
    if cut is not None:
        raw = raw[:cut]
    return draw(st.one_of(st.just(bytes(raw)), st.just(bytes(raw)), st.binary(max_size=70)))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_header_decoder_equals_decode_header(data: st.DataObject) -> None:
    profile = data.draw(st.sampled_from(PROFILES))
    raw = data.draw(header_bytes(profile))
    fast = outcome(header_decoder(profile), raw)
    general = outcome(lambda d: decode_header(d, profile)[0], raw)
    assert fast == general
    if fast[0] == "error":
        assert issubclass(fast[1], DecodeError)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_header_decoder_every_byte4_value(profile: VersionProfile) -> None:
    """Byte 4 (encryption flag / version) takes every value; the hand-picked header is valid before."""
    fmt = profile.header_format
    if fmt in (HeaderFormat.A, HeaderFormat.B):
        h = PacketHeader(True, 9, 3, source_timer=1, destination_timer=2, nonce=b"" if fmt is HeaderFormat.A else bytes(8))
    elif fmt in (HeaderFormat.C, HeaderFormat.D):
        h = PacketHeader(True, 9, 3, nonce=bytes(8))
    else:
        h = PacketHeader(True, 9, destination_variable_id=5, source_variable_id=6, nonce=bytes(8))
    raw = bytearray(encode_header(h, profile) + bytes(16))
    decode = header_decoder(profile)
    accepted = 0
    for b4 in range(256):
        raw[4] = b4
        got = outcome(decode, bytes(raw))
        assert got == outcome(lambda d: decode_header(d, profile)[0], bytes(raw)), b4
        accepted += got[0] == "ok"
    assert 2 <= accepted <= 6


# -- messages --------------------------------------------------------------


@st.composite
def message_case(draw: st.DrawFn, profile: VersionProfile) -> tuple[Message, bool]:
    """(message, common): *common* when it is well-formed with a complete header."""
    fmt = profile.message_format
    delta = fmt in (MessageFormat.E, MessageFormat.F, MessageFormat.G)
    u24 = st.integers(0, 0xFFFFFF)
    good: dict[str, st.SearchStrategy[Any]] = {
        "protocol_type": u16 if fmt is MessageFormat.A else u8,
        "protocol_port": u16 if fmt is MessageFormat.A else u24 if fmt in (MessageFormat.D, MessageFormat.E, MessageFormat.F) else u8,
        "payload": st.binary(max_size=40),
        "flags": u8,
        "destination": st.just(0) if fmt is MessageFormat.G else u32 if fmt is MessageFormat.A else u64,
        "source_constant_id": st.just(None) if fmt in (MessageFormat.F, MessageFormat.G) else u32 if fmt is MessageFormat.A else u64,
        "source_station_index": u8 if fmt is MessageFormat.A else st.just(None),
        "reserved": u32 if fmt is MessageFormat.A else st.integers(0, 0xFFFFFF) if fmt is MessageFormat.B else st.just(0),
        "extra": u8 if fmt is MessageFormat.G else st.just(0),
        "presence": st.sampled_from([None, full_presence(profile)]) if delta else st.just(None),
    }
    bad: dict[str, st.SearchStrategy[Any]] = {
        "protocol_type": st.sampled_from([-1, 0x100, 0x10000]),
        "protocol_port": st.sampled_from([-1, 0x100, 0x1000000]),
        "payload": st.just(bytes(0x10000)),
        "flags": st.sampled_from([-1, 0x100]),
        "destination": st.sampled_from([-1, 2**64, 1]) if fmt is not MessageFormat.G else st.integers(1, 9),
        "source_constant_id": st.sampled_from([None, -1, 2**64]) if fmt not in (MessageFormat.F, MessageFormat.G) else u8,
        "source_station_index": st.sampled_from([None, 256]) if fmt is MessageFormat.A else u8,
        "reserved": st.sampled_from([-1, 2**32, 0x1000000]) if fmt in (MessageFormat.A, MessageFormat.B) else st.integers(1, 9),
        "extra": st.sampled_from([-1, 0x100]) if fmt is MessageFormat.G else st.integers(1, 9),
        "presence": u8 if delta else st.sampled_from([0, 0x1F]),
    }
    broken = draw(st.sets(st.sampled_from(sorted(good)), max_size=2))
    values = {name: draw(bad[name] if name in broken else good[name]) for name in good}
    return Message(**values), not broken


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_lone_message_encoder_equals_encode_messages(data: st.DataObject) -> None:
    profile = data.draw(st.sampled_from(FIXED_FORMAT_PROFILES))
    m, common = data.draw(message_case(profile))
    general = outcome(encode_messages, (m,), profile)
    encoder = lone_message_encoder(profile)
    assert encoder is not None
    got = encoder(m)
    if common:
        assert got is not None, "the common shape must take the fast path"
        assert general[0] == "ok"
    if got is not None:
        body, ff = got
        assert general == ("ok", body[: len(body) - ff])
        assert 0 <= ff < 16 and len(body) % 16 == 0 and body.endswith(b"\xff" * ff)


@st.composite
def body_case(draw: st.DrawFn, profile: VersionProfile) -> tuple[bytes, bool]:
    """(packet body, lone): *lone* when it is one complete-header message, its pad and 0xFF padding."""
    messages = [m for m, ok in draw(st.lists(message_case(profile), max_size=3)) if ok]
    if len(messages) > 1 and draw(st.booleans()):  # later messages of a delta packet inherit fields
        messages[1:] = [attrs.evolve(m, presence=None) for m in messages[1:]]
    body = bytearray(encode_messages(messages, profile))
    body += b"\xff" * draw(st.integers(0, 17))
    lone = len(messages) == 1 and not (len(encode_messages(messages, profile)) and body[0] == 0xFF)
    # Sometimes bytes after the 0xFF padding: the padding must run to the end (§2.4).
    junk = draw(st.one_of(st.just(b""), st.just(b""), st.binary(min_size=1, max_size=4)))
    body += junk
    lone = lone and junk.count(0xFF) == len(junk)
    for pos, value in draw(flips(120, 3)):
        if pos < len(body):
            body[pos] = value
            lone = False
    cut = draw(st.one_of(st.none(), st.integers(0, len(body))))
    if cut is not None and cut < len(body):
        body = body[:cut]
        lone = False
    if draw(st.integers(0, 5)) == 0:
        return draw(st.binary(max_size=80)), False
    return bytes(body), lone


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_lone_message_decoder_equals_decode_messages(data: st.DataObject) -> None:
    profile = data.draw(st.sampled_from(FIXED_FORMAT_PROFILES))
    body, lone = data.draw(body_case(profile))
    general = outcome(decode_messages, body, profile)
    decoder = lone_message_decoder(profile)
    assert decoder is not None
    got = decoder(body)
    if lone:
        assert got is not None, "one complete message must take the fast path"
    if got is not None:
        assert general == ("ok", got)
        assert len(got) == 1
    elif general[0] == "error":
        assert issubclass(general[1], DecodeError)


# -- packets ---------------------------------------------------------------


class SpyCodec(PacketCodec):
    """Counts calls of the general paths (a subclass without __slots__ may hold attributes)."""

    general_calls = 0
    general_decodes = 0

    def _encode_general(self, packet: Packet, source: str) -> bytes:
        self.general_calls += 1
        return super()._encode_general(packet, source)

    def _decode_general(self, data: bytes, source: str, *, verify: bool = True) -> Packet:
        self.general_decodes += 1
        return super()._decode_general(data, source, verify=verify)


def codec_pair(profile: VersionProfile, backend: str, key: bytes, network: str = "lan") -> tuple[SpyCodec, PacketCodec]:
    """A spied codec and a reference codec, each with its own builder (and so its own caches)."""
    gcm_backend = backend if profile.cipher is Cipher.GCM else None
    return (
        SpyCodec(profile, key, builder_for(profile, network), backend=gcm_backend),
        PacketCodec(profile, key, builder_for(profile, network), backend=gcm_backend),
    )


@st.composite
def nonce_header(draw: st.DrawFn) -> PacketHeader:
    """Headers as a nonce builder sees them, ids and nonces sometimes out of shape."""
    ids = st.one_of(u8, u16, u32, st.just(-1))
    return PacketHeader(
        True,
        0,
        draw(ids),
        source_variable_id=draw(st.one_of(ids, st.none())),
        nonce=draw(st.one_of(st.binary(min_size=8, max_size=8), st.binary(max_size=10))),
    )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_nonce_parts_equal_the_builder(data: st.DataObject) -> None:
    profile = data.draw(st.sampled_from(GCM_PROFILES))
    network = data.draw(st.sampled_from(networks(profile)))
    builder = builder_for(profile, network)
    parts = nonce_parts(builder)
    assert parts is not None
    h = data.draw(nonce_header())
    source = data.draw(st.sampled_from(SOURCES))
    want = outcome(builder, h, source)
    got = outcome(parts.build, h, source)
    if want[0] == "ok":
        assert got == want
    elif got[0] == "ok":
        assert len(got[1]) != 12  # the builder's length check: callers ask the builder then
    else:
        assert got == want


def test_nonce_parts_only_for_our_builders() -> None:
    assert nonce_parts(lambda h, s: bytes(12)) is None


@st.composite
def packet_case(draw: st.DrawFn, profile: VersionProfile) -> tuple[Packet, bool]:
    """(packet, common): *common* for an encrypted one-message packet, all well-formed, without
    footer or with a plaintext one."""
    h, _, _, _, h_ok = draw(header_case(profile))
    cases = draw(st.lists(message_case(profile), max_size=3))
    messages = tuple(m for m, _ in cases)
    footer: tuple[int, ...] = ()
    if draw(st.integers(0, 3)) == 0:
        footer = tuple(draw(st.lists(mostly(u16, st.just(0x10000)), max_size=4)))
    # A plaintext footer of u16 receivers (5.27-6.30 group frames) is common too.
    footer_ok = not footer or (profile.footer == "plain" and all(x <= 0xFFFF for x in footer))
    common = h_ok and h.encrypted and len(cases) == 1 and cases[0][1] and footer_ok
    return Packet(h, messages, footer), common


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_codec_encode_equals_general(data: st.DataObject) -> None:
    profile = data.draw(st.sampled_from(PROFILES))
    backend = data.draw(st.sampled_from(BACKENDS))
    network = data.draw(st.sampled_from(networks(profile) or ["lan"]))
    spy, general = codec_pair(profile, backend, data.draw(st.binary(min_size=16, max_size=16)), network)
    packet, common = data.draw(packet_case(profile))
    source = data.draw(st.sampled_from(SOURCES))
    fast = outcome(spy.encode, packet, source)
    assert fast == outcome(general._encode_general, packet, source)
    if common and profile.cipher is Cipher.GCM and source == SRC_IP:
        assert fast[0] == "ok"
        assert spy.general_calls == 0, "an encrypted one-message packet must take the fast path"


@st.composite
def datagram_case(draw: st.DrawFn, profile: VersionProfile, key: bytes, network: str = "lan") -> bytes:
    """Datagrams: encoded packets, sealed arbitrary bodies (GCM), both mutated; or garbage."""
    general = PacketCodec(profile, key, builder_for(profile, network))
    packet, _ = draw(packet_case(profile))
    try:
        raw = bytearray(general._encode_general(packet, SRC_IP))
    except Exception:
        raw = bytearray()
    if profile.cipher is Cipher.GCM and (not raw or draw(st.booleans())):
        # A valid tag over any plaintext: exercises the message decoders behind the AEAD.
        h, _, _, _, _ = draw(header_case(profile).filter(lambda c: c[4]))
        h = attrs.evolve(h, encrypted=True)
        body, _ = draw(body_case(profile))
        ct, tag = gcm(key).seal(builder_for(profile, network)(h, SRC_IP), body, profile.tag_length)
        fs = draw(st.sampled_from([0, 0, 2, 4])) if profile.footer != "none" else 0
        ps = draw(st.integers(0, 15)) if profile.header_format is HeaderFormat.G else 0
        raw = bytearray(encode_header(h, profile, tag=tag, footer_size=fs, padding_size=ps) + ct)
    for pos, value in draw(flips(120, 2)):
        if pos < len(raw):
            raw[pos] = value
    if draw(st.integers(0, 6)) == 0:
        return draw(st.binary(max_size=90))
    return bytes(raw)


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_codec_decode_equals_general(data: st.DataObject) -> None:
    profile = data.draw(st.sampled_from(PROFILES))
    backend = data.draw(st.sampled_from(BACKENDS))
    network = data.draw(st.sampled_from(networks(profile) or ["lan"]))
    key = data.draw(st.binary(min_size=16, max_size=16))
    fast, general = codec_pair(profile, backend, key, network)
    raw = data.draw(datagram_case(profile, key, network))
    source = data.draw(st.sampled_from(SOURCES))
    verify = data.draw(st.booleans())
    got = outcome(fast.decode, raw, source, verify=verify)
    assert got == outcome(general._decode_general, raw, source, verify=verify)
    assert fast.last_nonce == general.last_nonce
    if got[0] == "error":
        assert issubclass(got[1], DecodeError)
    if verify:
        assert lone_outcome(fast, raw, source) == got
        assert fast.last_nonce == general.last_nonce


def lone_outcome(codec: PacketCodec, raw: bytes, source: str) -> tuple[str, Any]:
    """``codec.decode_lone``'s outcome as a Packet: a tuple only for one message, and then no Packet."""
    kind, got = outcome(codec.decode_lone, raw, source)
    if kind == "ok" and type(got) is LoneMessage:
        assert (got.packet_id, got.connection_id, got.source_variable_id) == (got.header[1], got.header[2], got.header[7])
        return kind, codec.packet_of(got)
    return kind, got


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_codec_decode_one_message_and_any_tail(data: st.DataObject) -> None:
    """Sealed bodies of one message, then alignment/0xFF padding and sometimes more: the closure's message checks."""
    profile = data.draw(st.sampled_from(GCM_PROFILES))
    backend = data.draw(st.sampled_from(BACKENDS))
    key = bytes(range(16))
    fast, general = codec_pair(profile, backend, key)
    m, _ = data.draw(message_case(profile).filter(lambda c: c[1]))
    body = encode_messages((m,), profile) + data.draw(
        st.one_of(st.binary(max_size=20), st.integers(0, 20).map(lambda k: b"\xff" * k))
    )
    if data.draw(st.booleans()):
        body += b"\xff" * data.draw(st.integers(1, 17)) + data.draw(st.binary(max_size=3))
    h = attrs.evolve(node_header(profile), nonce=data.draw(st.binary(min_size=8, max_size=8)))
    ps = data.draw(st.integers(0, 15)) if profile.header_format is HeaderFormat.G else 0
    ct, tag = gcm(key).seal(builder_for(profile, "lan")(h, SRC_IP), body, profile.tag_length)
    raw = encode_header(h, profile, tag=tag, padding_size=ps) + ct
    got = outcome(fast.decode, raw, SRC_IP)
    assert got == outcome(general._decode_general, raw, SRC_IP)
    assert fast.last_nonce == general.last_nonce
    assert lone_outcome(fast, raw, SRC_IP) == got
    assert fast.general_decodes == 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("profile", GCM_PROFILES, ids=lambda p: p.name)
def test_codec_fast_paths_taken_for_every_network(profile: VersionProfile, backend: str) -> None:
    """A node's packet takes both closures, whatever the network's nonce rule, and matches the general code."""
    for network in networks(profile):
        spy, general = codec_pair(profile, backend, bytes(range(16)), network)
        packet = Packet(node_header(profile), (node_message(profile),))
        raw = spy.encode(packet, SRC_IP)
        assert raw == general._encode_general(packet, SRC_IP)
        got = spy.decode(raw, SRC_IP)
        assert got == general._decode_general(raw, SRC_IP)
        assert got.header.nonce == packet.header.nonce and not got.footer
        assert got.messages[0].payload == b"payload"
        assert spy.last_nonce == general.last_nonce == builder_for(profile, network)(packet.header, SRC_IP)
        assert (spy.general_calls, spy.general_decodes) == (0, 0), network
        # The receive path's variant: the same fields, no values (delta message formats).
        spy.last_nonce = b""
        lone = spy.decode_lone(raw, SRC_IP)
        if lone_delta_layout(profile) is not None:
            assert type(lone) is LoneMessage and spy.packet_of(lone) == got
        else:
            assert lone == got
        assert spy.last_nonce == general.last_nonce and spy.general_decodes == 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("profile", [p for p in GCM_PROFILES if p.footer == "plain"], ids=lambda p: p.name)
def test_group_frames_take_both_fast_paths(profile: VersionProfile, backend: str) -> None:
    """A group frame (one message, a plaintext footer of receivers, spec §1.6) stays in the closures,
    byte for byte and value for value the general code's, the packed footer reused from frame to frame."""
    spy, general = codec_pair(profile, backend, bytes(range(16)), "lan")
    footer = (0x0102, 0x0304, 0xFFFF)
    for packet_id in range(3):
        h = attrs.evolve(node_header(profile), destination_variable_id=0, packet_id=packet_id)
        packet = Packet(h, (node_message(profile),), footer)
        raw = spy.encode(packet, SRC_IP)
        assert raw == general._encode_general(packet, SRC_IP)
        assert raw.endswith(bytes.fromhex("01020304ffff"))
        got = spy.decode(raw, SRC_IP)
        assert got == general._decode_general(raw, SRC_IP)
        assert got.footer == footer and got.header.footer_size == 6
    assert (spy.general_calls, spy.general_decodes) == (0, 0)
    # A footer that cannot be packed, or read back, is the general code's to report.
    bad = Packet(node_header(profile), (node_message(profile),), (0x10000,))
    assert outcome(spy.encode, bad, SRC_IP) == outcome(general._encode_general, bad, SRC_IP)
    assert outcome(spy.encode, bad, SRC_IP)[0] == "error"
    odd = bytearray(raw)
    odd[profile_footer_offset(profile)] = 5
    assert outcome(spy.decode, bytes(odd), SRC_IP) == outcome(general._decode_general, bytes(odd), SRC_IP)


def profile_footer_offset(profile: VersionProfile) -> int:
    return {HeaderFormat.E: 0xF, HeaderFormat.F: 0xB}[profile.header_format]


def node_header(profile: VersionProfile) -> PacketHeader:
    """An encrypted header as the node sends it."""
    fmt = profile.header_format
    if fmt in (HeaderFormat.B, HeaderFormat.C, HeaderFormat.D):
        timers = {"source_timer": 1, "destination_timer": 2} if fmt is HeaderFormat.B else {}
        return PacketHeader(True, 5, 9, nonce=bytes(range(8)), **timers)  # type: ignore[arg-type]
    return PacketHeader(True, 5, destination_variable_id=3, source_variable_id=4, nonce=bytes(range(8)))


def node_message(profile: VersionProfile) -> Message:
    mf = profile.message_format
    return Message(
        1,
        2,
        b"payload",
        destination=0 if mf is MessageFormat.G else 7,
        source_constant_id=None if mf in (MessageFormat.F, MessageFormat.G) else 8,
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("profile", GCM_PROFILES, ids=lambda p: p.name)
def test_decode_fast_path_sets_last_nonce_and_matches(profile: VersionProfile, backend: str) -> None:
    key = bytes(range(16))
    fast, general = codec_pair(profile, backend, key)
    builder = nonce_builder(profile, "lan")
    fmt = profile.header_format
    h = node_header(profile)
    m = node_message(profile)
    raw = general._encode_general(Packet(h, (m,)), SRC_IP)
    assert fast.encode(Packet(h, (m,)), SRC_IP) == raw
    assert fast.general_calls == 0
    got = fast.decode(raw, SRC_IP)
    assert got == general._decode_general(raw, SRC_IP)
    assert got.messages[0].payload == b"payload"
    assert fast.last_nonce == builder(h, SRC_IP) == general.last_nonce
    assert len(raw) > HEADER_SIZES[fmt]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("profile", GCM_PROFILES, ids=lambda p: p.name)
def test_decode_fast_path_builds_real_frozen_values(profile: VersionProfile, backend: str) -> None:
    """The closure's slot-storing constructors give the same frozen attrs values as the classes' own __init__."""
    fast, general = codec_pair(profile, backend, bytes(range(16)))
    raw = general._encode_general(Packet(node_header(profile), (node_message(profile),)), SRC_IP)
    got, want = fast.decode(raw, SRC_IP), general._decode_general(raw, SRC_IP)
    assert fast.general_decodes == 0
    for a, b in ((got, want), (got.header, want.header), (got.messages[0], want.messages[0])):
        assert type(a) is type(b) and a == b and hash(a) == hash(b) and repr(a) == repr(b)
        assert attrs.asdict(a, recurse=False) == attrs.asdict(b, recurse=False)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            a.footer = 1  # type: ignore[misc]
    assert attrs.evolve(got.header, packet_id=1) == attrs.evolve(want.header, packet_id=1)


def test_slot_constructors_only_for_plain_frozen_classes() -> None:
    from protocols.pia import packet_fast as packet_module

    assert packet_module._header_maker() is not PacketHeader
    lone = packet_module._lone_packet_maker()
    h = PacketHeader(True, 1, nonce=bytes(8))
    for footer in ((), (7, 9)):
        made = lone(h, 1, 2, b"p", 3, 4, 5, 6, 0x1F, footer)
        want = Packet(h, (Message(1, 2, b"p", 3, 4, 5, None, 0, 6, 0x1F),), footer)
        assert made == want and type(made.messages) is tuple and hash(made) == hash(want)
    assert lone.__name__ == "make"  # the slot-storing one, not the plain fallback
    assert packet_module._packet_maker() is not Packet

    @attrs.frozen
    class Checked:
        value: int = attrs.field(validator=attrs.validators.instance_of(int))

    @attrs.frozen
    class Converted:
        value: int = attrs.field(converter=int)

    @attrs.frozen
    class Plain:
        value: int

    assert packet_module._slot_setters(Checked) is None
    assert packet_module._slot_setters(Converted) is None
    assert packet_module._slot_setters(Plain) is not None


# -- the sealer of a stream of one-message packets -------------------------


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_lone_sealer_equals_encode(data: st.DataObject) -> None:
    """``lone_sealer(h, m, source)(i, hn, p)`` is ``encode`` of the packet of h and m with
    that id, nonce and payload: same bytes or error class, out-of-range values included."""
    profile = data.draw(st.sampled_from(PROFILES))
    backend = data.draw(st.sampled_from(BACKENDS))
    network = data.draw(st.sampled_from(networks(profile) or ["lan"]))
    codec, general = codec_pair(profile, backend, data.draw(st.binary(min_size=16, max_size=16)), network)
    h, _, _, _, h_ok = data.draw(header_case(profile))
    m, m_ok = data.draw(message_case(profile))
    source = data.draw(st.sampled_from(SOURCES))
    seal = codec.lone_sealer(h, m, source)
    if seal is None:
        # The node's own shape always gets one: a well-formed encrypted packet of
        # a delta-format message under an H-C..H-G header, from a usable source.
        assert not (
            h_ok and m_ok and h.encrypted and h.version is not None and source == SRC_IP
            and profile.cipher is Cipher.GCM and profile.message_format in _DELTA_FORMATS
            and profile.header_format not in (HeaderFormat.A, HeaderFormat.B)
            and (profile.footer != "encrypted" or profile.header_format is HeaderFormat.G)
        ), "no sealer for a common shape"  # fmt: skip
        return
    for _ in range(3):
        packet_id = data.draw(mostly(u16, st.sampled_from([-1, 0x10000])))
        hn = data.draw(mostly(st.binary(min_size=8, max_size=8), st.binary(max_size=10)))
        payload = data.draw(mostly(st.binary(max_size=80), st.just(bytes(0x10000))))
        packet = Packet(attrs.evolve(h, packet_id=packet_id, nonce=hn), (attrs.evolve(m, payload=payload),))
        assert outcome(seal, packet_id, hn, payload) == outcome(general._encode_general, packet, source)
        if seal.plan is not None and 0 < packet_id <= 0xFFFF and len(hn) == 8 and len(payload) < 0x10000:
            # The plan (a loop's inline steps, pianode.mesh.stream) gives the sealer's bytes.
            assert seal_by_plan(seal.plan, packet_id, hn, payload) == seal(packet_id, hn, payload)


def test_lone_sealer_packs_without_the_codec() -> None:
    """The sealer of a 5.18 and a 5.29 stream seals in-range packets itself, not through ``encode``."""
    for version in ("5.18", "5.29"):
        profile = profile_for(version)
        codec, general = codec_pair(profile, BACKENDS[0], bytes(range(16)))
        h = PacketHeader(True, 1, 7, min(HEADER_VERSIONS[profile.header_format]), destination_variable_id=None, nonce=bytes(8))
        if profile.header_format is HeaderFormat.E:
            h = attrs.evolve(h, connection_id=0, destination_variable_id=3, source_variable_id=4)
        m = Message(1, 0, b"", 1, 1 << 3, 0x1234 if profile.message_format is MessageFormat.E else None)
        seal = codec.lone_sealer(h, m, SRC_IP)
        assert seal is not None
        # H-C (5.18) has a plan for a loop's inline steps where the AEAD seals in one call; H-E not yet.
        assert (seal.plan is not None) is (profile.header_format is HeaderFormat.C and BACKENDS[0] == "cryptography")
        encoded = []
        codec.encode = lambda packet, source: encoded.append(packet) or PacketCodec.encode(codec, packet, source)  # type: ignore[method-assign]
        for k in range(40):
            payload = bytes(range(k))
            packet = Packet(attrs.evolve(h, packet_id=k + 1, nonce=k.to_bytes(8, "big")), (attrs.evolve(m, payload=payload),))
            assert seal(k + 1, k.to_bytes(8, "big"), payload) == general.encode(packet, SRC_IP)
        assert encoded == []
        with pytest.raises(EncodeError):
            seal(1, bytes(8), bytes(0x10000))  # out of range: the codec's own error
        assert len(encoded) == 1


# -- the opener of a stream of one-message packets -------------------------


def _constant_fields(lone: Any) -> tuple[Any, ...]:
    """What every packet of a LoneMessage's stream shares: all but id, header nonce, tag and payload."""
    h = lone[0]
    return (h[0], *h[2:11], lone[1], lone[2], *lone[4:10])


@st.composite
def stream_datagram(draw: st.DrawFn, codec: PacketCodec, h: PacketHeader, m: Message, source: str, key: bytes, network: str) -> bytes:
    """Another packet of the stream of *h* and *m*, one of another message or header, or any
    datagram; a third of them with bytes overwritten or cut short."""
    kind = draw(st.integers(0, 3))
    try:
        if kind == 0:
            raw = codec.encode(Packet(attrs.evolve(h, packet_id=draw(u16), nonce=draw(st.binary(min_size=8, max_size=8))),
                                      (attrs.evolve(m, payload=draw(st.binary(max_size=80))),)), source)  # fmt: skip
        elif kind == 1:
            other, _ = draw(message_case(codec.profile))
            raw = codec.encode(Packet(attrs.evolve(h, nonce=draw(st.binary(min_size=8, max_size=8))), (other,)), source)
        elif kind == 2:
            other_h, _, _, _, _ = draw(header_case(codec.profile))
            raw = codec.encode(Packet(other_h, (m,)), source)
        else:
            raw = draw(datagram_case(codec.profile, key, network))
    except Exception:
        raw = draw(st.binary(max_size=90))
    if draw(st.integers(0, 2)):
        return raw
    mutable = bytearray(raw)
    for pos, value in draw(flips(90, 2)):
        if pos < len(mutable):
            mutable[pos] = value
    if draw(st.booleans()):
        mutable = mutable[: draw(st.integers(0, len(mutable)))]
    return bytes(mutable)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_lone_opener_agrees_with_decode_lone(data: st.DataObject) -> None:
    """``lone_opener(lone, source)(d)`` gives None having done nothing, or the payload of a packet
    that ``decode_lone`` reads as a packet of *lone*'s stream, or ``decode_lone``'s own value
    or error class; ``last_nonce`` as ``decode_lone`` sets it."""
    profile = data.draw(st.sampled_from(GCM_PROFILES))
    backend = data.draw(st.sampled_from(BACKENDS))
    network = data.draw(st.sampled_from(networks(profile) or ["lan"]))
    key = data.draw(st.binary(min_size=16, max_size=16))
    codec, reference = codec_pair(profile, backend, key, network)
    h, _, _, _, _ = data.draw(header_case(profile).filter(lambda c: c[4]))
    m, _ = data.draw(message_case(profile).filter(lambda c: c[1]))
    source = data.draw(mostly(st.just(SRC_IP), st.sampled_from(SOURCES)))
    h = attrs.evolve(h, encrypted=data.draw(mostly(st.just(True), st.just(False))))
    try:
        first = codec.encode(Packet(h, (m,)), source)
        lone = codec.decode_lone(first, source)
    except Exception:
        return  # no stream to open
    if type(lone) is not LoneMessage:
        return
    opener = codec.lone_opener(lone, source)
    if opener is None:
        # The node's shape always gets one: an encrypted one-message packet without
        # footer under an H-C..H-F header, from a usable source.
        assert not (
            h.encrypted and source == SRC_IP and not lone[9]
            and profile.header_format in (HeaderFormat.C, HeaderFormat.D, HeaderFormat.E, HeaderFormat.F)
            and profile.footer != "encrypted"
        ), "no opener for a common shape"  # fmt: skip
        return
    for _ in range(4):
        raw = data.draw(stream_datagram(codec, h, m, source, key, network))
        if opener.plan is not None:
            # The plan (a loop's inline steps, pianode.mesh.stream) gives the opener's payload, and
            # nothing for what the opener does not call the stream's; a bad tag fails in both.
            by_plan = outcome(open_by_plan, opener.plan, raw)
            by_opener = outcome(opener, raw)
            if by_plan[0] == "ok" and by_plan[1] is not None:
                assert by_opener == by_plan
            elif by_plan[0] == "ok":
                assert by_opener[0] != "ok" or type(by_opener[1]) is not bytes
            else:
                assert by_plan == ("error", opener.plan.tag_error if opener.plan.decrypt is not None else AuthenticationError)
                assert by_opener == ("error", AuthenticationError)
        codec.last_nonce = b"untouched"
        got = outcome(opener, raw)
        opener_nonce = codec.last_nonce
        want = outcome(reference.decode_lone, raw, source)
        if got == ("ok", None):
            assert opener_nonce == b"untouched"
            continue
        assert opener_nonce == reference.last_nonce
        if got[0] == "ok" and type(got[1]) is bytes:
            assert want[0] == "ok" and type(want[1]) is LoneMessage, "the payload of what decode_lone reads as one message"
            assert want[1][3] == got[1]
            assert _constant_fields(want[1]) == _constant_fields(lone), "a packet of the stream"
        else:
            assert got == want


def test_lone_opener_opens_the_stream_without_decode() -> None:
    """A 5.18 and a 5.29 station's stream is opened by the opener alone; another message
    comes back as decode_lone's value; a forged tag is an AuthenticationError; another station's
    header is left alone."""
    for version in ("5.18", "5.29"):
        profile = profile_for(version)
        codec, general = codec_pair(profile, BACKENDS[0], bytes(range(16)))
        h = node_header(profile)
        m = node_message(profile)
        lone = codec.decode_lone(general.encode(Packet(h, (m,)), SRC_IP), SRC_IP)
        opener = codec.lone_opener(lone, SRC_IP)
        assert opener is not None
        # Every stream opener has a plan; an unchecked one-call open where the tag is 16 bytes (H-C; H-E's are 8).
        assert opener.plan is not None
        assert (opener.plan.decrypt is not None) is (BACKENDS[0] == "cryptography" and profile.header_format is HeaderFormat.C)
        datagrams = [
            general.encode(Packet(attrs.evolve(h, packet_id=k + 1, nonce=k.to_bytes(8, "big")), (attrs.evolve(m, payload=bytes(range(k))),)), SRC_IP)
            for k in range(40)
        ]  # fmt: skip
        other = general.encode(Packet(h, (attrs.evolve(m, protocol_port=9),)), SRC_IP)
        codec.decode_lone = lambda *a: pytest.fail("the opener must not decode")  # type: ignore[method-assign]
        assert [opener(d) for d in datagrams] == [bytes(range(k)) for k in range(40)]
        assert general.decode_lone(other, SRC_IP) == opener(other)
        forged = bytearray(datagrams[3])
        forged[-1] ^= 1
        with pytest.raises(AuthenticationError):
            opener(bytes(forged))
        if profile.header_format is HeaderFormat.C:
            elsewhere_h = attrs.evolve(h, connection_id=h.connection_id + 1)
        else:
            elsewhere_h = attrs.evolve(h, source_variable_id=(h.source_variable_id or 0) + 1)
        elsewhere = general.encode(Packet(elsewhere_h, (m,)), SRC_IP)
        assert opener(elsewhere) is None  # another station's header: left to decode_lone
