"""Quazal PRUDP v0 on real Ghost Recon Online/Phantoms traffic (../shared/captures/gro-prudp, README §3)."""

from __future__ import annotations

import collections
import json
import pathlib
import struct
import zlib

import pytest

from protocols.prudp import PacketCodec, PacketType, decode_datagram
from protocols.prudp.checksum import checksum_1
from protocols.prudp.payload import quazal_rc4

FILES = ["GRO_Backend", "GRO_DedicatedServer", "GRP_Backend", "GRP_DedicatedServer"]
KEY = "8dtRv2oj"


def _records(captures: pathlib.Path, name: str) -> list[tuple[bool, bytes]]:
    """Parse the .bin packet log itself: u8 version, u8 sent flag, u32 LE length, bytes."""
    raw = (captures / "gro-prudp" / f"{name}_packetLog.bin").read_bytes()
    out, pos = [], 0
    while pos < len(raw):
        version, sent, length = struct.unpack_from("<BBI", raw, pos)
        assert version == 1
        out.append((bool(sent), raw[pos + 6 : pos + 6 + length]))
        pos += 6 + length
    return out


@pytest.fixture
def expected(captures: pathlib.Path) -> dict[str, object]:
    return json.loads((captures / "gro-prudp" / "expected.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", FILES)
def test_every_packet_parses_verifies_and_round_trips(captures: pathlib.Path, expected: dict, name: str) -> None:
    exp = expected["files"][f"{name}_packetLog.bin"]
    codec = PacketCodec("quazal-v0", KEY)
    per_type: collections.Counter[str] = collections.Counter()
    from_game: collections.Counter[str] = collections.Counter()
    combos: collections.Counter[str] = collections.Counter()
    records = _records(captures, name)
    for sent, data in records:
        packets = codec.decode(data)  # verify=True: a bad checksum raises
        assert codec.encode_many(packets) == data
        for p in packets:
            per_type[p.type_name] += 1
            if not sent:
                from_game[p.type_name] += 1
            flags = "+".join(n for n in ("ACK", "RELIABLE", "NEED_ACK", "HAS_SIZE") if n in p.flag_names) or "-"
            combos[f"{p.type_name}|{flags}"] += 1
    assert len(records) == exp["records"]
    assert sum(per_type.values()) == exp["packets"]
    assert dict(per_type) == exp["packets_per_type"]
    assert dict(from_game) == exp["packets_per_type_from_game"]
    assert dict(combos) == exp["type_flag_combinations"]


@pytest.mark.parametrize("name", FILES)
def test_checksum_key_byte_depends_on_stream_type(captures: pathlib.Path, name: str) -> None:
    """S = 0xE3 for stream type 3, 0 for stream types 1 and 5 (README §3 checksum rule)."""
    for _, data in _records(captures, name):
        stream_type = data[0] >> 4
        s = 0xE3 if stream_type == 3 else 0
        assert stream_type in (1, 3, 5)
        assert checksum_1(data[:-1], s) == data[-1]
        (p,) = decode_datagram(data, "quazal-v0", KEY)
        assert p.checksum_ok
    # and the key matters: with no access key the type-3 packets fail
    if name.endswith("Backend"):
        bad = [decode_datagram(d, "quazal-v0")[0].checksum_ok for _, d in _records(captures, name)]
        assert not any(bad)


@pytest.mark.parametrize("name", ["GRO_Backend", "GRP_Backend"])
def test_rc4_zlib_payloads_decode_to_rmc(captures: pathlib.Path, expected: dict, name: str) -> None:
    """Every stream-type-3 payload: RC4 "CD&ML" per packet, ratio byte, zlib; DATA is RMC-framed."""
    exp = expected["files"][f"{name}_packetLog.bin"]["stream_type_3_payloads_rc4_CD&ML"]
    stats: dict[str, collections.Counter[str]] = {t: collections.Counter() for t in ("DATA", "CONNECT")}
    for _, data in _records(captures, name):
        (p,) = decode_datagram(data, "quazal-v0", KEY)
        if p.type not in (PacketType.DATA, PacketType.CONNECT) or not p.payload:
            continue
        kind = stats[p.type_name]
        kind["payloads"] += 1
        clear = quazal_rc4(p.payload)
        kind["zlib_compressed" if clear[0] else "uncompressed"] += 1
        assert p.plaintext is not None
        if clear[0]:  # independent check of the zlib layer
            assert zlib.decompress(clear[1:]) == p.plaintext
        else:
            assert clear[1:] == p.plaintext
        if len(p.plaintext) >= 4 and struct.unpack_from("<I", p.plaintext)[0] == len(p.plaintext) - 4:
            kind["rmc_length_prefix_ok"] += 1
    assert dict(stats["DATA"]) == exp["DATA"]
    assert dict(stats["CONNECT"]) == exp["CONNECT"]
