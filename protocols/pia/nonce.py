"""AES-GCM nonces for Pia packets, per network type and version era.

Theory of operation
-------------------
Every GCM-era Pia packet (5.7 onward) is sealed with a 12-byte nonce made of a
per-source prefix and the 8-byte nonce "HN" carried in the packet header.
The prefix depends on the network type and the version era (spec §3.2, §11):

========  ==========  =========================================================
network   era         bytes 0..11
========  ==========  =========================================================
NEX       5.7-5.26    conn id (1) | gathering id & 0xFFFFFF (3, BE) | HN (8)
NEX       5.27-5.45   src var id & 0xFF (1) | gathering id (3) | HN (8)
LDN       5.7-5.26    CRC (3) | conn id (1) | HN (8)
LDN       5.27-5.45   CRC (3) | src var id & 0xFF (1) | HN (8)
LDN       6.x         u32_be(network id XOR source IPv4) (4) | HN (8)
LAN       5.7-5.26    source IPv4 (4) | conn id (1) | HN[1:8] (7)
LAN       5.27-5.45   source IPv4 (4) | src var id & 0xFF (1) | HN[1:8] (7)
LAN       6.x         source IPv4, or CRC-32 (BE) of the IPv6 bytes (4) | HN (8)
NPLN      6.x         network id (4, BE) | HN (8)
========  ==========  =========================================================

CRC = the first three bytes of the big-endian CRC-32 (zlib/IEEE) of
``network id as LE u32 || source MAC`` (confirmed on console traffic, §11).
"Source" is the sender of the packet: a receiver passes the datagram's
source address, a sender its own address.

The era comes from the profile's header format: H-B..H-D carry a
connection id, H-E carries 32-bit variable ids, H-F/H-G are 6.x.  The spec
documents the 6.x rows for 6.16-6.30 (LAN, NPLN) and 6.16-6.42 (LDN); later
versions use the same rows as their nearest documented neighbour (§0.2).
Pia <= 5.6 uses AES-ECB + HMAC-MD5 and has no nonce.

Every builder also describes itself as :class:`NonceParts` (read with
:func:`nonce_parts`): the same rule split into a per-source prefix lookup, an
optional id byte, fixed bytes and how much of HN follows.  The packet codec
composes nonces from those parts inside its per-packet closure instead of
calling the builder; the builders stay the reference (a property test checks
that both agree for every network and era).

:func:`nonce_builder` returns a plain closure because it runs once per packet.
Everything that depends only on the source (address parsing, CRCs) is
computed on first sight of a source and cached; the caches are bounded so a
flood of spoofed sources cannot grow them without limit.

Spec: ../shared/spec/pia.md §3.2, §7.3, §11; vectors §8.2 D7, D8.
"""

from __future__ import annotations

import ipaddress
import zlib
from collections.abc import Callable, Mapping
from typing import Protocol

import attrs

from protocols.errors import BadValue, ConfigError
from protocols.pia.keys import parse_mac
from protocols.pia.versions import Cipher, HeaderFormat, NetworkType, VersionProfile

__all__ = [
    "NonceBuilder",
    "NonceHeader",
    "NonceParts",
    "UnknownSource",
    "ldn_crc_prefix",
    "nonce_builder",
    "nonce_parts",
]

#: Per-source caches are cleared when they reach this many entries.
CACHE_LIMIT = 4096

_BYTE = [bytes((i,)) for i in range(256)]


class UnknownSource(BadValue):
    """The packet's source gives no nonce: an LDN source with no known MAC, or
    an address the era cannot express (IPv6 where only IPv4 is defined).
    The packet cannot be opened."""


class NonceHeader(Protocol):
    """The header fields a nonce builder reads (see protocols.pia.header.PacketHeader)."""

    @property
    def connection_id(self) -> int: ...

    @property
    def source_variable_id(self) -> int | None: ...

    @property
    def nonce(self) -> bytes: ...


NonceBuilder = Callable[[NonceHeader, str], bytes]


@attrs.frozen
class NonceParts:
    """One builder's rule as data: ``nonce = lead + id byte + middle + HN[skip:]``.

    *lead* is ``lookup(source) or learn(source)`` when *lookup* is set (the
    per-source prefix: a cache hit is one call of ``lookup``, which returns
    None on a miss) and the fixed bytes *fixed* otherwise.  The id byte is
    ``header.<id_field> & 0xFF`` when *id_field* is set
    (``"connection_id"`` or ``"source_variable_id"``).  A composed nonce that
    is not 12 bytes is the builder's error, so callers then ask the builder.
    """

    lookup: Callable[[str], bytes | None] | None
    learn: Callable[[str], bytes] | None
    fixed: bytes
    id_field: str | None
    middle: bytes
    skip: int

    def build(self, header: NonceHeader, source_ip: str) -> bytes:
        """The nonce these parts describe (the builder's value for a 12-byte result)."""
        if self.lookup is not None:
            lead = self.lookup(source_ip) or self.learn(source_ip)  # type: ignore[misc]
        else:
            lead = self.fixed
        if self.id_field is not None:
            lead += _BYTE[getattr(header, self.id_field) & 0xFF]
        return lead + self.middle + header.nonce[self.skip :]


def nonce_parts(builder: Callable[..., bytes]) -> NonceParts | None:
    """The :class:`NonceParts` of a builder from :func:`nonce_builder`, or None for any other callable."""
    parts = getattr(builder, "nonce_parts", None)
    return parts if isinstance(parts, NonceParts) else None


def _described(builder: NonceBuilder, parts: NonceParts) -> NonceBuilder:
    builder.nonce_parts = parts  # type: ignore[attr-defined]
    return builder


def _u32(value: int | None, what: str) -> int:
    if value is None:
        raise ConfigError(f"this nonce layout needs the {what}")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0xFFFFFFFF:
        raise ConfigError(f"{what} must be a u32, got {value!r}")
    return value


def ldn_crc_prefix(network_id: int, mac: str | bytes) -> bytes:
    """The 3-byte LDN 5.x nonce prefix (spec §3.2, §11).

    CRC-32 over the network id as a little-endian u32 followed by the 6 MAC
    bytes, serialised big-endian, first three bytes.
    """
    nid = _u32(network_id, "LDN network id")
    crc = zlib.crc32(nid.to_bytes(4, "little") + parse_mac(mac))
    return crc.to_bytes(4, "big")[:3]


def _parse_ip(source: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(source)
    except ValueError:
        raise UnknownSource(f"packet source {source!r} is not an IP address") from None


def _ipv4_bytes(source: str) -> bytes:
    ip = _parse_ip(source)
    if ip.version != 4:
        raise UnknownSource(f"packet source {source!r}: this nonce layout is defined for IPv4 only")
    return ip.packed


def _lan6_bytes(source: str) -> bytes:
    # 6.x LAN: IPv4 as is; IPv6 as the CRC-32 of its 16 bytes (byte order of
    # the CRC not stated; big-endian like every other Pia field, §3.2).
    ip = _parse_ip(source)
    if ip.version == 4:
        return ip.packed
    return zlib.crc32(ip.packed).to_bytes(4, "big")


def _source_cache(learn: Callable[[str], bytes]) -> tuple[Callable[[str], bytes | None], Callable[[str], bytes]]:
    """A bounded per-source memo of *learn*: ``(get, miss)``.

    Builders call ``get(source) or miss(source)``: the hit is one dict lookup
    with no Python frame (prefixes are never empty, so ``or`` is safe).
    """
    cache: dict[str, bytes] = {}

    def miss(source: str) -> bytes:
        prefix = learn(source)
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        cache[source] = prefix
        return prefix

    return cache.get, miss


def _bad_length(nonce: bytes) -> BadValue:
    return BadValue(f"header nonce must be 8 bytes, nonce came out {len(nonce)} bytes")


def nonce_builder(
    profile: VersionProfile,
    network: NetworkType | str,
    *,
    gathering_id: int | None = None,
    network_id: int | None = None,
    macs: Mapping[str, bytes | str] | None = None,
) -> NonceBuilder:
    """Return ``builder(header, source_ip) -> 12-byte nonce`` for one session.

    Args:
        profile: the session's Pia version profile.
        network: NEX, LAN, LDN or NPLN (the enum or its value, e.g. ``"lan"``).
        gathering_id: NEX only: the gathering (session) id from the server.
        network_id: LDN (5.x: the random u32 of the advertisement; 6.x: the
            CRC-32 of the SSID, see :func:`protocols.pia.keys.ldn6_network_id`)
            and NPLN.
        macs: LDN 5.x only: source IP string -> 6-byte MAC (or "aa:bb:..").
            The mapping is read live, so stations may be added to it later.

    The builder reads only ``header.connection_id`` (5.7-5.26),
    ``header.source_variable_id`` (5.27-5.45) and ``header.nonce``.  It raises
    :class:`UnknownSource` (a DecodeError) when the source cannot give a
    nonce, e.g. an LDN source with no MAC in *macs*.

    Raises:
        ConfigError: an era without nonces (<= 5.6, AES-ECB), an undocumented
            combination (NEX 6.x, NPLN 5.x), or a missing/invalid parameter.
    """
    if not isinstance(network, NetworkType):
        try:
            network = NetworkType(network)
        except ValueError:
            raise ConfigError(f"unknown network type {network!r} (choose nex, lan, ldn or npln)") from None
    if profile.cipher is Cipher.ECB_HMAC:
        raise ConfigError(f"Pia {profile.name} uses AES-ECB + HMAC-MD5: packets have no GCM nonce (spec §3.1)")
    hf = profile.header_format
    if hf in (HeaderFormat.B, HeaderFormat.C, HeaderFormat.D):
        era = "conn"  # 5.7-5.26: connection id byte
    elif hf is HeaderFormat.E:
        era = "var"  # 5.27-5.45: low byte of the source variable id
    else:
        era = "6x"  # H-F, H-G
    if network is NetworkType.NEX:
        return _nex(profile, era, _u32(gathering_id, "NEX gathering id"))
    if network is NetworkType.LAN:
        return _lan(era)
    if network is NetworkType.LDN:
        nid = _u32(network_id, "LDN network id")
        if era == "6x":
            return _ldn6(nid)
        if macs is None:
            raise ConfigError("LDN 5.x nonces need the stations' MAC addresses (macs={ip: mac})")
        return _ldn5(era, nid, macs)
    if network is NetworkType.NPLN:
        if era != "6x":
            raise ConfigError(f"NPLN does not exist in Pia {profile.name} (6.x only)")
        prefix = _u32(network_id, "NPLN network id").to_bytes(4, "big")

        def npln(header: NonceHeader, source_ip: str) -> bytes:
            nonce = prefix + header.nonce
            if len(nonce) != 12:
                raise _bad_length(nonce)
            return nonce

        return _described(npln, NonceParts(None, None, prefix, None, b"", 0))
    raise ConfigError(f"unknown network type {network!r}")  # pragma: no cover - the enum has four members


def _nex(profile: VersionProfile, era: str, gathering_id: int) -> NonceBuilder:
    if era == "6x":
        raise ConfigError(f"the NEX nonce of Pia {profile.name} is undocumented (spec §3.2 covers 5.7-5.45)")
    gid3 = (gathering_id & 0xFFFFFF).to_bytes(3, "big")
    byte = _BYTE
    if era == "conn":

        def nex_conn(header: NonceHeader, source_ip: str) -> bytes:
            nonce = byte[header.connection_id & 0xFF] + gid3 + header.nonce
            if len(nonce) != 12:
                raise _bad_length(nonce)
            return nonce

        return _described(nex_conn, NonceParts(None, None, b"", "connection_id", gid3, 0))

    def nex_var(header: NonceHeader, source_ip: str) -> bytes:
        nonce = byte[header.source_variable_id & 0xFF] + gid3 + header.nonce  # type: ignore[operator]
        if len(nonce) != 12:
            raise _bad_length(nonce)
        return nonce

    return _described(nex_var, NonceParts(None, None, b"", "source_variable_id", gid3, 0))


def _lan(era: str) -> NonceBuilder:
    byte = _BYTE
    if era == "6x":
        get6, miss6 = _source_cache(_lan6_bytes)

        def lan_6x(header: NonceHeader, source_ip: str) -> bytes:
            nonce = (get6(source_ip) or miss6(source_ip)) + header.nonce
            if len(nonce) != 12:
                raise _bad_length(nonce)
            return nonce

        return _described(lan_6x, NonceParts(get6, miss6, b"", None, b"", 0))
    get, miss = _source_cache(_ipv4_bytes)
    # 5.x LAN drops the first header-nonce byte to make room for the id byte.
    if era == "conn":

        def lan_conn(header: NonceHeader, source_ip: str) -> bytes:
            nonce = (get(source_ip) or miss(source_ip)) + byte[header.connection_id & 0xFF] + header.nonce[1:]
            if len(nonce) != 12:
                raise _bad_length(nonce)
            return nonce

        return _described(lan_conn, NonceParts(get, miss, b"", "connection_id", b"", 1))

    def lan_var(header: NonceHeader, source_ip: str) -> bytes:
        nonce = (get(source_ip) or miss(source_ip)) + byte[header.source_variable_id & 0xFF] + header.nonce[1:]  # type: ignore[operator]
        if len(nonce) != 12:
            raise _bad_length(nonce)
        return nonce

    return _described(lan_var, NonceParts(get, miss, b"", "source_variable_id", b"", 1))


def _ldn6(network_id: int) -> NonceBuilder:
    def learn(source: str) -> bytes:
        # §11: u32_be(network_id XOR source IPv4).
        return (network_id ^ int.from_bytes(_ipv4_bytes(source), "big")).to_bytes(4, "big")

    get, miss = _source_cache(learn)

    def ldn_6x(header: NonceHeader, source_ip: str) -> bytes:
        nonce = (get(source_ip) or miss(source_ip)) + header.nonce
        if len(nonce) != 12:
            raise _bad_length(nonce)
        return nonce

    return _described(ldn_6x, NonceParts(get, miss, b"", None, b"", 0))


def _ldn5(era: str, network_id: int, macs: Mapping[str, bytes | str]) -> NonceBuilder:
    # The CRC depends only on the MAC, so cache by MAC: a station that leaves
    # and is replaced at the same IP by another MAC gets the right prefix.
    crcs: dict[bytes | str, bytes] = {}
    byte = _BYTE

    def crc_for(source_ip: str) -> bytes:
        mac = macs.get(source_ip)
        if mac is None:
            raise UnknownSource(f"no MAC address known for LDN source {source_ip!r}")
        prefix = crcs.get(mac)
        if prefix is None:
            try:
                prefix = ldn_crc_prefix(network_id, mac)
            except ConfigError as exc:
                raise UnknownSource(f"LDN source {source_ip!r}: {exc}") from None
            if len(crcs) >= CACHE_LIMIT:
                crcs.clear()
            crcs[mac] = prefix
        return prefix

    if era == "conn":

        def ldn_conn(header: NonceHeader, source_ip: str) -> bytes:
            nonce = crc_for(source_ip) + byte[header.connection_id & 0xFF] + header.nonce
            if len(nonce) != 12:
                raise _bad_length(nonce)
            return nonce

        # crc_for reads the live MAC table every time: it is the lookup itself.
        return _described(ldn_conn, NonceParts(crc_for, crc_for, b"", "connection_id", b"", 0))

    def ldn_var(header: NonceHeader, source_ip: str) -> bytes:
        nonce = crc_for(source_ip) + byte[header.source_variable_id & 0xFF] + header.nonce  # type: ignore[operator]
        if len(nonce) != 12:
            raise _bad_length(nonce)
        return nonce

    return _described(ldn_var, NonceParts(crc_for, crc_for, b"", "source_variable_id", b"", 0))
