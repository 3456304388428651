"""PRUDP variant profiles: every per-flavour wire fact in one table.

A :class:`Variant` answers the questions the codecs and the connection ask:
framing (v0 family or v1), type/flags form, checksum form, fragment-id width,
connection-signature size, packet-signature rule, payload cipher and
compression, fragment size and timers.  Source: ../shared/spec/prudp.md §7
(summary table), with the details of §2 (Nintendo), §3 (Quazal) and §4
(Rendez-Vous, the variant of seeds 000/001; every [A] there is a knob here).

Names accepted by :func:`variant_for` (the CLI and session files use them):
``nintendo-v0`` (3DS game settings), ``nintendo-v0-friends``, ``nintendo-v1``
(Wii U settings), ``quazal-v0`` and ``rendezvous``.
"""

from __future__ import annotations

import enum

import attrs

from protocols.errors import ConfigError
from protocols.prudp.packet import PacketType

__all__ = [
    "VARIANTS",
    "Cipher",
    "Framing",
    "SignatureRule",
    "Variant",
    "nintendo_v0",
    "variant_for",
]


class Framing(enum.Enum):
    V0 = "v0"  # spec §2.1 / §3.1 / §4.1
    V1 = "v1"  # spec §2.3


class SignatureRule(enum.Enum):
    NEX_V0_GAMES = "nex-v0-sig0"  # spec §2.5, signature_version 0
    NEX_V0_FRIENDS = "nex-v0-sig1"  # spec §2.5, signature_version 1
    NEX_V1 = "nex-v1"  # spec §2.6, HMAC-MD5 over header, key sum, options, payload
    PEER_CONNECTION_SIGNATURE = "peer"  # spec §3.4 / §4.1: the peer's connection signature


class Cipher(enum.Enum):
    NONE = "none"
    RC4_STREAM = "rc4-stream"  # NEX: one continuous keystream per direction (spec §2.8)
    RC4_PER_PACKET = "rc4-per-packet"  # Quazal: "CD&ML" re-keyed for every payload (spec §3.5)
    AES_CBC = "aes-128-cbc"  # Rendez-Vous: random IV prefix, PKCS#7 (spec §4.4-§4.5)


@attrs.frozen
class Variant:
    """Wire facts of one PRUDP flavour (spec §7)."""

    name: str
    framing: Framing
    flags_bytes: int  # 2 = NEX 2-byte form, 1 = Quazal 1-byte form (spec §1.3)
    checksum_bytes: int  # 1 or 4 (v0 family, spec §2.4), 0 for v1
    fragment_id_bytes: int  # 1, or 4 in the Rendez-Vous variant (spec §4.1, Q2)
    connection_signature_bytes: int  # 4 (v0 family) or 16 (v1)
    signature_rule: SignatureRule
    cipher: Cipher
    # Quazal and Rendez-Vous always carry the ratio byte; NEX only when compression is on.
    ratio_byte_always: bool
    compression: bool  # whether we compress what we send
    fragment_size: int
    # Logical → wire type numbers where they differ (Rendez-Vous USER = 6, spec §1.2 / Q1).
    type_swaps: tuple[tuple[int, int], ...] = ()
    # Stream types whose checksum leaves out the access-key byte sum (GRO: DO and NAT, spec §3.3).
    keyless_stream_types: frozenset[int] = frozenset()
    # Stream types whose Quazal payloads are RC4-encrypted / carry no ratio byte (spec §3.5).
    cipher_stream_types: frozenset[int] | None = None
    raw_payload_stream_types: frozenset[int] = frozenset()
    # Quazal/RV apply the payload transform to CONNECT payloads too (spec §3.5); RV does not (§4.2).
    transform_connect: bool = False
    sequence_suffix: bool = False  # Rendez-Vous: u16 seq after each fragment (spec §4.4)
    default_stream_type: int = 10
    server_port: int = 1
    client_port: int = 15
    default_key: bytes = b"CD&ML"  # RC4 key of auth connections (spec §2.8 / §3.5)
    minor_version: int = 0  # v1 negotiation (spec §2.3)
    # Timers (spec §6.5 / §6.6)
    resend_timeout: float = 1.0
    resend_backoff: float = 1.5
    resend_timeout_max: float = 8.0
    max_transmissions: int = 3
    ping_interval: float = 5.0
    # Rendez-Vous handshake (spec §4.2 / §4.3)
    ecdh_connect: bool = False
    user_after_connect: bool = False

    # -- type mapping ----------------------------------------------------------
    def type_to_wire(self, t: int) -> int:
        for logical, wire in self.type_swaps:
            if t == logical:
                return wire
            if t == wire:
                return logical
        return t

    def type_from_wire(self, value: int) -> PacketType:
        # the swap table is an involution, so the same lookup maps both ways
        return PacketType(self.type_to_wire(value))

    def checksum_key_applies(self, source_vport: int) -> bool:
        return (source_vport >> 4) not in self.keyless_stream_types


_NEX_V0_3DS = Variant(
    name="nintendo-v0",
    framing=Framing.V0,
    flags_bytes=2,
    checksum_bytes=1,
    fragment_id_bytes=1,
    connection_signature_bytes=4,
    signature_rule=SignatureRule.NEX_V0_GAMES,
    cipher=Cipher.RC4_STREAM,
    ratio_byte_always=False,
    compression=False,
    fragment_size=962,  # spec §2.10 3ds.cfg
)

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        _NEX_V0_3DS,
        attrs.evolve(_NEX_V0_3DS, name="nintendo-v0-friends", signature_rule=SignatureRule.NEX_V0_FRIENDS),
        Variant(
            name="nintendo-v1",
            framing=Framing.V1,
            flags_bytes=2,
            checksum_bytes=0,
            fragment_id_bytes=1,
            connection_signature_bytes=16,
            signature_rule=SignatureRule.NEX_V1,
            cipher=Cipher.RC4_STREAM,
            ratio_byte_always=False,
            compression=False,
            fragment_size=1300,  # spec §2.10 default.cfg
            minor_version=4,
        ),
        Variant(
            name="quazal-v0",
            framing=Framing.V0,
            flags_bytes=1,
            checksum_bytes=1,
            fragment_id_bytes=1,
            connection_signature_bytes=4,
            signature_rule=SignatureRule.PEER_CONNECTION_SIGNATURE,
            cipher=Cipher.RC4_PER_PACKET,
            ratio_byte_always=True,
            compression=True,
            fragment_size=963,  # spec §3.7
            keyless_stream_types=frozenset({1, 5}),  # spec §3.3, GRO captures
            cipher_stream_types=frozenset({3}),  # spec §3.5 (GRO: only OldRVSec is encrypted)
            raw_payload_stream_types=frozenset({5}),  # NAT probes carry no ratio byte (§3.2, §3.5)
            transform_connect=True,
            default_stream_type=3,
            max_transmissions=20,  # spec §6.5 Quazal profile
            ping_interval=10.0,
        ),
        Variant(
            name="rendezvous",
            framing=Framing.V0,
            flags_bytes=1,
            checksum_bytes=4,
            fragment_id_bytes=4,
            connection_signature_bytes=4,
            signature_rule=SignatureRule.PEER_CONNECTION_SIGNATURE,
            cipher=Cipher.AES_CBC,
            ratio_byte_always=True,
            compression=True,
            fragment_size=960,  # spec §4.7
            type_swaps=((int(PacketType.USER), int(PacketType.ROUTE)),),  # USER = 6 (spec §1.2, Q1)
            sequence_suffix=True,
            default_stream_type=3,
            server_port=15,  # spec §1.1: Rendez-Vous client port 1, host port 15
            client_port=1,
            max_transmissions=10,  # [A] spec §6.5 suggests 6; at 10 % loss each way 6 loses ~5 % of 1 MiB transfers
            ping_interval=10.0,
            ecdh_connect=True,
            user_after_connect=True,
        ),
    )
}


def nintendo_v0(*, signature_version: int = 0, checksum_version: int = 1, flags_version: int = 1) -> Variant:
    """A NEX v0 variant from the reference client's three ``prudp_v0`` settings (spec §2.10).

    ``signature_version`` 0 = games, 1 = Friends (spec §2.5); ``checksum_version``
    1 = 1-byte, 0 = 4-byte (spec §2.4); ``flags_version`` 1 = 2-byte type/flags,
    0 = the 1-byte form (spec §1.3).
    """
    if signature_version not in (0, 1) or checksum_version not in (0, 1) or flags_version not in (0, 1):
        raise ConfigError("prudp_v0 signature/checksum/flags versions are 0 or 1")
    base = VARIANTS["nintendo-v0-friends" if signature_version else "nintendo-v0"]
    if checksum_version == 1 and flags_version == 1:
        return base
    name = f"{base.name}-c{checksum_version}f{flags_version}"
    return attrs.evolve(base, name=name, checksum_bytes=1 if checksum_version else 4, flags_bytes=2 if flags_version else 1)


def variant_for(name: str | Variant) -> Variant:
    """Look up a variant by name (a :class:`Variant` passes through)."""
    if isinstance(name, Variant):
        return name
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError(f"unknown PRUDP variant {name!r}; known: {', '.join(sorted(VARIANTS))}") from None
