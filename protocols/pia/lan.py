"""Pia LAN mode wire formats: session info, browse packets, crypto challenge, LAN messages.

Theory of operation (spec §6): a browser broadcasts a *browse request* (packet
type 0) holding search criteria and, from Pia 5.7, a *crypto challenge*; every
host whose session matches answers with a *browse reply* (type 1) holding its
:class:`LanSessionInfo` (5.x) or :class:`LanNetworkProperty` (6.x) and a
*challenge reply*.  The reply proves the host knows the game key, and fixes the
32-byte *session key param* from which everyone derives the session key
(:func:`lan_session_key`, spec §3.3).  After that, LAN protocol messages
(protocol 0x44, spec §6.5) travel inside ordinary Pia packets.

Everything here is sans-IO: bytes in, frozen values out, and back byte-exact.
Decoders raise only :class:`~protocols.errors.DecodeError` subclasses.

Layout choices where the sources disagree (spec §10):

* LanSessionInfo 5.10: KW gives an 18-byte host address, NintendoClients a
  6-byte one (§10.4).  We encode 18 by default (``LanHostAddress.address_size``
  selects 6) and decode both, telling them apart by the total size
  (1297 vs 1285).
* The ≤5.9 host is a 35-byte 5.2-5.9 StationLocation (spec §5.2), decoded with
  the shared codec in :mod:`protocols.pia.types`; host messages carry a
  StationConnectionInfo (≤5.9) or StationLocation (5.10+) from the same module.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
from typing import Union

import attrs

from protocols.crypto.aead import gcm
from protocols.errors import (
    AuthenticationError,
    BadValue,
    ConfigError,
    EncodeError,
    UnsupportedVersion,
)
from protocols.pia.keys import aes_ecb_encrypt, lan_session_key  # lan_session_key re-exported: spec §3.3 LAN rule
from protocols.pia.lan_criteria import LanSearchNetworkSetting, LanSessionSearchCriteria
from protocols.pia.types import (
    StationLocation,
    decode_station_location,
)
from protocols.pia.versions import VersionProfile
from protocols.wire import Reader, Writer

__all__ = [
    "BROWSE_PORT_5",
    "BROWSE_PORT_6",
    "BrowseReply",
    "BrowseRequest",
    "ChallengeReply",
    "ChallengeRequest",
    "LanHostAddress",
    "LanNetworkProperty",
    "LanSessionInfo",
    "LanStationInfo",
    "browse_port",
    "challenge_nonce",
    "lan_session_key",
    "open_challenge_request",
    "seal_challenge_reply",
    "seal_challenge_request",
    "verify_challenge_reply",
]

BROWSE_PORT_5 = 30000  # spec §6.1, Pia <= 5.45
BROWSE_PORT_6 = 35000  # Pia 6.16-7.2
APPLICATION_DATA_SIZE = 0x180  # 384
STATION_COUNT = 16
HOST_LOCATION_SIZE = 35  # 5.2-5.9 StationLocation (spec §5.2)
SYSTEM_PROPERTY_SIZE = 0x7C  # 6.29-6.30 LAN system property (spec §6.3)
SESSION_FRAGMENT_SIZE = 800  # spec §6.5


def browse_port(profile: VersionProfile) -> int:
    return BROWSE_PORT_6 if profile.version >= (6, 0) else BROWSE_PORT_5


def _lan_family(profile: VersionProfile) -> int:
    """5 or 6: which LAN layout family a version uses; ConfigError outside the documented spans."""
    if (5, 2) <= profile.version <= (5, 45):
        return 5
    if (6, 16) <= profile.version <= (6, 30):
        return 6
    raise ConfigError(f"LAN browse formats are documented for Pia 5.2-5.45 and 6.16-6.30, not {profile.name}")


def _bool(r: Reader, what: str) -> bool:
    v = r.u8(what)
    if v > 1:
        raise BadValue(f"{what}: boolean byte {v}")
    return v == 1


def _read_padded(r: Reader, field_size: int, what: str) -> tuple[bytes, bytes]:
    """Read a zero-padded field whose used size follows it as u32; return (data, nonzero padding or b"")."""
    raw = r.bytes(field_size, what)
    size = r.u32(f"{what} size")
    if size > field_size:
        raise BadValue(f"{what}: size {size} exceeds its {field_size}-byte field")
    pad = raw[size:]
    return raw[:size], (b"" if pad.count(0) == len(pad) else pad)


def _write_padded(w: Writer, data: bytes, pad: bytes, field_size: int, what: str) -> None:
    if len(data) > field_size:
        raise EncodeError(f"{what}: {len(data)} bytes do not fit in {field_size}")
    if pad and len(pad) != field_size - len(data):
        raise EncodeError(f"{what}: padding of {len(pad)} bytes for {len(data)} bytes of data")
    w.bytes(data)
    w.bytes(pad or bytes(field_size - len(data)))
    w.u32(len(data))


# ---------------------------------------------------------------------------
# Addresses and host locations


def _ip4_bytes(ip: str) -> bytes:
    try:
        return ipaddress.IPv4Address(ip).packed
    except ValueError:
        raise ConfigError(f"not an IPv4 address: {ip!r}") from None


def _write_inet18(w: Writer, ip: str, port: int) -> None:
    # 18-byte InetAddress (spec §5.2): an IPv4 address is written as its 4 bytes
    # followed by 12 zero bytes (NC's form; not ::ffff:-mapped).
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise EncodeError(f"not an IP address: {ip!r}") from None
    w.fixed(addr.packed, 16, "address")
    w.u16(port, "port")


def _read_inet18(r: Reader) -> tuple[str, int]:
    raw = r.bytes(16, "address")
    port = r.u16("port")
    if raw[4:].count(0) == 12:
        return str(ipaddress.IPv4Address(raw[:4])), port
    return str(ipaddress.IPv6Address(raw)), port


@attrs.frozen
class LanHostAddress:
    """Host address and ids of a 5.10-5.45 LanSessionInfo (spec §6.3).

    ``address_size`` is 18 (KW; every 5.11+ host) or 6 (NintendoClients' 5.10 form).
    """

    ip: str
    port: int
    constant_id: int
    variable_id: int
    service_variable_id: int
    address_size: int = 18


LanHost = Union[StationLocation, LanHostAddress]


# ---------------------------------------------------------------------------
# LanStationInfo / LanSessionInfo


class NameEncoding(enum.IntEnum):
    NONE = 0
    UTF8 = 1
    UTF16 = 2


@attrs.frozen
class LanStationInfo:
    """One of the 16 station slots of a LanSessionInfo (50 bytes, spec §6.3).

    ``username_raw`` keeps the 40 wire bytes; :attr:`username` decodes them.
    Role 0 marks an empty slot, 1 the host, 2 a player.
    """

    role: int = 0
    encoding: int = 0
    username_raw: bytes = attrs.field(default=bytes(40), repr=False)
    constant_id: int = 0

    SIZE = 50

    @classmethod
    def make(cls, role: int, name: str, constant_id: int, encoding: int = NameEncoding.UTF8) -> LanStationInfo:
        raw = name.encode("utf-16-le" if encoding == NameEncoding.UTF16 else "utf-8")
        if len(raw) > 40:
            raise EncodeError(f"user name {name!r} is longer than 40 bytes")
        return cls(role, int(encoding), raw.ljust(40, b"\0"), constant_id)

    @property
    def username(self) -> str:
        raw = self.username_raw
        if self.encoding == NameEncoding.UTF16:
            codec = "utf-16" if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-16-le"
            text = raw.decode(codec, errors="replace")
        elif self.encoding == NameEncoding.UTF8:
            text = raw.decode("utf-8", errors="replace")
        else:
            return ""
        return text.split("\0", 1)[0]

    def write(self, w: Writer) -> None:
        if len(self.username_raw) != 40:
            raise EncodeError("username_raw must be 40 bytes")
        w.u8(self.role, "role")
        w.u8(self.encoding, "encoding")
        w.bytes(self.username_raw)
        w.u64(self.constant_id, "constant_id")

    @classmethod
    def read(cls, r: Reader) -> LanStationInfo:
        return cls(r.u8(), r.u8(), r.bytes(40, "username"), r.u64("constant id"))


_EMPTY_STATIONS = (LanStationInfo(),) * STATION_COUNT


def _stations(value: object) -> tuple[LanStationInfo, ...]:
    t = tuple(value)  # type: ignore[call-overload]
    if len(t) > STATION_COUNT:
        raise EncodeError(f"at most {STATION_COUNT} station entries, got {len(t)}")
    return t + (LanStationInfo(),) * (STATION_COUNT - len(t))


@attrs.frozen
class LanSessionInfo:
    """LanSessionInfo, Pia 5.2-5.45 (spec §6.3): 1266 (≤5.6), 1298 (5.7-5.9), 1297 (5.10-5.45) bytes.

    ``system_communication_version`` / ``application_communication_version``
    are None in ≤5.2 (whose session type is a u32); ``session_key_param`` is
    None up to 5.6.  ``host`` is a 5.2-5.9 :class:`~protocols.pia.types.StationLocation`
    up to 5.9 and a :class:`LanHostAddress` from 5.10; the ``host_*`` properties
    read either.
    """

    game_mode: int
    network_id: int
    host: LanHost
    attributes: tuple[int, ...] = (0,) * 6
    current_participants: int = 0
    min_participants: int = 0
    max_participants: int = 0
    system_communication_version: int | None = None
    application_communication_version: int | None = None
    session_type: int = 0
    application_data: bytes = b""
    is_opened: bool = True
    stations: tuple[LanStationInfo, ...] = attrs.field(default=_EMPTY_STATIONS, converter=_stations, repr=False)
    session_key_param: bytes | None = attrs.field(default=None, repr=lambda b: "None" if b is None else b.hex())
    #: Non-zero bytes after the application data in its 384-byte field (kept for byte-exactness).
    application_data_padding: bytes = attrs.field(default=b"", repr=False)

    @property
    def host_ip(self) -> str:
        h = self.host
        return h.ip if isinstance(h, LanHostAddress) else str(h.public.ip or "")

    @property
    def host_port(self) -> int:
        h = self.host
        return h.port if isinstance(h, LanHostAddress) else h.public.port

    @property
    def host_constant_id(self) -> int:
        return self.host.constant_id

    @property
    def host_variable_id(self) -> int:
        return self.host.variable_id

    @property
    def host_service_variable_id(self) -> int:
        return self.host.service_variable_id

    def session_key(self, game_key: bytes) -> bytes:
        """The LAN session key derived from the published param (spec §3.3)."""
        if self.session_key_param is None:
            raise ConfigError("this LanSessionInfo carries no session key param (Pia <= 5.6)")
        return lan_session_key(game_key, self.session_key_param)

    @staticmethod
    def size_for(profile: VersionProfile, *, address_size: int = 18) -> int:
        v = profile.version
        if v <= (5, 6):
            return 1266
        if v <= (5, 9):
            return 1298
        return 1285 + address_size - 6

    def encode(self, profile: VersionProfile) -> bytes:
        if _lan_family(profile) != 5:
            raise ConfigError(f"Pia {profile.name} uses LanNetworkProperty, not LanSessionInfo")
        v = profile.version
        w = Writer()
        w.u32(self.game_mode, "game_mode")
        w.u32(self.network_id, "network_id")
        if len(self.attributes) != 6:
            raise EncodeError(f"LanSessionInfo has 6 attributes, got {len(self.attributes)}")
        for a in self.attributes:
            w.u32(a, "attribute")
        w.u16(self.current_participants, "current_participants")
        w.u16(self.min_participants, "min_participants")
        w.u16(self.max_participants, "max_participants")
        if v <= (5, 2):
            if self.system_communication_version is not None:
                raise EncodeError("Pia <= 5.2 LanSessionInfo has no communication versions")
            w.u32(self.session_type, "session_type")
        else:
            if self.system_communication_version is None or self.application_communication_version is None:
                raise EncodeError(f"Pia {profile.name} LanSessionInfo needs both communication versions")
            w.u8(self.system_communication_version, "system_communication_version")
            w.u8(self.application_communication_version, "application_communication_version")
            w.u16(self.session_type, "session_type")
        _write_padded(w, self.application_data, self.application_data_padding, APPLICATION_DATA_SIZE, "application data")
        w.u8(int(self.is_opened))
        host = self.host
        if v <= (5, 9):
            if not isinstance(host, StationLocation):
                raise EncodeError(f"Pia {profile.name} LanSessionInfo needs a StationLocation host")
            start = len(w)
            host.write(w, profile)
            if len(w) - start != HOST_LOCATION_SIZE:
                raise EncodeError(f"host StationLocation must be {HOST_LOCATION_SIZE} bytes in Pia {profile.name}")
        else:
            if not isinstance(host, LanHostAddress):
                raise EncodeError(f"Pia {profile.name} LanSessionInfo needs a LanHostAddress host")
            if host.address_size == 18:
                _write_inet18(w, host.ip, host.port)
            elif host.address_size == 6 and v == (5, 10):
                w.bytes(_ip4_bytes(host.ip))
                w.u16(host.port, "port")
            else:
                raise EncodeError(f"host address size {host.address_size} is not used by Pia {profile.name}")
            w.u64(host.constant_id, "constant_id")
            w.u32(host.variable_id, "variable_id")
            w.u32(host.service_variable_id, "service_variable_id")
        for st in self.stations:
            st.write(w)
        if v >= (5, 7):
            if self.session_key_param is None or len(self.session_key_param) != 32:
                raise EncodeError(f"Pia {profile.name} LanSessionInfo needs a 32-byte session key param")
            w.bytes(self.session_key_param)
        elif self.session_key_param is not None:
            raise EncodeError(f"Pia {profile.name} LanSessionInfo has no session key param")
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes, profile: VersionProfile) -> LanSessionInfo:
        if _lan_family(profile) != 5:
            raise ConfigError(f"Pia {profile.name} uses LanNetworkProperty, not LanSessionInfo")
        v = profile.version
        r = Reader(data)
        game_mode, network_id = r.u32(), r.u32()
        attributes = tuple(r.u32() for _ in range(6))
        cur, mn, mx = r.u16(), r.u16(), r.u16()
        sys_v: int | None
        app_v: int | None
        if v <= (5, 2):
            sys_v = app_v = None
            session_type = r.u32()
        else:
            sys_v, app_v, session_type = r.u8(), r.u8(), r.u16()
        app, pad = _read_padded(r, APPLICATION_DATA_SIZE, "application data")
        opened = _bool(r, "is opened")
        host: LanHost
        if v <= (5, 9):
            with r.restrict_to(HOST_LOCATION_SIZE, "host StationLocation") as sub:
                host = decode_station_location(sub, profile)
        else:
            if v == (5, 10) and len(data) == cls.size_for(profile, address_size=6):
                ip, port, size = str(ipaddress.IPv4Address(r.bytes(4))), r.u16(), 6
            else:
                (ip, port), size = _read_inet18(r), 18
            host = LanHostAddress(ip, port, r.u64(), r.u32(), r.u32(), size)
        stations = tuple(LanStationInfo.read(r) for _ in range(STATION_COUNT))
        param = r.bytes(32, "session key param") if v >= (5, 7) else None
        r.expect_end("LanSessionInfo")
        return cls(
            game_mode=game_mode,
            network_id=network_id,
            host=host,
            attributes=attributes,
            current_participants=cur,
            min_participants=mn,
            max_participants=mx,
            system_communication_version=sys_v,
            application_communication_version=app_v,
            session_type=session_type,
            application_data=app,
            is_opened=opened,
            stations=stations,
            session_key_param=param,
            application_data_padding=pad,
        )


@attrs.frozen
class LanNetworkProperty:
    """LanNetworkProperty, Pia 6.29-6.30 (557 bytes, spec §6.3); also used for 6.16-6.26, unverified.

    ``property_data`` is the system property (0x7C bytes: size, communication
    versions, password, player limit, host name, session key param at 0x5C)
    followed by the game's application data.
    """

    network_id: int
    property_data: bytes = attrs.field(repr=False)
    matchmake_key: int = 0
    current_stations: int = 0
    max_stations: int = 0
    is_opened: bool = True
    has_player_limit: bool = False
    current_players: int = 0
    host_ip: str = "0.0.0.0"
    host_port: int = 0
    property_padding: bytes = attrs.field(default=b"", repr=False)

    SIZE = 0x22D
    PROPERTY_FIELD = 0x200

    @property
    def session_key_param(self) -> bytes | None:
        p = self.property_data
        return p[0x5C:0x7C] if len(p) >= 0x7C else None

    @property
    def system_communication_version(self) -> int | None:
        """Byte 2 of the system property (spec §6.3); None when the property data is too short."""
        p = self.property_data
        return p[2] if len(p) >= 3 else None

    @property
    def application_communication_version(self) -> int | None:
        p = self.property_data
        return int.from_bytes(p[3:5], "big") if len(p) >= 5 else None

    @property
    def host_name(self) -> str:
        """Host name from the system property: u32 size at 0x17, encoding at 0x1B, 64 bytes at 0x1C."""
        p = self.property_data
        if len(p) < 0x5C:
            return ""
        size = min(int.from_bytes(p[0x17:0x1B], "big"), 64)
        codec = "utf-16-le" if p[0x1B] == 2 else "utf-8"
        return p[0x1C : 0x1C + size].decode(codec, errors="replace").split("\0", 1)[0]

    @property
    def application_data(self) -> bytes:
        """The game's bytes after the 0x7C-byte system property."""
        return self.property_data[SYSTEM_PROPERTY_SIZE:]

    @classmethod
    def system_property(
        cls,
        *,
        system_version: int,
        application_version: int = 0,
        password: bytes = bytes(16),
        has_player_limit: bool = False,
        players: int = 1,
        host_name: str = "",
        session_key_param: bytes = bytes(32),
    ) -> bytes:
        """The 0x7C-byte system property that starts ``property_data`` (spec §6.3)."""
        name = host_name.encode("utf-8")
        if len(name) > 64 or len(password) != 16 or len(session_key_param) != 32:
            raise EncodeError("host name <= 64 bytes, password 16 bytes, session key param 32 bytes")
        w = Writer()
        w.u16(SYSTEM_PROPERTY_SIZE)
        w.u8(system_version, "system_version")
        w.u16(application_version, "application_version")
        w.bytes(password)
        w.u8(int(has_player_limit))
        w.u8(players, "players")
        w.u32(len(name))
        w.u8(NameEncoding.UTF8)
        w.fixed(name, 64, "host name")
        w.bytes(session_key_param)
        return w.getvalue()

    def with_session_key_param(self, param: bytes) -> LanNetworkProperty:
        if len(self.property_data) < SYSTEM_PROPERTY_SIZE or len(param) != 32:
            raise EncodeError("property data holds no session key param slot")
        p = self.property_data
        return attrs.evolve(self, property_data=p[:0x5C] + bytes(param) + p[0x7C:])

    def session_key(self, game_key: bytes) -> bytes:
        param = self.session_key_param
        if param is None:
            raise ConfigError("property data too short to hold a session key param")
        return lan_session_key(game_key, param)

    def encode(self, profile: VersionProfile | None = None) -> bytes:
        w = Writer()
        w.u64(self.network_id, "network_id")
        _write_padded(w, self.property_data, self.property_padding, self.PROPERTY_FIELD, "property data")
        w.u64(self.matchmake_key, "matchmake_key")
        w.u16(self.current_stations, "current_stations")
        w.u16(self.max_stations, "max_stations")
        w.u8(int(self.is_opened))
        w.u8(int(self.has_player_limit))
        w.u8(self.current_players, "current_players")
        _write_inet18(w, self.host_ip, self.host_port)
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes, profile: VersionProfile | None = None) -> LanNetworkProperty:
        r = Reader(data)
        nid = r.u64()
        prop, pad = _read_padded(r, cls.PROPERTY_FIELD, "property data")
        key, cur, mx = r.u64(), r.u16(), r.u16()
        opened, limit, players = _bool(r, "opened"), _bool(r, "has player limit"), r.u8()
        ip, port = _read_inet18(r)
        r.expect_end("LanNetworkProperty")
        return cls(nid, prop, key, cur, mx, opened, limit, players, ip, port, pad)


# ---------------------------------------------------------------------------
# Crypto challenge (spec §6.4)

REQUEST_DATA_SIZE = 256
REPLY_DATA_SIZE = 16


def _check_game_key(game_key: bytes) -> bytes:
    if len(game_key) != 16:
        raise ConfigError(f"game key must be 16 bytes, got {len(game_key)}")
    return bytes(game_key)


def challenge_nonce(broadcast_ip: str, counter: int) -> bytes:
    """12-byte GCM nonce: broadcast IPv4 (4) ‖ u64 counter, big-endian (spec §6.4)."""
    return _ip4_bytes(broadcast_ip) + counter.to_bytes(8, "big")


@attrs.frozen
class _Challenge:
    version: int
    enabled: bool
    counter: int
    key: bytes = attrs.field(repr=bytes.hex)
    tag: bytes = attrs.field(repr=bytes.hex)
    data: bytes = attrs.field(repr=False)
    #: Version 4 (6.40-6.41) only: request sequence id, echoed by the reply.
    sequence_id: int | None = None

    DATA_SIZE = 0

    def encode(self) -> bytes:
        if not 1 <= self.version <= 4:
            raise EncodeError(f"challenge version {self.version} has no documented layout")
        if (self.version == 4) != (self.sequence_id is not None):
            raise EncodeError("a sequence id is present exactly in challenge version 4")
        if len(self.key) != 16 or len(self.tag) != 16 or len(self.data) != self.DATA_SIZE:
            raise EncodeError(f"challenge fields must be 16, 16 and {self.DATA_SIZE} bytes")
        w = Writer()
        w.u8(self.version)
        w.u8(int(self.enabled))
        if self.sequence_id is not None:
            w.u8(self.sequence_id, "sequence_id")
        w.u64(self.counter, "counter")
        w.bytes(self.key)
        w.bytes(self.tag)
        w.bytes(self.data)
        return w.getvalue()

    @classmethod
    def read(cls, r: Reader) -> _Challenge:
        version = r.u8("challenge version")
        if not 1 <= version <= 4:
            raise UnsupportedVersion(f"challenge version {version} has no documented layout")
        enabled = _bool(r, "crypto enabled")
        seq = r.u8("sequence id") if version == 4 else None
        counter = r.u64("nonce counter")
        key, tag = r.bytes(16, "challenge key"), r.bytes(16, "tag")
        data = r.bytes(cls.DATA_SIZE, "challenge data")
        return cls(version, enabled, counter, key, tag, data, seq)

    @classmethod
    def decode(cls, data: bytes) -> _Challenge:
        r = Reader(data)
        v = cls.read(r)
        r.expect_end("crypto challenge")
        return v


@attrs.frozen
class ChallengeRequest(_Challenge):
    """Crypto challenge in a browse request: 298 bytes (299 in version 4)."""

    DATA_SIZE = REQUEST_DATA_SIZE


@attrs.frozen
class ChallengeReply(_Challenge):
    """Crypto challenge reply in a browse reply: 58 bytes (59 in version 4)."""

    DATA_SIZE = REPLY_DATA_SIZE


def _ecb(key: bytes, block: bytes) -> bytes:
    return aes_ecb_encrypt(key, block)


def seal_challenge_request(
    game_key: bytes,
    *,
    version: int,
    key: bytes,
    plaintext: bytes,
    counter: int,
    broadcast_ip: str,
    sequence_id: int | None = None,
    backend: str | None = None,
) -> ChallengeRequest:
    """Step 1 of spec §6.4: ``k1 = AES-ECB(game_key, key)``; GCM-seal *plaintext* (256 bytes)."""
    k1 = _ecb(_check_game_key(game_key), key)
    ct, tag = gcm(k1, backend).seal(challenge_nonce(broadcast_ip, counter), plaintext)
    return ChallengeRequest(version, True, counter, key, tag, ct, sequence_id)


def open_challenge_request(
    request: ChallengeRequest, game_key: bytes, broadcast_ip: str, *, backend: str | None = None
) -> bytes:
    """Host side: decrypt and verify a request; return the 256-byte challenge.

    Raises:
        AuthenticationError: crypto disabled, or the tag does not verify.
    """
    if not request.enabled:
        raise AuthenticationError("challenge has crypto disabled")
    k1 = _ecb(_check_game_key(game_key), request.key)
    return gcm(k1, backend).open(challenge_nonce(broadcast_ip, request.counter), request.data, request.tag)


def _reply_parts(game_key: bytes, param: bytes, challenge: bytes) -> tuple[bytes, bytes]:
    k2 = hmac.digest(game_key, param, hashlib.sha256)[:16]
    resp = hmac.digest(game_key, challenge, hashlib.sha256)[:16]
    return k2, resp


def seal_challenge_reply(
    game_key: bytes,
    request: ChallengeRequest,
    challenge: bytes,
    *,
    key: bytes,
    counter: int,
    broadcast_ip: str,
    backend: str | None = None,
) -> tuple[ChallengeReply, bytes]:
    """Step 2 of spec §6.4.  Returns the reply and the session key param ``key ‖ request.key``."""
    game_key = _check_game_key(game_key)
    param = bytes(key) + request.key
    k2, resp = _reply_parts(game_key, param, challenge)
    ct, tag = gcm(k2, backend).seal(challenge_nonce(broadcast_ip, counter), resp)
    reply = ChallengeReply(request.version, True, counter, bytes(key), tag, ct, request.sequence_id)
    return reply, param


def verify_challenge_reply(
    reply: ChallengeReply,
    game_key: bytes,
    request_key: bytes,
    challenge: bytes,
    broadcast_ip: str,
    *,
    backend: str | None = None,
) -> bytes:
    """Step 3 of spec §6.4: browser side.  Returns the session key param.

    Raises:
        AuthenticationError: crypto disabled, wrong tag, or a response that is
            not ``HMAC-SHA256(game_key, challenge)[:16]``.
    """
    if not reply.enabled:
        raise AuthenticationError("challenge reply has crypto disabled")
    game_key = _check_game_key(game_key)
    param = reply.key + bytes(request_key)
    k2, expected = _reply_parts(game_key, param, challenge)
    got = gcm(k2, backend).open(challenge_nonce(broadcast_ip, reply.counter), reply.data, reply.tag)
    if not hmac.compare_digest(got, expected):
        raise AuthenticationError("challenge response does not match the challenge")
    return param


# ---------------------------------------------------------------------------
# Browse request / reply packets (spec §6.2, §6.3)


def _search_size(profile: VersionProfile) -> int:
    if _lan_family(profile) == 5:
        return 0x23A
    return LanSearchNetworkSetting.size_for(profile)


@attrs.frozen
class BrowseRequest:
    """Browse request (packet type 0): search criteria/setting and the challenge (5.7+)."""

    search: LanSessionSearchCriteria | LanSearchNetworkSetting
    challenge: ChallengeRequest | None = None

    def encode(self, profile: VersionProfile) -> bytes:
        fam = _lan_family(profile)
        if fam == 5:
            if not isinstance(self.search, LanSessionSearchCriteria):
                raise EncodeError(f"Pia {profile.name} browse requests carry LanSessionSearchCriteria")
            body = self.search.encode()
        else:
            if not isinstance(self.search, LanSearchNetworkSetting):
                raise EncodeError(f"Pia {profile.name} browse requests carry LanSearchNetworkSetting")
            body = self.search.encode(profile)
        w = Writer()
        w.u8(0)
        w.u32(len(body))
        w.bytes(body)
        if (profile.lan_challenge_version is None) != (self.challenge is None):
            raise EncodeError(f"Pia {profile.name} browse requests {'need' if self.challenge is None else 'have'} no challenge")
        if self.challenge is not None:
            w.bytes(self.challenge.encode())
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes, profile: VersionProfile) -> BrowseRequest:
        fam = _lan_family(profile)
        r = Reader(data)
        if (t := r.u8("packet type")) != 0:
            raise BadValue(f"packet type {t} is not a browse request (0)")
        size = r.u32("search size")
        if size != _search_size(profile):
            raise BadValue(f"search block of {size} bytes; Pia {profile.name} uses {_search_size(profile)}")
        search: LanSessionSearchCriteria | LanSearchNetworkSetting
        if fam == 5:
            search = LanSessionSearchCriteria.read(r)
        else:
            with r.restrict_to(size, "LanSearchNetworkSetting") as s:
                search = LanSearchNetworkSetting.read(s, profile)
        challenge = ChallengeRequest.read(r) if profile.lan_challenge_version is not None else None
        r.expect_end("browse request")
        return cls(search, challenge)  # type: ignore[arg-type]


@attrs.frozen
class BrowseReply:
    """Browse reply (packet type 1): the session and the challenge reply (5.7+)."""

    session: LanSessionInfo | LanNetworkProperty
    challenge: ChallengeReply | None = None

    def encode(self, profile: VersionProfile) -> bytes:
        body = self.session.encode(profile)
        w = Writer()
        w.u8(1)
        w.u32(len(body))
        w.bytes(body)
        if (profile.lan_challenge_version is None) != (self.challenge is None):
            raise EncodeError(f"Pia {profile.name} browse replies {'need' if self.challenge is None else 'have'} no challenge")
        if self.challenge is not None:
            w.bytes(self.challenge.encode())
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes, profile: VersionProfile) -> BrowseReply:
        fam = _lan_family(profile)
        r = Reader(data)
        if (t := r.u8("packet type")) != 1:
            raise BadValue(f"packet type {t} is not a browse reply (1)")
        size = r.u32("session size")
        body = r.bytes(size, "session")
        session = LanSessionInfo.decode(body, profile) if fam == 5 else LanNetworkProperty.decode(body, profile)
        challenge = ChallengeReply.read(r) if profile.lan_challenge_version is not None else None
        r.expect_end("browse reply")
        return cls(session, challenge)  # type: ignore[arg-type]
