"""Pia version profiles: everything that varies on the wire, in one table.

A :class:`VersionProfile` answers every "which format does version X use"
question the codecs and the node ask: header format (H-A..H-G) and version
byte, message format (M-A..M-G), cipher and tag length, message alignment, the
zlib flag, the footer, protocol ids and the sub-protocol versions.

Source: ../shared/spec/pia.md §0.3 (version fingerprint), §1-§2 (formats),
§2.3 (message flags), §5.1 (protocol ids and versions), §6.3 and §7.2 (LAN/LDN
system communication versions), §11 (rules confirmed on real traffic: no
4-byte alignment in 6.x).
"""

from __future__ import annotations

import enum
import re

import attrs

from protocols.errors import ConfigError, UnknownVersion

__all__ = [
    "DOCUMENTED_VERSIONS",
    "Cipher",
    "HeaderFormat",
    "MessageFormat",
    "NetworkType",
    "Proto",
    "VersionProfile",
    "parse_version",
    "profile_for",
]


class HeaderFormat(enum.Enum):
    A = "H-A"  # <= 5.6: 12 bytes + HMAC-MD5 trailer, timers
    B = "H-B"  # 5.7-5.10: H-A + nonce + 16-byte tag
    C = "H-C"  # 5.11-5.21: version byte, connection id, nonce, 16-byte tag
    D = "H-D"  # 5.23-5.26: as C, 8-byte tag
    E = "H-E"  # 5.27-5.45: u32 variable ids, footer size
    F = "H-F"  # 6.16-6.30: u16 variable ids
    G = "H-G"  # 6.32-7.2: padding/flags byte, encrypted footer


class MessageFormat(enum.Enum):
    A = "M-A"  # <= 5.4, 20-byte header, 16-bit protocol ids
    B = "M-B"  # 5.6-5.10, 24-byte header
    C = "M-C"  # 5.11-5.12, 22-byte header, message version 1
    D = "M-D"  # 5.14-5.17, 24-byte header, message version 2, u24 port
    E = "M-E"  # 5.18-5.26, delta encoded with source constant id
    F = "M-F"  # 5.27-6.30, delta encoded without source id
    G = "M-G"  # 6.32-7.x, delta encoded, u8 port, no destination


class Cipher(enum.Enum):
    ECB_HMAC = "aes-ecb+hmac-md5"
    GCM = "aes-gcm"


class NetworkType(enum.Enum):
    NEX = "nex"
    LAN = "lan"
    LDN = "ldn"
    NPLN = "npln"


class Proto(enum.Enum):
    """Sub-protocols by name; :attr:`VersionProfile.protocol_ids` maps them to wire ids."""

    RELAY = "relay"
    KEEP_ALIVE = "keep-alive"
    STATION = "station"
    MESH = "mesh"
    SYNC_CLOCK = "sync-clock"
    LOCAL = "local"
    NAT = "nat"
    LAN = "lan"
    RTT = "rtt"
    UNRELIABLE = "unreliable"
    RELIABLE = "reliable"
    BROADCAST_RELIABLE = "broadcast-reliable"
    RELIABLE_BROADCAST = "reliable-broadcast"
    SESSION = "session"
    NET = "net"
    MONITORING = "monitoring"


Version = tuple[int, int]


def _span(major: int, lo: int, hi: int) -> list[Version]:
    return [(major, m) for m in range(lo, hi + 1)]


# Versions some source documents.  Gaps (5.5, 5.13, 5.15, 5.16, 5.22, 6.24,
# 6.27, 6.28, 6.31, 6.35-6.38) are undocumented: spec §0.2.
DOCUMENTED_VERSIONS: tuple[Version, ...] = tuple(
    _span(3, 3, 10)
    + _span(4, 5, 10)
    + [(5, 2), (5, 3), (5, 4), (5, 6)]
    + _span(5, 7, 12)
    + [(5, 14), (5, 17)]
    + _span(5, 18, 21)
    + _span(5, 23, 45)
    + _span(6, 16, 23)
    + [(6, 25), (6, 26), (6, 29), (6, 30), (6, 32), (6, 33), (6, 34)]
    + _span(6, 39, 41)
    + [(7, 0), (7, 1), (7, 2)]
)

_OLD_IDS: dict[Proto, int] = {
    Proto.RELAY: 0x0080,
    Proto.KEEP_ALIVE: 0x00C0,
    Proto.STATION: 0x0100,
    Proto.MESH: 0x0200,
    Proto.SYNC_CLOCK: 0x0210,
    Proto.LOCAL: 0x0300,
    Proto.NAT: 0x0400,
    Proto.LAN: 0x0420,
    Proto.RTT: 0x0600,
    Proto.UNRELIABLE: 0x2000,
    Proto.RELIABLE: 0x3000,
    Proto.RELIABLE_BROADCAST: 0x7000,
    Proto.SESSION: 0x7200,
    Proto.MONITORING: 0x8000,
}

_IDS_5: dict[Proto, int] = {
    Proto.KEEP_ALIVE: 0x08,
    Proto.STATION: 0x14,
    Proto.MESH: 0x18,
    Proto.SYNC_CLOCK: 0x1C,
    Proto.LOCAL: 0x24,
    Proto.NET: 0x2C,
    Proto.NAT: 0x34,
    Proto.LAN: 0x44,
    Proto.RTT: 0x58,
    Proto.UNRELIABLE: 0x68,
    Proto.RELIABLE: 0x7C,
    Proto.BROADCAST_RELIABLE: 0x80,
    Proto.RELIABLE_BROADCAST: 0x84,
    Proto.SESSION: 0x94,
    Proto.MONITORING: 0xA4,
    Proto.RELAY: 0xA8,
}

_IDS_6: dict[Proto, int] = {
    Proto.KEEP_ALIVE: 0x08,
    Proto.NET: 0x2C,
    Proto.RTT: 0x58,
    Proto.UNRELIABLE: 0x68,
    Proto.RELIABLE: 0x7C,
    Proto.BROADCAST_RELIABLE: 0x80,
    Proto.SESSION: 0x98,
    Proto.MONITORING: 0xA4,
}

_IDS_632: dict[Proto, int] = {
    Proto.NET: 1,
    Proto.RTT: 3,
    Proto.UNRELIABLE: 5,
    Proto.RELIABLE: 10,
    Proto.BROADCAST_RELIABLE: 11,
    Proto.SESSION: 13,
    Proto.MONITORING: 15,
}

_IDS_7: dict[Proto, int] = {
    Proto.NET: 0,
    Proto.SESSION: 1,
    Proto.RTT: 3,
    Proto.UNRELIABLE: 5,
    Proto.RELIABLE: 10,
    Proto.BROADCAST_RELIABLE: 11,
    Proto.MONITORING: 14,
}


@attrs.frozen
class VersionProfile:
    """Everything about one Pia version that changes bytes on the wire."""

    version: Version
    header_format: HeaderFormat
    #: Low 7 bits of header byte 4 (H-C onward); None for H-A/H-B (byte 4 = 1/2).
    header_version: int | None
    message_format: MessageFormat
    cipher: Cipher
    #: GCM tag bytes carried in the header (16 or 8); 16 = HMAC-MD5 trailer for ECB.
    tag_length: int
    #: Messages zero-padded to 4 bytes (up to 5.45; not in 6.x, spec §11).
    align_messages: bool
    #: Message flag meaning "payload zlib-compressed", or None when absent.
    zlib_flag: int | None
    #: Message flag meaning "destination is a station bitmap"; 0 when the bitmap is the flag-clear meaning (<= 5.4).
    bitmap_flag: int
    #: Message flag meaning "do not bundle with other messages" (0: none known, 6.32+).
    no_bundle_flag: int
    #: "none", "plain" (5.27-6.30, follows the ciphertext) or "encrypted" (6.32+).
    footer: str
    #: 0 when the header carries a connection id, else the variable id width (4 or 2).
    variable_id_size: int
    #: Constant id width in bytes (4 on 3.x/4.x, 8 on 5.x+).
    constant_id_size: int
    protocol_ids: dict[Proto, int] = attrs.field(eq=False, repr=False)
    #: Station protocol version ("version number" before 5.19, MeshStation version after).
    station_version: int | None
    mesh_version: int | None
    #: LAN system communication version and crypto challenge version (None: none).
    lan_system_version: int | None
    lan_challenge_version: int | None
    ldn_system_version: int | None
    #: Handshake with an inverse connection request (<= 5.26).
    inverse_handshake: bool

    @property
    def name(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def has_timers(self) -> bool:
        """H-A/H-B headers carry the source/destination timers used for RTT."""
        return self.header_format in (HeaderFormat.A, HeaderFormat.B)

    @property
    def has_connection_id(self) -> bool:
        return self.variable_id_size == 0

    @property
    def eight_bit_protocol_ids(self) -> bool:
        return self.message_format is not MessageFormat.A

    def protocol_id(self, proto: Proto) -> int:
        try:
            return self.protocol_ids[proto]
        except KeyError:
            raise ConfigError(f"Pia {self.name} has no {proto.value} protocol") from None

    def protocol_name(self, protocol_type: int) -> str | None:
        for proto, pid in self.protocol_ids.items():
            if pid == protocol_type:
                return proto.value
        return None


def _in(v: Version, lo: Version, hi: Version) -> bool:
    return lo <= v <= hi


def _build(v: Version) -> VersionProfile:
    # Header format and version byte (spec §0.3, §1.1).
    if v <= (5, 6):
        hf, hv = HeaderFormat.A, None
    elif v <= (5, 10):
        hf, hv = HeaderFormat.B, None
    elif v <= (5, 17):
        hf, hv = HeaderFormat.C, 3
    elif v <= (5, 22):
        hf, hv = HeaderFormat.C, 4
    elif v <= (5, 26):
        hf, hv = HeaderFormat.D, 5
    elif v <= (5, 45):
        hf, hv = HeaderFormat.E, 9
    elif v <= (6, 23):
        hf, hv = HeaderFormat.F, 11
    elif v <= (6, 26):
        hf, hv = HeaderFormat.F, 12
    elif v <= (6, 31):
        hf, hv = HeaderFormat.F, 13
    elif v <= (6, 34):
        hf, hv = HeaderFormat.G, 15
    else:
        hf, hv = HeaderFormat.G, 16

    # Message format (spec §2.1).
    if v <= (5, 5):
        mf = MessageFormat.A
    elif v <= (5, 10):
        mf = MessageFormat.B
    elif v <= (5, 13):
        mf = MessageFormat.C
    elif v <= (5, 17):
        mf = MessageFormat.D
    elif v <= (5, 26):
        mf = MessageFormat.E
    elif v <= (6, 31):
        mf = MessageFormat.F
    else:
        mf = MessageFormat.G

    cipher = Cipher.ECB_HMAC if v <= (5, 6) else Cipher.GCM
    tag = 16 if v <= (5, 22) else 8

    # Message flags per version (spec §2.3, KW's per-version table).
    if v <= (5, 5):
        bitmap_flag, no_bundle, zlib = 0x00, 0x08, None
    elif v <= (5, 12):
        bitmap_flag, no_bundle, zlib = 0x01, 0x08, None
    elif v <= (5, 26):
        bitmap_flag, no_bundle, zlib = 0x01, 0x08, 0x10
    elif v <= (5, 45):
        bitmap_flag, no_bundle, zlib = 0x01, 0x10, 0x20
    elif v <= (6, 31):
        bitmap_flag, no_bundle, zlib = 0x00, 0x10, 0x20
    else:
        # KW lists only 0x20 and 0x40 for 6.32-7.0, both unknown: compression is the
        # packet header's ZSTD flag now, and no flag is known to mean "do not bundle".
        bitmap_flag, no_bundle, zlib = 0x00, 0x00, None

    footer = "none" if v <= (5, 26) else ("plain" if v <= (6, 31) else "encrypted")
    var_size = 0 if v <= (5, 26) else (4 if v <= (5, 45) else 2)

    if v <= (5, 5):
        ids = dict(_OLD_IDS)
    elif v <= (5, 45):
        ids = dict(_IDS_5)
        if v < (5, 14):
            del ids[Proto.BROADCAST_RELIABLE]
        if v > (5, 19):
            del ids[Proto.RELIABLE_BROADCAST]
        if v > (5, 25):
            del ids[Proto.RELAY]
    elif v <= (6, 31):
        ids = dict(_IDS_6)
    elif v < (7, 0):
        ids = dict(_IDS_632)
    else:
        ids = dict(_IDS_7)

    # Station protocol version (spec §5.1 "pre-5.19 version number", then MeshStation).
    station: int | None
    if v <= (3, 6):
        station = 2
    elif v <= (3, 10):
        station = 3
    elif v <= (4, 10):
        station = 5
    elif v <= (5, 6):
        station = 7
    elif v <= (5, 9):
        station = 8
    elif v <= (5, 18):
        station = 9
    elif v <= (5, 23):
        station = 0
    elif v <= (5, 26):
        station = 1
    elif v <= (5, 45):
        station = 2
    else:
        station = None

    mesh: int | None
    if v < (5, 19) or v > (5, 45):
        mesh = None
    elif v <= (5, 20):
        mesh = 0
    elif v <= (5, 27):
        mesh = 1
    elif v <= (5, 29):
        mesh = 2
    else:
        mesh = 3

    # LAN system communication version and challenge version (spec §0.3, §6.3, §6.4).
    lan_sys: int | None
    lan_sys = {
        (5, 3): 0, (5, 6): 2, (5, 7): 3, (5, 8): 4, (5, 9): 5, (5, 10): 6,
    }.get(v)
    if lan_sys is None:
        if _in(v, (5, 11), (5, 18)):
            lan_sys = 7
        elif _in(v, (5, 19), (5, 45)):
            lan_sys = 8
        elif _in(v, (6, 16), (6, 31)):
            lan_sys = 10
        elif v >= (6, 39):
            lan_sys = 22
    challenge: int | None
    if _in(v, (5, 7), (5, 10)):
        challenge = 1
    elif _in(v, (5, 11), (5, 45)):
        challenge = 2
    elif _in(v, (6, 16), (6, 33)):
        challenge = 3
    elif _in(v, (6, 40), (6, 41)):
        challenge = 4
    elif v >= (7, 2):
        challenge = 5
    else:
        challenge = None

    ldn_sys: int | None
    if _in(v, (5, 2), (5, 7)):
        ldn_sys = 1
    elif v == (5, 9):
        ldn_sys = 2
    elif v == (5, 10):
        ldn_sys = 3
    elif _in(v, (5, 11), (5, 17)):
        ldn_sys = 4
    elif v == (5, 18):
        ldn_sys = 5
    elif _in(v, (5, 26), (5, 45)):
        ldn_sys = 8
    elif _in(v, (6, 16), (6, 31)):
        ldn_sys = 21
    elif v >= (6, 39):
        ldn_sys = 22
    else:
        ldn_sys = None

    return VersionProfile(
        version=v,
        header_format=hf,
        header_version=hv,
        message_format=mf,
        cipher=cipher,
        tag_length=tag,
        align_messages=v <= (5, 45),
        zlib_flag=zlib,
        bitmap_flag=bitmap_flag,
        no_bundle_flag=no_bundle,
        footer=footer,
        variable_id_size=var_size,
        constant_id_size=4 if v <= (4, 10) else 8,
        protocol_ids=ids,
        station_version=station,
        mesh_version=mesh,
        lan_system_version=lan_sys,
        lan_challenge_version=challenge,
        ldn_system_version=ldn_sys,
        inverse_handshake=v <= (5, 26),
    )


_PROFILES: dict[Version, VersionProfile] = {v: _build(v) for v in DOCUMENTED_VERSIONS}

#: "5.18" or "5.18.98", as written: ASCII digits only (another script's digits are no version), nothing around.
_VERSION_RE = re.compile(r"([0-9]+)\.([0-9]+)(?:\.([0-9]+))?", re.ASCII)
#: NintendoClients' packed form, "51898": ASCII digits only as well.
_PACKED_VERSION_RE = re.compile(r"[0-9]+", re.ASCII)


def parse_version(text: str | int | tuple[int, int]) -> Version:
    """Parse ``"5.18"``, ``"5.18.98"``, ``(5, 18)`` or NintendoClients' ``51898``."""
    if isinstance(text, tuple):
        return (int(text[0]), int(text[1]))
    if isinstance(text, int) or (isinstance(text, str) and _PACKED_VERSION_RE.fullmatch(text)):
        n = int(text)
        if n >= 10000:
            return (n // 10000, (n // 100) % 100)
        raise ConfigError(f"cannot read {text!r} as a Pia version (write it as 5.18)")
    m = _VERSION_RE.fullmatch(text)
    if not m:
        raise ConfigError(f"cannot read {text!r} as a Pia version (write it as 5.18)")
    return (int(m.group(1)), int(m.group(2)))


def _nearest(v: Version) -> list[Version]:
    below = [d for d in DOCUMENTED_VERSIONS if d < v]
    above = [d for d in DOCUMENTED_VERSIONS if d > v]
    return ([below[-1]] if below else []) + ([above[0]] if above else [])


def profile_for(version: str | int | Version, *, allow_nearest: bool = False) -> VersionProfile:
    """Return the profile of a documented Pia version.

    Raises:
        UnknownVersion: the version is not documented; the message names the
            nearest documented versions.  With ``allow_nearest=True`` the nearest
            documented version below (or, failing that, above) is used instead.
    """
    v = parse_version(version)
    prof = _PROFILES.get(v)
    if prof is not None:
        return prof
    near = _nearest(v)
    if allow_nearest and near:
        return _PROFILES[near[0]]
    names = " and ".join(f"{a}.{b}" for a, b in near)
    raise UnknownVersion(
        f"Pia {v[0]}.{v[1]} is not documented; the nearest documented versions are {names}"
        " (allow the nearest version to use it anyway)"
    )
