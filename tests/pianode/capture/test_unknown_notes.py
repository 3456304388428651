"""An ``unknown`` datagram of ``pianode decode`` says why (pianode.capture.unknown): what it is not, and
where its bytes look like PRUDP, the flag that decodes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pianode.capture.pcap import Datagram, open_capture
from pianode.capture.decode import Decoder
from pianode.capture.session_file import load_session
from pianode.capture.unknown import NO_KEY_NOTE, PLAIN_NO_KEY_NOTE
from protocols.prudp.codec import PacketCodec
from protocols.prudp.packet import PacketType, PrudpPacket
from protocols.prudp.variants import VARIANTS

NOT_PIA = "not Pia (no magic 32 AB 98 64), nor a LAN browse datagram, nor an LDN frame"


def _decode(data: bytes) -> tuple[str, str | None, str | None]:
    r = Decoder(load_session(None, {})).decode(Datagram(index=1, data=data, src="192.168.1.10:49152", dst="192.168.1.20:10025"))
    return r.kind, r.error, r.note


def test_the_non_pia_datagrams_of_a_retail_capture_say_what_they_are_not(captures: Path) -> None:
    dec = Decoder(load_session(None, {}))
    with open_capture(captures / "nDPI-nintendo.pcap") as cap:
        unknown = [r for r in (dec.decode(d) for d in cap) if r.kind == "unknown"]
    assert len(unknown) == 27  # DNS and other UDP of the console (the capture's README)
    dns = [r for r in unknown if r.src.endswith(":53") or r.dst.endswith(":53")]
    assert len(dns) == 12  # two of them read as PRUDP v0 ports (ids 0x6169): the port names them first
    assert all((r.error, r.note) == (None, NOT_PIA + ": UDP port 53 is DNS's") for r in dns)
    assert all((r.error, r.note) == (None, NOT_PIA) for r in unknown if r not in dns)


def test_prudp_v0_traffic_without_its_variant_is_pointed_at_prudp(captures: Path) -> None:
    dec = Decoder(load_session(None, {}))
    with open_capture(captures / "gro-prudp" / "GRO_Backend_packetLog.jsonl") as cap:
        results = [dec.decode(d) for d in cap]
    assert {r.kind for r in results} == {"unknown"}
    assert all(r.note is not None and r.note.startswith(NOT_PIA + "; its first bytes read as PRUDP v0 virtual ports")
               and r.note.endswith(": decode with --prudp-variant (and --access-key)") for r in results)


def test_a_prudp_v1_datagram_is_named_by_its_magic() -> None:
    variant = next(v for v in VARIANTS.values() if v.framing.name == "V1")
    packet = PrudpPacket(source=0xA1, destination=0xAF, type=PacketType.SYN, signature=bytes(16))
    data = PacketCodec(variant, b"6f599f81").encode(packet)
    kind, error, note = _decode(data)
    assert (kind, error) == ("unknown", None)
    assert note == NOT_PIA + "; it starts with EA D0, PRUDP v1's magic: decode with --prudp-variant (and --access-key)"


@pytest.mark.parametrize(("data", "note"), [
    (b"", "an empty datagram"),
    (bytes(range(40)), NOT_PIA),
    (bytes([0x3F, 0x31]) + bytes(4), NOT_PIA),  # v0's ports, but shorter than any v0 packet
    (bytes([0x3F, 0x43]) + bytes(20), NOT_PIA),  # two stream types: no v0 source shows that
    (bytes([0xC5, 0xC7]) + bytes(20), NOT_PIA),  # stream type 12 is none of the table's (spec prudp.md §1.1)
])  # fmt: skip
def test_other_bytes_get_the_plain_note(data: bytes, note: str) -> None:
    assert _decode(data) == ("unknown", None, note)


def test_an_encrypted_packet_read_without_a_key_says_so(captures: Path) -> None:
    dec = Decoder(load_session(None, {}))
    with open_capture(captures / "nDPI-nintendo.pcap") as cap:
        encrypted = [r for r in (dec.decode(d) for d in cap) if r.kind == "pia" and r.header and r.header["encrypted"]]
    assert len(encrypted) == 837
    assert all((r.error, r.messages, r.note) == (None, None, NO_KEY_NOTE) for r in encrypted)
    assert NO_KEY_NOTE.startswith("encrypted, and no key was given: ")


def test_a_plain_packet_read_without_a_key_says_its_signature_is_not_checked(captures: Path) -> None:
    """nDPI's 5 plain <= 5.6 packets (captures/README §1): messages shown, and the HMAC-MD5 trailer (spec pia.md §3.1)
    cannot be checked without a key; the result says so rather than leaving "authenticated: null" unexplained."""
    dec = Decoder(load_session(None, {}))
    with open_capture(captures / "nDPI-nintendo.pcap") as cap:
        plain = [r for r in (dec.decode(d) for d in cap) if r.kind == "pia" and r.header and not r.header["encrypted"]]
    assert len(plain) == 5
    assert all(r.messages and r.error is None and r.authenticated is None for r in plain)
    assert {r.note for r in plain} == {PLAIN_NO_KEY_NOTE}
    assert PLAIN_NO_KEY_NOTE.startswith("not encrypted, and no key was given: ")
    # with the key material there is nothing to explain: the HMAC is judged (here: not this session's key)
    dec = Decoder(load_session(None, {"version": "5.4", "session_key": "00" * 16}))
    with open_capture(captures / "nDPI-nintendo.pcap") as cap:
        judged = [r for r in (dec.decode(d) for d in cap) if r.kind == "pia" and r.header and not r.header["encrypted"]]
    assert {(r.authenticated, r.note) for r in judged} == {(False, None)}
