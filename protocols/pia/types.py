"""Pia common types: addresses, station locations, player infos, mesh station infos.

Theory of operation: every type is a frozen ``attrs`` value that holds the
union of the fields any Pia version puts on the wire.  ``encode(profile)``
writes the layout of that profile's version, using only the fields that
version has (the others must keep their defaults for a byte-exact round
trip), and the matching ``decode_*(source, profile)`` reads it back.  A source
is either a :class:`~protocols.wire.Reader` (read from its position, leave the
rest) or bytes (which must be consumed exactly).

Layouts are those of spec/pia.md §5.2, with these corrections from real 3DS
traffic (captures/mgba-uds-frames, station protocol version 5 = Pia 4.5-4.10):

* PlayerInfo 4.5-4.10 is 40 bytes: name (32) · u8 name length · u8 language ·
  u32 gathering id at offset 0x22 · 2 zero bytes.  The digest's wording
  ("3.x layout + u32 + 2 pad") would give 42; the bytes (and KW's offsets)
  give 40.  The 4-byte gathering id equals the id in the host's UDS beacon.
* Player names in the 3.x/4.x layouts are UTF-16 **big-endian**; we assume the
  same byte order for the 5.x "encoding 2 = UTF-16" names (undocumented).
* The ≤4.10 StationAddress extension id carries the UDS node id on 3DS local
  play (1 = host, 2 = joiner) while address and port stay zero.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TypeVar

import attrs

from protocols.errors import BadValue, ConfigError, EncodeError, UnsupportedVersion
from protocols.pia.versions import VersionProfile
from protocols.wire import Reader, Writer, reserved_field

__all__ = [
    "IPV4_ANY",
    "EMPTY_ADDRESS",
    "ENCODING_UTF8",
    "ENCODING_UTF16",
    "InetAddress",
    "MeshStationInfo",
    "PlayerInfo",
    "SessionPlayerInfo",
    "SessionStationAddress",
    "Source",
    "StationAddress",
    "StationConnectionInfo",
    "StationLocation",
    "decode_inet_address",
    "decode_mesh_station_info",
    "decode_player_info",
    "decode_session_player_info",
    "decode_session_station_address",
    "decode_station_address",
    "decode_station_connection_info",
    "decode_station_location",
    "encode_text",
    "mesh_station_info_size",
    "player_info_size",
    "read_source",
    "require_only",
]

Source = bytes | bytearray | memoryview | Reader
T = TypeVar("T")

# Version landmarks used below (spec §5.2).
V4_10 = (4, 10)
V5_9 = (5, 9)
V5_10 = (5, 10)
V5_26 = (5, 26)
V5_29 = (5, 29)
V5_45 = (5, 45)


def read_source(src: Source, read: Callable[[Reader], T], what: str) -> T:
    """Run *read* on a Reader, or on bytes that must then be consumed exactly."""
    if isinstance(src, Reader):
        return read(src)
    r = Reader(src)
    value = read(r)
    r.expect_end(what)
    return value


def require_only(value: object, used: set[str], profile: VersionProfile) -> None:
    """Raise EncodeError if *value* sets a field that *profile*'s layout does not carry.

    Every value type holds the union of all versions' fields; a field the
    version has no room for must keep its default, otherwise encoding would
    silently lose it (and decode(encode(x)) would differ from x).
    """
    for f in attrs.fields(type(value)):  # type: ignore[misc]
        if f.name not in used and getattr(value, f.name) != f.default:
            raise EncodeError(f"{type(value).__name__}.{f.name} does not exist in Pia {profile.name}")


def _rstrip_nul(data: bytes | bytearray | memoryview | str) -> bytes:
    """Normalise a fixed-size string field: keep the bytes, drop trailing NULs."""
    if isinstance(data, str):
        data = data.encode("ascii")
    return bytes(data).rstrip(b"\0")


def _hex(data: bytes) -> str:
    return data.hex()


def _is_6x(profile: VersionProfile) -> bool:
    return profile.version > V5_45


# ---------------------------------------------------------------------------
# InetAddress (spec §5.2): <= 5.10 IPv4 + port (6 bytes); 5.11+ 0/4/16-byte
# address + port, i.e. sizes 2/6/18, the size given by the context.


@attrs.frozen
class InetAddress:
    """An address (0, 4 or 16 raw bytes) and a port.

    The bytes are kept as sent, so an IPv4 address written in the 18-byte form
    (NC-2020 pads it with 12 zero bytes, spec §5.2) decodes to a 16-byte
    address and re-encodes to the same 18 bytes.
    """

    address: bytes = attrs.field(default=bytes(4), converter=bytes, repr=_hex)
    port: int = 0

    @classmethod
    def from_ip(cls, ip: str | ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> InetAddress:
        return cls(ipaddress.ip_address(ip).packed, port)

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        if len(self.address) in (4, 16):
            return ipaddress.ip_address(self.address)
        return None

    @property
    def size(self) -> int:
        """Encoded size: 2 (empty), 6 (IPv4) or 18 (IPv6)."""
        return 2 + len(self.address)

    def write(self, w: Writer, size: int | None = None) -> None:
        if size is not None and size != self.size:
            raise EncodeError(f"InetAddress of {len(self.address)} bytes cannot fill a {size}-byte field")
        if len(self.address) not in (0, 4, 16):
            raise EncodeError(f"InetAddress: address must be 0, 4 or 16 bytes, not {len(self.address)}")
        w.bytes(self.address)
        w.u16(self.port, "port")

    def encode(self, profile: VersionProfile | None = None) -> bytes:
        """Encode; up to 5.10 only the 6-byte IPv4 form exists."""
        w = Writer()
        self.write(w, 6 if profile is not None and profile.version <= V5_10 else None)
        return w.getvalue()


IPV4_ANY = InetAddress(bytes(4), 0)
EMPTY_ADDRESS = InetAddress(b"", 0)


def decode_inet_address(src: Source, size: int = 6) -> InetAddress:
    """Read an InetAddress of *size* 2, 6 or 18 bytes (6 is the only size up to 5.10)."""
    if size not in (2, 6, 18):
        raise BadValue(f"InetAddress size must be 2, 6 or 18, not {size}")

    def read(r: Reader) -> InetAddress:
        addr = r.bytes(size - 2, "InetAddress address")
        return InetAddress(addr, r.u16("InetAddress port"))

    return read_source(src, read, "InetAddress")


# ---------------------------------------------------------------------------
# StationAddress (spec §5.2): <= 4.10 InetAddress(6) + u16 extension id (8);
# 5.2-5.10 InetAddress(6); 5.11-5.45 InetAddress(2/6/18, size from context);
# 6.16-6.30 16-byte address + port (18).


@attrs.frozen
class StationAddress:
    inet: InetAddress = IPV4_ANY
    #: Only in the 8-byte form (<= 4.10; UDS node id on 3DS local play).
    extension_id: int = 0

    def write(self, w: Writer, profile: VersionProfile, size: int | None = None) -> None:
        size = _station_address_size(profile, size, self.inet.size)
        if size == 8:
            self.inet.write(w, 6)
            w.u16(self.extension_id, "extension id")
            return
        if self.extension_id:
            raise EncodeError(f"a {size}-byte StationAddress has no extension id")
        self.inet.write(w, size)

    def encode(self, profile: VersionProfile, size: int | None = None) -> bytes:
        w = Writer()
        self.write(w, profile, size)
        return w.getvalue()


def _station_address_size(profile: VersionProfile, size: int | None, default: int) -> int:
    if size is not None:
        if size not in (2, 6, 8, 18):
            raise ConfigError(f"StationAddress size must be 2, 6, 8 or 18, not {size}")
        return size
    if profile.version <= V4_10:
        return 8
    if profile.version <= V5_10:
        return 6
    if _is_6x(profile):
        return 18
    return default  # 5.11-5.45: whatever the address needs; readers must be told


def decode_station_address(src: Source, profile: VersionProfile, size: int | None = None) -> StationAddress:
    """Read a StationAddress; 5.11-5.45 has no fixed size, so *size* is then required."""
    if size is None and V5_10 < profile.version <= V5_45:
        raise ConfigError("a 5.11-5.45 StationAddress needs its size from the context")
    n = _station_address_size(profile, size, 0)

    def read(r: Reader) -> StationAddress:
        if n == 8:
            inet = decode_inet_address(r, 6)
            return StationAddress(inet, r.u16("extension id"))
        return StationAddress(decode_inet_address(r, n))

    return read_source(src, read, "StationAddress")


# ---------------------------------------------------------------------------
# StationLocation (spec §5.2 table).


@attrs.frozen
class StationLocation:
    """Where and who a station is; the union of every version's fields.

    Field use per version (the others must stay at their defaults):

    * <= 4.10: public (+ extension_id), constant_id (u32), variable_id,
      service_variable_id, url_type, stream_id, stream_type, nat_mapping,
      nat_filtering, nat_location, probe_init.
    * 5.2-5.9: as 4.10 without extension_id, constant_id u64, plus relay.
    * 5.10-5.45: public, private, relay, constant_id, variable_id,
      service_variable_id, NAT bits (nat_filtering 2 bits, nat_mapping 2 bits,
      nat_type 4 bits), nat_location, probe_init, private_available.
      From 5.11 public/private may be empty (2), IPv4 (6) or IPv6 (18).
    * 6.16-6.30: public (16-byte address), constant_id, variable_id (u16),
      nat_filtering, nat_mapping, nat_type (the high nibble; its bit 0 = IPv6).
    """

    public: InetAddress = IPV4_ANY
    constant_id: int = 0
    variable_id: int = 0
    service_variable_id: int = 0
    extension_id: int = 0
    url_type: int = 0
    stream_id: int = 0
    stream_type: int = 0
    nat_mapping: int = 0
    nat_filtering: int = 0
    nat_location: int = 0
    probe_init: int = 0
    nat_type: int = 0
    private: InetAddress = IPV4_ANY
    relay: InetAddress = IPV4_ANY
    private_available: int = 0

    @property
    def has_ipv6_public_address(self) -> bool:
        """The public address is a 16-byte one (6.x always; its IPv6 flag is bit 0 of ``nat_type``)."""
        return len(self.public.address) == 16

    def _nat_bits(self) -> int:
        for value, bits, what in (
            (self.nat_filtering, 2, "nat_filtering"),
            (self.nat_mapping, 2, "nat_mapping"),
            (self.nat_type, 4, "nat_type"),
        ):
            if not 0 <= value < (1 << bits):
                raise EncodeError(f"{what}={value} does not fit the {bits}-bit NAT field")
        return self.nat_filtering | (self.nat_mapping << 2) | (self.nat_type << 4)

    def write(self, w: Writer, profile: VersionProfile) -> None:
        require_only(self, _location_fields(profile), profile)
        v = profile.version
        if v <= V5_9:
            StationAddress(self.public, self.extension_id).write(w, profile)
            w.uint(self.constant_id, profile.constant_id_size, "constant id")
            w.u32(self.variable_id, "variable id")
            w.u32(self.service_variable_id, "service variable id")
            for value in (
                self.url_type, self.stream_id, self.stream_type, self.nat_mapping,
                self.nat_filtering, self.nat_location, self.probe_init,
            ):
                w.u8(value, "station URL field")
            if v > V4_10:
                self.relay.write(w, 6)
            return
        if _is_6x(profile):
            w.u8(18)
            self.public.write(w, 18)
            w.u64(self.constant_id, "constant id")
            w.u16(self.variable_id, "variable id")
            w.u8(self._nat_bits())
            return
        if v == V5_10:
            self.public.write(w, 6)
            self.private.write(w, 6)
        else:
            w.u8(self.public.size)
            w.u8(self.private.size)
            self.public.write(w)
            self.private.write(w)
        self.relay.write(w, 6)
        w.u64(self.constant_id, "constant id")
        w.u32(self.variable_id, "variable id")
        w.u32(self.service_variable_id, "service variable id")
        w.u8(self._nat_bits())
        w.u8(self.nat_location, "nat location")
        w.u8(self.probe_init, "probe init")
        w.u8(self.private_available, "private available")

    def encode(self, profile: VersionProfile) -> bytes:
        w = Writer()
        self.write(w, profile)
        return w.getvalue()


_LOCATION_IDS = {"public", "constant_id", "variable_id"}
_LOCATION_URL = {"service_variable_id", "url_type", "stream_id", "stream_type", "nat_mapping", "nat_filtering",
                 "nat_location", "probe_init"}
_LOCATION_NAT = {"nat_filtering", "nat_mapping", "nat_type"}


def _location_fields(profile: VersionProfile) -> set[str]:
    v = profile.version
    if v <= V4_10:
        return _LOCATION_IDS | _LOCATION_URL | {"extension_id"}
    if v <= V5_9:
        return _LOCATION_IDS | _LOCATION_URL | {"relay"}
    if _is_6x(profile):
        return _LOCATION_IDS | _LOCATION_NAT
    return _LOCATION_IDS | _LOCATION_NAT | {
        "private", "relay", "service_variable_id", "nat_location", "probe_init", "private_available",
    }


def _split_nat_bits(b: int) -> dict[str, int]:
    return {"nat_filtering": b & 0x03, "nat_mapping": (b >> 2) & 0x03, "nat_type": b >> 4}


def decode_station_location(src: Source, profile: VersionProfile) -> StationLocation:
    v = profile.version

    def read(r: Reader) -> StationLocation:
        if v <= V5_9:
            addr = decode_station_address(r, profile)
            cid = r.uint(profile.constant_id_size, "constant id")
            var = r.u32("variable id")
            svc = r.u32("service variable id")
            url_type, stream_id, stream_type, natm, natf, nat_loc, probe = (r.u8("station URL field") for _ in range(7))
            relay = decode_inet_address(r, 6) if v > V4_10 else IPV4_ANY
            return StationLocation(
                public=addr.inet, extension_id=addr.extension_id, constant_id=cid, variable_id=var,
                service_variable_id=svc, url_type=url_type, stream_id=stream_id, stream_type=stream_type,
                nat_mapping=natm, nat_filtering=natf, nat_location=nat_loc, probe_init=probe, relay=relay,
            )
        if _is_6x(profile):
            size = r.u8("address size")
            if size != 18:
                raise BadValue(f"6.x StationLocation address size must be 18, not {size}")
            public = decode_inet_address(r, 18)
            cid = r.u64("constant id")
            var = r.u16("variable id")
            return StationLocation(public=public, constant_id=cid, variable_id=var, **_split_nat_bits(r.u8()))
        if v == V5_10:
            public = decode_inet_address(r, 6)
            private = decode_inet_address(r, 6)
        else:
            pub_size = r.u8("public address size")
            priv_size = r.u8("private address size")
            public = decode_inet_address(r, pub_size)
            private = decode_inet_address(r, priv_size)
        relay = decode_inet_address(r, 6)
        cid = r.u64("constant id")
        var = r.u32("variable id")
        svc = r.u32("service variable id")
        nat = _split_nat_bits(r.u8("NAT bits"))
        return StationLocation(
            public=public, private=private, relay=relay, constant_id=cid, variable_id=var,
            service_variable_id=svc, nat_location=r.u8("nat location"), probe_init=r.u8("probe init"),
            private_available=r.u8("private available"), **nat,
        )

    return read_source(src, read, "StationLocation")


# ---------------------------------------------------------------------------
# StationConnectionInfo (<= 5.9): public + private StationLocation.


@attrs.frozen
class StationConnectionInfo:
    public: StationLocation = StationLocation()
    private: StationLocation = StationLocation()

    def write(self, w: Writer, profile: VersionProfile) -> None:
        if profile.version > V5_9:
            raise EncodeError(f"Pia {profile.name} has no StationConnectionInfo (only <= 5.9)")
        self.public.write(w, profile)
        self.private.write(w, profile)

    def encode(self, profile: VersionProfile) -> bytes:
        w = Writer()
        self.write(w, profile)
        return w.getvalue()


def decode_station_connection_info(src: Source, profile: VersionProfile) -> StationConnectionInfo:
    if profile.version > V5_9:
        raise UnsupportedVersion(f"Pia {profile.name} has no StationConnectionInfo (only <= 5.9)")

    def read(r: Reader) -> StationConnectionInfo:
        return StationConnectionInfo(decode_station_location(r, profile), decode_station_location(r, profile))

    return read_source(src, read, "StationConnectionInfo")


# ---------------------------------------------------------------------------
# PlayerInfo (spec §5.2; 4.x layout from real bytes, see module docstring).

ENCODING_UTF8 = 1
ENCODING_UTF16 = 2


def player_info_size(profile: VersionProfile) -> int:
    """Size of the fixed PlayerInfo of *profile* (<= 5.45; 6.x uses :class:`SessionPlayerInfo`)."""
    v = profile.version
    if v > V5_45:
        raise ConfigError(f"Pia {profile.name} has no fixed-size PlayerInfo (see SessionPlayerInfo)")
    if v <= (3, 10):
        return 36
    if v <= V4_10:
        return 40
    if v <= (5, 6):
        return 187
    return 195


def _decode_text(raw: bytes, encoding: int) -> str:
    if encoding == ENCODING_UTF8:
        return raw.decode("utf-8", errors="replace")
    if len(raw) % 2:
        raw += b"\0"
    return raw.decode("utf-16-be", errors="replace")


def encode_text(text: str, encoding: int = ENCODING_UTF16) -> bytes:
    """Encode a name for a PlayerInfo field (1 = UTF-8, 2 = UTF-16 big-endian)."""
    return text.encode("utf-8" if encoding == ENCODING_UTF8 else "utf-16-be")


@attrs.frozen
class PlayerInfo:
    """One player of a station.

    String fields hold the raw field bytes without their trailing NULs.  Up to
    4.10 the name is always UTF-16BE and ``name_length`` counts characters;
    from 5.2 each string carries an encoding byte (1 UTF-8, 2 UTF-16).
    ``padding`` keeps the 2 "Padding" bytes that end the <= 4.10 layout (KW
    Station-Protocol.md) as sent.
    """

    name: bytes = attrs.field(default=b"", converter=_rstrip_nul, repr=_hex)
    name_encoding: int = ENCODING_UTF16
    name_length: int = 0
    language: int = 0
    gathering_id: int = 0
    account_name: bytes = attrs.field(default=b"", converter=_rstrip_nul, repr=_hex)
    account_encoding: int = ENCODING_UTF16
    play_history_key: bytes = attrs.field(default=b"", converter=_rstrip_nul, repr=_hex)
    principal_id: int = 0
    padding: bytes = reserved_field()

    @classmethod
    def from_text(
        cls, name: str, profile: VersionProfile, *, encoding: int = ENCODING_UTF16, account_name: str = "", **kw: int
    ) -> PlayerInfo:
        """Build a PlayerInfo for *profile* from text (<= 4.10 forces UTF-16 and fills name_length)."""
        if profile.version <= V4_10:
            return cls(encode_text(name), name_length=len(name), **kw)
        return cls(
            encode_text(name, encoding),
            name_encoding=encoding,
            account_name=encode_text(account_name, encoding),
            account_encoding=encoding,
            **kw,
        )

    @property
    def name_text(self) -> str:
        return _decode_text(self.name, self.name_encoding)

    @property
    def account_name_text(self) -> str:
        return _decode_text(self.account_name, self.account_encoding)

    def write(self, w: Writer, profile: VersionProfile) -> None:
        v = profile.version
        if v > V5_45:
            raise EncodeError(f"Pia {profile.name} uses SessionPlayerInfo, not PlayerInfo")
        require_only(self, _player_fields(profile), profile)
        if v <= V4_10:
            w.fixed(self.name, 32, "player name")
            w.u8(self.name_length, "name length")
            w.u8(self.language, "language")
            if v >= (4, 0):
                w.u32(self.gathering_id, "gathering id")
            w.reserved(self.padding, 2, "PlayerInfo padding")
            return
        if v <= V5_26:
            w.fixed(self.name, 80, "player name")
            w.u8(self.name_encoding, "name encoding")
            w.fixed(self.account_name, 40, "account name")
            w.u8(self.account_encoding, "account name encoding")
        else:
            w.u8(self.name_encoding, "name encoding")
            w.fixed(self.name, 80, "player name")
            w.u8(self.account_encoding, "account name encoding")
            w.fixed(self.account_name, 40, "account name")
        w.u8(self.language, "language")
        w.fixed(self.play_history_key, 64, "play history key")
        if v >= (5, 7):
            w.u64(self.principal_id, "principal id")

    def encode(self, profile: VersionProfile) -> bytes:
        w = Writer()
        self.write(w, profile)
        return w.getvalue()


def _player_fields(profile: VersionProfile) -> set[str]:
    v = profile.version
    if v <= V4_10:
        return {"name", "name_length", "language", "padding"} | ({"gathering_id"} if v >= (4, 0) else set())
    used = {"name", "name_encoding", "account_name", "account_encoding", "language", "play_history_key"}
    return used | ({"principal_id"} if v >= (5, 7) else set())


def decode_player_info(src: Source, profile: VersionProfile) -> PlayerInfo:
    v = profile.version
    if v > V5_45:
        raise UnsupportedVersion(f"Pia {profile.name} uses SessionPlayerInfo, not PlayerInfo")

    def read(r: Reader) -> PlayerInfo:
        if v <= V4_10:
            name = r.bytes(32, "player name")
            length = r.u8("name length")
            lang = r.u8("language")
            gid = r.u32("gathering id") if v >= (4, 0) else 0
            padding = r.reserved(2, "PlayerInfo padding")
            return PlayerInfo(name, name_length=length, language=lang, gathering_id=gid, padding=padding)
        if v <= V5_26:
            name = r.bytes(80, "player name")
            name_enc = r.u8("name encoding")
            account = r.bytes(40, "account name")
            account_enc = r.u8("account name encoding")
        else:
            name_enc = r.u8("name encoding")
            name = r.bytes(80, "player name")
            account_enc = r.u8("account name encoding")
            account = r.bytes(40, "account name")
        lang = r.u8("language")
        key = r.bytes(64, "play history key")
        pid = r.u64("principal id") if v >= (5, 7) else 0
        return PlayerInfo(
            name, name_encoding=name_enc, language=lang, account_name=account, account_encoding=account_enc,
            play_history_key=key, principal_id=pid,
        )

    return read_source(src, read, "PlayerInfo")


# ---------------------------------------------------------------------------
# Pia 6.x Session protocol (new) pieces (spec §5.11, KW only, partial): the
# tagged station address and the variable-size player info of its join request.
#
# Assumption: "u32 name size" counts bytes of the encoded name (the docs do not
# say bytes or characters).


@attrs.frozen
class SessionStationAddress:
    """``u8 family (0 IPv4, 1 IPv6) · InetAddress (6 or 18)``."""

    inet: InetAddress = IPV4_ANY

    def write(self, w: Writer) -> None:
        if len(self.inet.address) not in (4, 16):
            raise EncodeError("a session station address is IPv4 or IPv6")
        w.u8(0 if len(self.inet.address) == 4 else 1)
        self.inet.write(w)

    def encode(self, profile: VersionProfile | None = None) -> bytes:
        w = Writer()
        self.write(w)
        return w.getvalue()


def decode_session_station_address(src: Source, profile: VersionProfile | None = None) -> SessionStationAddress:
    def read(r: Reader) -> SessionStationAddress:
        family = r.u8("address family")
        if family > 1:
            raise BadValue(f"address family must be 0 (IPv4) or 1 (IPv6), not {family}")
        return SessionStationAddress(decode_inet_address(r, 6 if family == 0 else 18))

    return read_source(src, read, "session StationAddress")


@attrs.frozen
class SessionPlayerInfo:
    """6.x player info: ``16-byte player id · u32 name size · u8 encoding · name``."""

    player_id: bytes = attrs.field(default=bytes(16), converter=bytes, repr=_hex)
    name: bytes = attrs.field(default=b"", converter=bytes, repr=_hex)
    name_encoding: int = ENCODING_UTF8

    @property
    def name_text(self) -> str:
        return _decode_text(self.name, self.name_encoding)

    def write(self, w: Writer) -> None:
        if len(self.player_id) != 16:
            raise EncodeError(f"player id must be 16 bytes, not {len(self.player_id)}")
        w.bytes(self.player_id)
        w.u32(len(self.name), "name size")
        w.u8(self.name_encoding, "name encoding")
        w.bytes(self.name)

    def encode(self, profile: VersionProfile | None = None) -> bytes:
        w = Writer()
        self.write(w)
        return w.getvalue()


def decode_session_player_info(src: Source, profile: VersionProfile | None = None) -> SessionPlayerInfo:
    def read(r: Reader) -> SessionPlayerInfo:
        pid = r.bytes(16, "player id")
        size = r.u32("name size")
        encoding = r.u8("name encoding")
        return SessionPlayerInfo(pid, r.bytes(size, "player name"), encoding)

    return read_source(src, read, "SessionPlayerInfo")


# ---------------------------------------------------------------------------
# Mesh StationInfo (spec §5.2 table): a location zero-filled to a fixed slot,
# then the station index (and from 5.31 the join order).
#
# 5.30 is not documented; it carries mesh protocol version 3 like 5.31-5.45,
# so it gets the 5.31 layout (with join order).

def _has_join_order(profile: VersionProfile) -> bool:
    return V5_29 < profile.version <= V5_45


def mesh_station_info_size(profile: VersionProfile) -> int:
    v = profile.version
    if v <= V4_10:
        return 56
    if v <= V5_9:
        return 72
    if v <= V5_26:
        return 64
    if v <= V5_45:
        return 68
    raise ConfigError(f"Pia {profile.name} has no mesh protocol")


def _location_slot(profile: VersionProfile) -> int:
    return 62 if profile.version <= V5_26 else 64


@attrs.frozen
class MeshStationInfo:
    """One mesh member: its location (a StationConnectionInfo up to 5.9) and station index.

    ``location_fill`` (5.10+) keeps the bytes after the location in its 62/64-byte
    slot, which KW Mesh-Protocol.md says are "filled with 0's", and ``padding``
    the "Padding" bytes after the index (or join order), both as sent: the
    location's own size fields say where it ends, so other values there are
    unambiguous.  The node sends zeros.
    """

    location: StationLocation | StationConnectionInfo
    index: int
    #: 5.30-5.45 only.
    join_order: int = 0
    location_fill: bytes = reserved_field()
    padding: bytes = reserved_field()

    def write(self, w: Writer, profile: VersionProfile) -> None:
        v = profile.version
        if v > V5_45:
            raise EncodeError(f"Pia {profile.name} has no mesh protocol")
        used = {"location", "index", "padding"} | ({"join_order"} if _has_join_order(profile) else set())
        require_only(self, used | ({"location_fill"} if v > V5_9 else set()), profile)
        start = len(w)
        if v <= V5_9:
            if not isinstance(self.location, StationConnectionInfo):
                raise EncodeError(f"a Pia {profile.name} StationInfo holds a StationConnectionInfo")
            self.location.write(w, profile)
        else:
            if not isinstance(self.location, StationLocation):
                raise EncodeError(f"a Pia {profile.name} StationInfo holds a StationLocation")
            loc = self.location.encode(profile)
            if len(loc) > _location_slot(profile):
                raise EncodeError(f"StationLocation in StationInfo: {len(loc)} bytes do not fit in its slot")
            w.bytes(loc)
            w.reserved(self.location_fill, _location_slot(profile) - len(loc), "StationLocation zero fill")
        w.u8(self.index, "station index")
        if _has_join_order(profile):
            w.u16(self.join_order, "join order")
        w.reserved(self.padding, mesh_station_info_size(profile) - (len(w) - start), "StationInfo padding")

    def encode(self, profile: VersionProfile) -> bytes:
        w = Writer()
        self.write(w, profile)
        return w.getvalue()


def decode_mesh_station_info(src: Source, profile: VersionProfile) -> MeshStationInfo:
    v = profile.version
    if v > V5_45:
        raise UnsupportedVersion(f"Pia {profile.name} has no mesh protocol")
    size = mesh_station_info_size(profile)

    def read(r: Reader) -> MeshStationInfo:
        with r.restrict_to(size, "StationInfo") as s:
            location: StationLocation | StationConnectionInfo
            if v <= V5_9:
                location = decode_station_connection_info(s, profile)
                fill = b""
            else:
                with s.restrict_to(_location_slot(profile), "StationLocation slot") as slot:
                    location = decode_station_location(slot, profile)
                    fill = slot.reserved(slot.remaining(), "StationLocation zero fill")
            index = s.u8("station index")
            order = s.u16("join order") if _has_join_order(profile) else 0
            padding = s.reserved(s.remaining(), "StationInfo padding")
            return MeshStationInfo(location, index, order, fill, padding)

    return read_source(src, read, "StationInfo")
