"""PRUDP codecs against the spec's source-verified and derived vectors (../shared/spec/prudp.md §8)."""

from __future__ import annotations

import hashlib
import hmac

import attrs
import pytest
from Crypto.PublicKey import ECC

from protocols.errors import AuthenticationError, BadValue
from protocols.prudp import Flag, PacketCodec, PacketType, decode_datagram, variant_for
from protocols.prudp.checksum import checksum_1, checksum_4, key_byte
from protocols.prudp.payload import (
    Rc4Stream,
    aes_cbc_open,
    derive_substream_key,
    quazal_rc4,
    strip_ratio,
    strip_sequence_suffix,
    unreliable_base_key,
    unreliable_packet_key,
)
from protocols.prudp.rendezvous import (
    HostHello,
    client_finish,
    derive_session_key,
    ecdh,
    public_bytes,
    tag_for,
    verify_host_key,
)
from protocols.prudp.signatures import (
    expected_signature,
    nc_connection_signature_v0,
    nc_connection_signature_v1,
)

H = bytes.fromhex


# -- §8.1 --------------------------------------------------------------------
def test_3ds_syn_checksum_with_ridfebb9() -> None:
    data = H("afa140000000000000000000000000" "97")
    (p,) = PacketCodec("nintendo-v0", "ridfebb9").decode(data)
    assert (p.type, p.flags, p.source, p.destination) == (PacketType.SYN, Flag.NEED_ACK, 0xAF, 0xA1)
    assert p.connection_signature == bytes(4)
    assert checksum_1(data[:-1], key_byte(b"ridfebb9")) == 0x97


def test_wrong_access_key_fails_checksum() -> None:
    with pytest.raises(AuthenticationError):
        PacketCodec("nintendo-v0", "12345678").decode(H("afa14000000000000000000000000097"))


def test_terraria_v1_syn_signature() -> None:
    data = H(
        "ead0011b0000afa1c00000000000" "47cdc13045c9fda980d5db81456feff1" "000404010000" "0110" + "00" * 16 + "040100"
    )
    codec = PacketCodec("nintendo-v1", "3d37fbdb")
    (p,) = codec.decode(data)
    assert p.flags == Flag.NEED_ACK | Flag.HAS_SIZE
    assert p.supported_functions == 0x104 and p.max_substream == 0
    assert expected_signature(p, codec.variant, b"3d37fbdb") == p.signature
    assert codec.encode(p) == data


def test_rc4_cdml_keystream() -> None:
    assert quazal_rc4(bytes(16)) == H("0f8744db13ff2c5005a261fd2a16f2b1")
    assert Rc4Stream(b"CD&ML").process(bytes(16)) == H("0f8744db13ff2c5005a261fd2a16f2b1")


def test_gro_key_byte() -> None:
    assert key_byte(b"8dtRv2oj") == 0xE3


# -- §8.2 --------------------------------------------------------------------
PL = H("67e228b77c")


def test_rc4_hello() -> None:
    assert Rc4Stream(b"CD&ML").process(b"hello") == PL


@pytest.mark.parametrize(
    ("variant", "key", "hexdata"),
    [
        ("nintendo-v0-friends", "ridfebb9", "afa162005a92f23c4a02000067e228b77cc7"),
        ("nintendo-v0-friends", "ridfebb9", "a1af12003c78563412020000bc"),
        ("nintendo-v0", "12345678", "afa1e2005a69c325b3020000050067e228b77ce3"),
    ],
)
def test_nex_v0_data_signatures(variant: str, key: str, hexdata: str) -> None:
    codec = PacketCodec(variant, key)
    (p,) = codec.decode(H(hexdata))
    assert expected_signature(p, codec.variant, key.encode()) == p.signature
    assert codec.encode(p) == H(hexdata)


def test_nex_v0_four_byte_checksum() -> None:
    v = attrs.evolve(variant_for("nintendo-v0"), checksum_bytes=4)
    data = H("afa1e2005a69c325b3020000050067e228b77c8dc58909")
    (p,) = PacketCodec(v, "12345678").decode(data)
    assert p.payload == PL
    assert checksum_4(data[:-4], 0xA4) == 0x0989C58D


SERVER_SIG = bytes(range(16))
CLIENT_SIG = bytes(range(16, 32))


@pytest.mark.parametrize(
    ("hexdata", "peer"),
    [
        (
            "ead0011b0000a1af900000000000ca17b003795481e290e73dcaccc1169b00040401000001100001"
            "02030405060708090a0b0c0d0e0f040100",
            None,
        ),
        (
            "ead0011f0000afa1e1005a000100c22c56fad54cbb9bbbb78032b46470d900040401000001101011"
            "12131415161718191a1b1c1d1e1f03023412040100",
            SERVER_SIG,
        ),
        (
            "ead0011f0000a1af91003c000100bb57a1d8e1a035adfd8020c1a7f0be44000404010000011000000"
            "00000000000000000000000000003020000040100",
            CLIENT_SIG,
        ),
        ("ead001030500afa1e2005a0002009c3e3be44991e911165ba339483e827002010067e228b77c", SERVER_SIG),
        ("ead001030000a1af12003c000200dfffcddd998e1f9f34a224e603b6a52a020100", CLIENT_SIG),
    ],
)
def test_nex_v1_vectors(hexdata: str, peer: bytes | None) -> None:
    codec = PacketCodec("nintendo-v1", "3d37fbdb")
    (p,) = codec.decode(H(hexdata))
    assert expected_signature(p, codec.variant, b"3d37fbdb", peer_signature=peer) == p.signature
    assert codec.encode(p) == H(hexdata)


def test_v1_signature_rejects_other_peer_signature() -> None:
    codec = PacketCodec("nintendo-v1", "3d37fbdb")
    (p,) = codec.decode(H("ead001030000a1af12003c000200dfffcddd998e1f9f34a224e603b6a52a020100"))
    assert expected_signature(p, codec.variant, b"3d37fbdb", peer_signature=SERVER_SIG) != p.signature


def test_nc_style_connection_signatures() -> None:
    assert nc_connection_signature_v0("127.0.0.1", 60000) == H("30fadfc4")
    assert nc_connection_signature_v1("127.0.0.1", 60000) == H("409e3a57bac9137d770e689180ec400b")


def test_session_key_derivations() -> None:
    sk = bytes(range(32))
    base = unreliable_base_key(sk)
    assert base == H("457ea8a7012124c67937f5a4faf414a1290dc878ae3553bba9a9b814fe4935c5")
    k = unreliable_packet_key(base, 0x1234, 0x5A)
    assert k[:4] == H("7990a8a7") and k[-4:] == H("fe49351f")


def test_substream_key() -> None:
    # spec §8.2: substream-1 key for session key 00..1f is 11×16 ‖ 10..1f
    assert derive_substream_key(bytes(range(32))) == bytes([0x11] * 16) + bytes(range(16, 32))


# -- §8.3 Quazal (SC6, key byte 0xB0) ----------------------------------------
SC6 = attrs.evolve(variant_for("quazal-v0"), keyless_stream_types=frozenset())


class _KeyByte(PacketCodec):
    def __init__(self, variant: object, key: int) -> None:
        super().__init__(variant)  # type: ignore[arg-type]
        self._key = key


@pytest.mark.parametrize(
    "hexdata",
    [
        "3f3120000000000000000000000040",
        "313f48000000000000006c05dfbe000077",
        "3f3131bc6c05dfbe0100ae37f2dace",
        "313f494eae37f2da01000000000001000f7a",
        "313f4a4eae37f2da02000000006c",
        "3f310abc6c05dfbe010000f5",
        "3f3133bc6c05dfbe040022",
        "313f4b4eae37f2da040000006f",
        "313f498baf37f3da01000000000009000f8344db13782415e710",
    ],
)
def test_sc6_packets(hexdata: str) -> None:
    codec = _KeyByte(SC6, 0xB0)
    (p,) = codec.decode(H(hexdata))
    assert codec.encode(p) == H(hexdata)


def test_sc6_connect_ack_payloads() -> None:
    (p,) = decode_datagram(H("313f494eae37f2da01000000000001000f7a"), SC6)
    assert p.plaintext == b""  # RC4(00): "uncompressed, empty"
    (p,) = decode_datagram(H("313f498baf37f3da01000000000009000f8344db13782415e710"), SC6)
    assert p.plaintext == H("04000000870845e2")


def test_gro_derived_vectors() -> None:
    codec = PacketCodec("quazal-v0", "8dtRv2oj")
    (syn,) = codec.decode(H("3f3120000000000000000000000073"))
    assert syn.type == PacketType.SYN
    (p,) = decode_datagram(H("3f3132bc6c05dfbe0200000fef21b77f9038"), "quazal-v0", "8dtRv2oj")
    assert p.checksum_ok and p.fragment_id == 0 and p.plaintext == b"hello"


# -- §8.4 Rendez-Vous ---------------------------------------------------------
def _key(byte: int) -> ECC.EccKey:
    return ECC.construct(curve="P-256", d=int.from_bytes(bytes([byte]) * 32, "big"))


Q_CLIENT = H(
    "0217e617f0b6443928278f96999e69a23a4f2c152bdf6d6cdf66e5b80282d4ed"
    "194a7debcb97712d2dda3ca85aa8765a56f45fc758599652f2897c65306e5794"
)
Q_HOST = H(
    "d65a93977caa3d1b081852ff57a79e465f1660577304baead505dd3a48589cf3"
    "50185e895372df6221ea3a137557e473fddb6755f05bd507c3c533fce9c91285"
)
X = H("ccfc261f58193c98ca4ad4a53bbac6f0ee29bc4d48438090446908622ca79af6")
AES_KEY = H("b628048f414afe9a606f6c97195bb2e4")
TAG = H("ff5d4cf4598b273288ecf8855d1c614b6f10019e749388db556e757693d443f3")
SIG = H(
    "3046022100b32629ce1a4eac987aac71611e2e533b3c4ccd2484ee057f1c66aff47325ae26"
    "022100a1087a54b0a63a485c4294a76415eea6d7b7b03aad5b77110eec56302b4ce48f"
)


def test_rendezvous_key_schedule() -> None:
    client, host = _key(0x11), _key(0x22)
    assert public_bytes(client) == Q_CLIENT and public_bytes(host) == Q_HOST
    assert ecdh(host, client) == X == ecdh(client, host)
    assert derive_session_key(X) == AES_KEY
    assert tag_for(X, Q_CLIENT, Q_HOST) == TAG
    verify_host_key(_key(0x33), Q_HOST, SIG)
    assert hmac.new(X, Q_CLIENT + Q_HOST, hashlib.sha256).digest() == TAG


RV_PACKETS = [
    "313f200000000000000000000000313f2000",
    "3f3148000000000000006c05dfbe00001ef0b405",
    "313f31bc6c05dfbe0100ae37f2da" + Q_CLIENT.hex() + "6c01fb07",
    "3f31494eae37f2da010000000000b00048000000" + SIG.hex() + Q_HOST.hex() + "20000000" + TAG.hex() + "8d6605a4",
    "313f36bc6c05dfbe02009f44157b",
    "3f310e4eae37f2da0200ef680029",
    "313f72bc6c05dfbe0300000000003000000102030405060708090a0b0c0d0e0f75359b8e7a33a10521cde3c41a40f42544d7bcd0497679"
    "792233a1b5dc359ce46d8d2903",
    "3f310a4eae37f2da030000000000f068fc28",
    "313f32bc6c05dfbe040000000000000102030405060708090a0b0c0d0e0fb3be3c85aacd3567f540be892c6eb1941df5fbc7389a9b8222"
    "6c73224f46a1fd4bde7114",
    "313f72bc6c05dfbe0500010000003000000102030405060708090a0b0c0d0e0fbf7214d1d286332ca8534ffff5fc7142857fa1a339b54a"
    "0ef4d48d9335605842cf147e66",
    "313f72bc6c05dfbe0600000000003000000102030405060708090a0b0c0d0e0fb52bea5fdd20603d9236eb622863efbc1405e799416323"
    "25a1759be901dd1cddfe0189e2",
    "313f24bc6c05dfbe01009e44037b",
    "313f33bc6c05dfbe0700a444127b",
]


@pytest.mark.parametrize("hexdata", RV_PACKETS)
def test_rendezvous_packets_round_trip(hexdata: str) -> None:
    codec = PacketCodec("rendezvous")
    (p,) = codec.decode(H(hexdata))
    assert codec.encode(p) == H(hexdata)


def test_rendezvous_types_and_handshake_payloads() -> None:
    codec = PacketCodec("rendezvous")
    types = [codec.decode(H(h))[0].type for h in RV_PACKETS]
    assert types[4] == PacketType.USER and types[11] == PacketType.PING
    (ack,) = codec.decode(H(RV_PACKETS[3]))
    hello = HostHello.decode(ack.payload)
    assert (hello.signature, hello.host_public, hello.tag) == (SIG, Q_HOST, TAG)
    assert hello.encode() == ack.payload
    assert client_finish(_key(0x11), hello, _key(0x33)) == AES_KEY


def test_rendezvous_data_payloads() -> None:
    got = [
        decode_datagram(H(RV_PACKETS[i]), "rendezvous", aes_key=AES_KEY)[0].plaintext for i in (6, 8, 9, 10)
    ]
    assert got[0] == b"Hello, Hyperscape!"
    assert got[1] == b"ABCD" * 40
    assert got[2] == bytes(range(0x41, 0x51))  # fragment 1 (seq 5)
    assert got[2] + got[3] == b"ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^"


def test_rendezvous_tampered_tag_is_refused() -> None:
    (ack,) = PacketCodec("rendezvous").decode(H(RV_PACKETS[3]))
    hello = HostHello.decode(ack.payload)
    with pytest.raises(AuthenticationError, match="tag"):
        client_finish(_key(0x11), attrs.evolve(hello, tag=bytes(32)), _key(0x33))
    with pytest.raises(AuthenticationError, match="signature"):
        client_finish(_key(0x11), hello, _key(0x44))


def test_rendezvous_suffix_must_match_sequence() -> None:
    (p,) = PacketCodec("rendezvous").decode(H(RV_PACKETS[6]))
    plain = strip_ratio(aes_cbc_open(AES_KEY, p.payload))
    with pytest.raises(BadValue):
        strip_sequence_suffix(plain, p.sequence_id + 1)


def test_nintendo_v0_settings_map_to_variants() -> None:
    from protocols.errors import ConfigError
    from protocols.prudp.variants import nintendo_v0

    assert nintendo_v0() is variant_for("nintendo-v0")
    assert nintendo_v0(signature_version=1) is variant_for("nintendo-v0-friends")
    alt = nintendo_v0(checksum_version=0)
    (p,) = PacketCodec(alt, "12345678").decode(H("afa1e2005a69c325b3020000050067e228b77c8dc58909"))
    assert p.payload == PL
    one_byte = nintendo_v0(checksum_version=0, flags_version=0)
    (quazal_syn,) = PacketCodec("quazal-v0", "8dtRv2oj").decode(H("3f3120000000000000000000000073"))
    syn = PacketCodec(one_byte).encode(quazal_syn)
    assert syn[:3] == H("3f3120") and len(syn) == 18  # 1-byte flags, 4-byte checksum (NC's "alt" v0)
    with pytest.raises(ConfigError):
        nintendo_v0(checksum_version=2)
