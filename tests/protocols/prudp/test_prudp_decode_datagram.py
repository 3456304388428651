"""decode_datagram: the stateless view for capture decoders (several packets, version sniffing, plaintexts)."""

from __future__ import annotations

import attrs

from protocols.prudp import Flag, PacketCodec, PacketType, PrudpPacket, decode_datagram, variant_for
from protocols.prudp.codec import NexStream
from protocols.prudp.payload import Rc4Stream
from protocols.prudp.rendezvous import HostHello

H = bytes.fromhex


def _data(seq: int, payload: bytes, flags: Flag = Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE) -> PrudpPacket:
    return PrudpPacket(
        source=0xAF, destination=0xA1, type=PacketType.DATA, flags=flags, session_id=0x5A, sequence_id=seq,
        fragment_id=0, payload=payload,
    )


def test_several_packets_in_one_datagram() -> None:
    codec = PacketCodec("nintendo-v0", "12345678")
    ping = PrudpPacket(source=0xAF, destination=0xA1, type=PacketType.PING, flags=Flag.NEED_ACK | Flag.HAS_SIZE, sequence_id=3)
    ack = attrs.evolve(_data(9, b"", Flag.ACK), session_id=0x3C)
    datagram = codec.encode_many([_data(2, b"abc"), ping, ack])
    out = decode_datagram(datagram, "nintendo-v0", "12345678")
    assert [p.type_name for p in out] == ["DATA", "PING", "DATA"]
    assert [p.flag_names for p in out] == [["RELIABLE", "NEED_ACK", "HAS_SIZE"], ["NEED_ACK", "HAS_SIZE"], ["ACK"]]
    assert [p.sequence_id for p in out] == [2, 3, 9]
    assert all(p.checksum_ok for p in out)
    assert out[1].plaintext == b"" and out[2].plaintext == b""
    assert out[0].plaintext is None  # NEX DATA is a keystream: no plaintext without its history


def test_bad_checksum_is_reported_not_raised() -> None:
    datagram = bytearray(PacketCodec("nintendo-v0", "12345678").encode(_data(2, b"abc")))
    datagram[-1] ^= 0xFF
    (p,) = decode_datagram(bytes(datagram), "nintendo-v0", "12345678")
    assert p.checksum_ok is False and p.sequence_id == 2


def test_nex_stream_decrypted_in_capture_order() -> None:
    tx = Rc4Stream(b"CD&ML")
    codec = PacketCodec("nintendo-v0", "12345678")
    wire = [codec.encode(_data(seq, tx.process(text))) for seq, text in ((2, b"hello"), (3, b"world"))]
    assert H("67e228b77c") in wire[0]  # spec §8.2: RC4("CD&ML", "hello")
    streams: dict[tuple[int, int, int], NexStream] = {}
    # a retransmitted copy of the first packet sits between the two
    got = [decode_datagram(w, "nintendo-v0", "12345678", nex_streams=streams)[0].plaintext for w in (wire[0], wire[0], wire[1])]
    assert got == [b"hello", b"hello", b"world"]


def test_nex_stream_holds_early_packets() -> None:
    tx = Rc4Stream(b"CD&ML")
    codec = PacketCodec("nintendo-v0", "12345678")
    wire = [codec.encode(_data(seq, tx.process(b"msg%d" % seq))) for seq in (2, 3, 4, 5)]
    streams: dict[tuple[int, int, int], NexStream] = {}
    order = (wire[0], wire[2], wire[1], wire[2], wire[3])
    got = [decode_datagram(w, "nintendo-v0", "12345678", nex_streams=streams)[0].plaintext for w in order]
    # seq 4 came before 3: its offset was unknown then; its copy and seq 5 decode
    assert got == [b"msg2", None, b"msg3", b"msg4", b"msg5"]


def test_nex_compressed_payloads_are_recognised() -> None:
    from protocols.prudp.payload import add_ratio

    tx = Rc4Stream(b"CD&ML")
    codec = PacketCodec("nintendo-v0", "12345678")
    wire = codec.encode(_data(2, tx.process(add_ratio(b"Z" * 500))))
    (p,) = decode_datagram(wire, "nintendo-v0", "12345678", nex_streams={})
    assert p.plaintext == b"Z" * 500


def test_v0_session_reads_v1_datagrams() -> None:
    v1 = H("ead001030500afa1e2005a0002009c3e3be44991e911165ba339483e827002010067e228b77c")
    (p,) = decode_datagram(v1, "nintendo-v0", "3d37fbdb")
    assert p.type == PacketType.DATA and p.sequence_id == 2 and p.checksum_ok is None
    assert p.payload == H("67e228b77c")


def test_four_byte_checksum_titles_are_recognised() -> None:
    data = H("afa1e2005a69c325b3020000050067e228b77c8dc58909")
    (p,) = decode_datagram(data, "nintendo-v0", "12345678")
    assert p.checksum_ok and p.payload == H("67e228b77c")
    (wrong,) = decode_datagram(data, "nintendo-v0", "aaaaaaaa")  # "87654321" would collide: same byte sum
    assert wrong.checksum_ok is False


def test_rendezvous_connect_payloads_are_clear() -> None:
    hello = HostHello(b"\x30" * 70, bytes(64), bytes(32))
    codec = PacketCodec("rendezvous")
    ack = PrudpPacket(
        source=0x3F, destination=0x31, type=PacketType.CONNECT, flags=Flag.ACK | Flag.HAS_SIZE, sequence_id=1,
        connection_signature=bytes(4), payload=hello.encode(),
    )
    (p,) = decode_datagram(codec.encode(ack), variant_for("rendezvous"))
    assert p.plaintext == hello.encode() and p.checksum_ok


def test_unreliable_nex_data_decrypts_without_history() -> None:
    from protocols.prudp.payload import unreliable_base_key, unreliable_packet_key

    key = unreliable_packet_key(unreliable_base_key(None), 0x1234, 0x5A)
    packet = attrs.evolve(_data(0x1234, Rc4Stream(key).process(b"unordered")), flags=Flag.NEED_ACK | Flag.HAS_SIZE)
    (p,) = decode_datagram(PacketCodec("nintendo-v0", "k").encode(packet), "nintendo-v0", "k")
    assert p.plaintext == b"unordered"


def test_one_byte_flags_with_four_byte_checksum_titles_are_recognised() -> None:
    from protocols.prudp.variants import nintendo_v0

    alt = nintendo_v0(checksum_version=0, flags_version=0)
    wire = PacketCodec(alt, "12345678").encode(_data(7, b"quazal-style"))
    (p,) = decode_datagram(wire, "nintendo-v0", "12345678")
    assert p.checksum_ok and p.sequence_id == 7 and p.flags == Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE


def test_nex_stream_of_substream_1_starts_from_the_default_key() -> None:
    """An auth connection has no session key: substream 1's stream starts from "CD&ML" itself, as
    nintendoclients 5.0.0 and nex-go key it (a key is derived per substream from a session key only)."""
    codec = PacketCodec("nintendo-v1", "6f599f81")
    payload = Rc4Stream(b"CD&ML").process(b"on substream one")
    wire = codec.encode(attrs.evolve(_data(2, payload), substream_id=1, signature=bytes(16)))
    (p,) = decode_datagram(wire, "nintendo-v1", "6f599f81", nex_streams={})
    assert p.plaintext == b"on substream one"
