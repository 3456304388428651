"""Pia's LDN application data: the header Pia puts in the 384-byte advertisement field (spec §7.2).

Theory of operation: an LDN host advertises 384 bytes of application data in
every 802.11 advertisement frame (spec §7.1).  Pia fills its start with a
header: in 5.x a little-endian header with the *network id* (random u32) and,
from 5.9, the *session param* whose SEAD expansion gives the session key
(spec §3.3, confirmed on real traffic in §11); in 6.x a big-endian *system
property* (communication versions, user password, player limit, host name).
The game's own data follows.  Stations that scan the advertisement derive the
session key, the network id and (with the sender's MAC) the nonce from it.

Layouts (KW LDN-Application-Data-(Pia), spec §7.2):

=========  ============================================================  ======
Versions   Header                                                        Size
=========  ============================================================  ======
5.2-5.7    nid · password CRC · u8 sys ver · 3 pad · 8 zero              20
5.9-5.18   nid · CRC · u8 sys ver · u8 header size (24) · 2 pad ·        24
           u32 session param · 8 zero
5.26-5.45  nid · CRC · u8 sys ver · u8 header size (16) · 2 pad ·        16
           u32 session param
6.16-6.41  (big-endian) u16 property size (0x5C) · u8 sys ver ·          92
           u16 app ver · password (16) · u8 player limit · u8 players ·
           u32 name size · u8 encoding · name (64)
=========  ============================================================  ======

From 5.9 the header states its own size, so a 5.x decoder picks the layout
from that byte (24 or 16) rather than from the version table; that also covers
the undocumented 5.19-5.25 (encoded like 5.18, the nearest documented
neighbour below) and 5.8 (encoded like 5.7).  Padding bytes are kept as read
so decode and encode are byte-exact.
"""

from __future__ import annotations

import attrs

from protocols.errors import BadValue, ConfigError, DecodeError, EncodeError
from protocols.pia.keys import ldn6_network_id, ldn6_session_key, ldn_session_key
from protocols.pia.versions import DOCUMENTED_VERSIONS, VersionProfile, profile_for
from protocols.wire import Reader, Writer

__all__ = [
    "APPLICATION_DATA_SIZE",
    "LdnApplicationData",
    "LdnSystemProperty",
    "decode_application_data",
    "read_any_application_data",
    "ldn_family",
    "versions_with_ldn_system_version",
]

APPLICATION_DATA_SIZE = 384  # the advertisement's application-data field (spec §7.1)
SYSTEM_PROPERTY_SIZE = 0x5C  # 6.x (spec §7.2)

_PAD_SIZES = {20: 3 + 8, 24: 2 + 8, 16: 2}


def ldn_family(profile: VersionProfile) -> int:
    """5 or 6: which layout of LDN application data *profile* uses; ConfigError (one line) for a version
    with none documented."""
    v = profile.version
    if (5, 2) <= v <= (5, 45):
        return 5
    if (6, 16) <= v <= (6, 41):
        return 6
    raise ConfigError(f"Pia LDN application data is documented for 5.2-5.45 and 6.16-6.41, not {profile.name}")


def default_header_size(profile: VersionProfile) -> int:
    """Header size of a 5.x version: 20 (≤5.8), 24 (5.9-5.25), 16 (5.26-5.45)."""
    v = profile.version
    if v <= (5, 8):
        return 20
    return 24 if v <= (5, 25) else 16


@attrs.frozen
class LdnApplicationData:
    """Pia 5.x LDN application data (little-endian header, spec §7.2).

    ``header_size`` is 20 (5.2-5.7: no session param), 24 (5.9-5.18) or 16
    (5.26-5.45).  ``padding`` holds the pad and reserved bytes in wire order.
    """

    network_id: int
    password_crc: int = 0
    system_communication_version: int = 0
    session_param: int | None = None
    game_data: bytes = attrs.field(default=b"", repr=lambda b: f"<{len(b)} bytes>")
    header_size: int = 24
    padding: bytes | None = attrs.field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        profile: VersionProfile,
        *,
        network_id: int,
        session_param: int | None = None,
        password_crc: int = 0,
        game_data: bytes = b"",
    ) -> LdnApplicationData:
        """Application data of *profile*'s layout, with its LDN system communication version."""
        if ldn_family(profile) != 5:
            raise ConfigError(f"Pia {profile.name} uses LdnSystemProperty")
        size = default_header_size(profile)
        if (size == 20) != (session_param is None):
            raise ConfigError(f"Pia {profile.name} LDN application data {'has no' if size == 20 else 'needs a'} session param")
        sys_v = profile.ldn_system_version if profile.ldn_system_version is not None else 0
        return cls(network_id, password_crc, sys_v, session_param, game_data, size)

    @property
    def network_id_bytes(self) -> bytes:
        """The network id as transmitted (little-endian): the LDN nonce CRC input (spec §11)."""
        return self.network_id.to_bytes(4, "little")

    def session_key(self, game_key: bytes) -> bytes:
        """Session key for 5.9-5.45 (SEAD(session param) → AES-ECB, spec §3.3/§11)."""
        if self.session_param is None:
            raise ConfigError("this application data has no session param (Pia <= 5.7: key supplied by the game)")
        return ldn_session_key(game_key, self.session_param)

    def encode(self, profile: VersionProfile | None = None) -> bytes:
        if profile is not None and ldn_family(profile) != 5:
            raise ConfigError(f"Pia {profile.name} uses LdnSystemProperty")
        if self.header_size not in _PAD_SIZES:
            raise EncodeError(f"header size must be 20, 24 or 16, not {self.header_size}")
        pad = self.padding if self.padding is not None else bytes(_PAD_SIZES[self.header_size])
        if len(pad) != _PAD_SIZES[self.header_size]:
            raise EncodeError(f"a {self.header_size}-byte header has {_PAD_SIZES[self.header_size]} padding bytes")
        if (self.header_size == 20) != (self.session_param is None):
            raise EncodeError("a session param is present exactly in the 24- and 16-byte headers")
        w = Writer()
        w.u32_le(self.network_id, "network_id")
        w.u32_le(self.password_crc, "password_crc")
        w.u8(self.system_communication_version, "system_communication_version")
        if self.header_size == 20:
            w.bytes(pad)
        else:
            w.u8(self.header_size)
            w.bytes(pad[:2])
            assert self.session_param is not None
            w.u32_le(self.session_param, "session_param")
            w.bytes(pad[2:])
        w.bytes(self.game_data)
        if len(w) > APPLICATION_DATA_SIZE:
            raise EncodeError(f"application data of {len(w)} bytes exceeds {APPLICATION_DATA_SIZE}")
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes, profile: VersionProfile) -> LdnApplicationData:
        if ldn_family(profile) != 5:
            raise ConfigError(f"Pia {profile.name} uses LdnSystemProperty")
        if len(data) > APPLICATION_DATA_SIZE:
            raise BadValue(f"application data of {len(data)} bytes exceeds {APPLICATION_DATA_SIZE}")
        r = Reader(data)
        nid, crc, sys_v = r.u32_le("network id"), r.u32_le("password CRC"), r.u8("system version")
        if profile.version <= (5, 8):
            pad = r.bytes(11, "header padding")
            return cls(nid, crc, sys_v, None, r.rest(), 20, _none_if_zero(pad))
        size = r.u8("header size")
        if size not in (16, 24):
            raise BadValue(f"Pia {profile.name} LDN header size must be 16 or 24, got {size}")
        pad = r.bytes(2, "header padding")
        param = r.u32_le("session param")
        if size == 24:
            pad += r.bytes(8, "reserved")
        return cls(nid, crc, sys_v, param, r.rest(), size, _none_if_zero(pad))


def _none_if_zero(pad: bytes) -> bytes | None:
    return None if pad.count(0) == len(pad) else pad


@attrs.frozen
class LdnSystemProperty:
    """Pia 6.16-6.41 LDN application data: the big-endian system property and game data (spec §7.2).

    The network id and session key come from the SSID, not from here
    (:meth:`network_id_for`, :meth:`session_key`).
    """

    system_communication_version: int
    application_communication_version: int = 0
    user_password: bytes = attrs.field(default=bytes(16), repr=False)
    player_limit_enabled: bool = False
    player_count: int = 0
    player_name_size: int = 0
    encoding: int = 0
    player_name_raw: bytes = attrs.field(default=bytes(64), repr=False)
    game_data: bytes = attrs.field(default=b"", repr=lambda b: f"<{len(b)} bytes>")
    property_size: int = SYSTEM_PROPERTY_SIZE
    #: Bytes between 0x5C and ``property_size`` when a larger property size is announced.
    extra: bytes = attrs.field(default=b"", repr=False)

    @property
    def player_name(self) -> str:
        raw = self.player_name_raw[: min(self.player_name_size, 64)]
        codec = "utf-16-le" if self.encoding == 2 else "utf-8"
        return raw.decode(codec, errors="replace").split("\0", 1)[0]

    @staticmethod
    def network_id_for(ssid: bytes) -> int:
        """6.x network id: CRC-32 of ``ssid[1:16]`` (spec §11)."""
        return ldn6_network_id(ssid)

    @staticmethod
    def session_key(game_key: bytes, ssid: bytes) -> bytes:
        """6.x session key: AES-128-ECB(game key, SSID) (spec §11)."""
        return ldn6_session_key(game_key, ssid)

    def encode(self, profile: VersionProfile | None = None) -> bytes:
        if profile is not None and ldn_family(profile) != 6:
            raise ConfigError(f"Pia {profile.name} uses the 5.x LDN header")
        if len(self.user_password) != 16 or len(self.player_name_raw) != 64:
            raise EncodeError("user password is 16 bytes and player name 64 bytes")
        if self.property_size != SYSTEM_PROPERTY_SIZE + len(self.extra):
            raise EncodeError("property size must be 0x5C plus the extra bytes")
        w = Writer()
        w.u16(self.property_size, "property_size")
        w.u8(self.system_communication_version, "system_communication_version")
        w.u16(self.application_communication_version, "application_communication_version")
        w.bytes(self.user_password)
        w.u8(int(self.player_limit_enabled))
        w.u8(self.player_count, "player_count")
        w.u32(self.player_name_size, "player_name_size")
        w.u8(self.encoding, "encoding")
        w.bytes(self.player_name_raw)
        w.bytes(self.extra)
        w.bytes(self.game_data)
        if len(w) > APPLICATION_DATA_SIZE:
            raise EncodeError(f"application data of {len(w)} bytes exceeds {APPLICATION_DATA_SIZE}")
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes, profile: VersionProfile | None = None) -> LdnSystemProperty:
        if profile is not None and ldn_family(profile) != 6:
            raise ConfigError(f"Pia {profile.name} uses the 5.x LDN header")
        if len(data) > APPLICATION_DATA_SIZE:
            raise BadValue(f"application data of {len(data)} bytes exceeds {APPLICATION_DATA_SIZE}")
        r = Reader(data)
        size = r.u16("property size")
        if size < SYSTEM_PROPERTY_SIZE:
            raise BadValue(f"system property size {size} is below 0x5C")
        sys_v, app_v = r.u8(), r.u16()
        password = r.bytes(16, "user password")
        limit = r.u8("player limit enabled")
        if limit > 1:
            raise BadValue(f"player limit flag {limit}")
        players, name_size, encoding = r.u8(), r.u32(), r.u8()
        name = r.bytes(64, "player name")
        extra = r.bytes(size - SYSTEM_PROPERTY_SIZE, "system property")
        return cls(sys_v, app_v, password, limit == 1, players, name_size, encoding, name, r.rest(), size, extra)


def decode_application_data(data: bytes, profile: VersionProfile) -> LdnApplicationData | LdnSystemProperty:
    """Decode the Pia part of an LDN advertisement's application data for *profile*."""
    if ldn_family(profile) == 5:
        return LdnApplicationData.decode(data, profile)
    return LdnSystemProperty.decode(data, profile)


def read_any_application_data(data: bytes) -> LdnApplicationData | LdnSystemProperty | None:
    """The Pia header of application data of *any* version this module reads (5.9-5.45 or 6.x), or None.

    For a network a scan's version cannot read: its header states its family, and its system communication
    version which Pia versions it is (:func:`versions_with_ldn_system_version`).  A 6.x property starts with
    its size, 0x5C, so it is tried first when it does.
    """
    readers = [_read5, _read6]
    if data[:2] == SYSTEM_PROPERTY_SIZE.to_bytes(2, "big"):
        readers.reverse()
    for read in readers:
        try:
            return read(data)
        except DecodeError:
            continue
    return None


def _read5(data: bytes) -> LdnApplicationData:
    return LdnApplicationData.decode(data, profile_for("5.18"))  # the header size byte picks 5.9-5.45's layout


def _read6(data: bytes) -> LdnSystemProperty:
    return LdnSystemProperty.decode(data)


def versions_with_ldn_system_version(header: LdnApplicationData | LdnSystemProperty) -> tuple[str, ...]:
    """The documented Pia versions of *header*'s family whose LDN system communication version it carries."""
    family = 5 if isinstance(header, LdnApplicationData) else 6
    out = []
    for version in DOCUMENTED_VERSIONS:
        profile = profile_for(version)
        if profile.ldn_system_version != header.system_communication_version:
            continue  # (also every version without LDN: None)
        if (6, 16) <= profile.version <= (6, 41) if family == 6 else (5, 2) <= profile.version <= (5, 45):
            out.append(profile.name)
    return tuple(out)
