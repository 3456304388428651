"""Pia key material and station identities.

Theory of operation
-------------------
Every Pia network type starts from a *game key* (16 bytes, fixed per game)
and some per-session public value, and derives the 16-byte AES session key
that encrypts every packet:

* LAN: HMAC-SHA256 over the 32-byte "session key param" from the host's
  LanSessionInfo, with its last byte incremented (spec §3.3).
* LDN 5.9-5.45: four SEAD draws seeded with the session param from the LDN
  advertisement, packed little-endian, then AES-ECB under the game key
  (§3.3, confirmed on console traffic in §11).
* LDN 6.x: AES-ECB of the 16 raw SSID bytes under the game key; the network
  id is the CRC-32 of SSID bytes 1..15 (§7.3, §11).

Identities (§4) are pure functions of what the network already knows about a
station: its IPv4 address and port on LAN, its MAC address on LDN.

Nothing here is on the per-packet path; the functions favour checking their
inputs (:class:`ConfigError`) over speed.

Spec: ../shared/spec/pia.md §3.3, §3.6 (game keys), §4 (identities), §6.4 (the
AES-ECB helper the LAN challenge needs), §7.3, §8.2 D4-D6 and D10-D12, §11.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import zlib

from protocols.errors import ConfigError
from protocols.pia.sead import Random
from protocols.pia.versions import Cipher, VersionProfile

__all__ = [
    "aes_ecb_encrypt",
    "ipv4_to_int",
    "lan6_network_id",
    "lan_constant_id",
    "lan_network_id",
    "lan_service_variable_id",
    "lan_session_key",
    "ldn6_network_id",
    "ldn6_session_key",
    "ldn_constant_id",
    "ldn_service_variable_id",
    "ldn_session_key",
    "ldn_session_key_for",
    "nex_session_key",
    "parse_game_key",
    "parse_mac",
]

_HEX = frozenset("0123456789abcdefABCDEF")


# ---------------------------------------------------------------------------
# Game keys and AES-ECB


def parse_game_key(key: str | bytes | bytearray) -> bytes:
    """Turn a game key as written on the wiki into its 16 bytes (spec §3.6).

    * 32 hex digits: the 16 raw bytes they spell (Splatoon 2, SMM2, ...);
    * 16 characters: their ASCII bytes (``p1frXqxmeCZWFv0X``, spec §11);
    * 16 bytes: used as they are.

    Raises:
        ConfigError: any other length, non-hex 32-character text or
            non-ASCII 16-character text.
    """
    if isinstance(key, (bytes, bytearray)):
        if len(key) != 16:
            raise ConfigError(f"a game key is 16 bytes, got {len(key)}")
        return bytes(key)
    if not isinstance(key, str):
        raise ConfigError(f"a game key is text or 16 bytes, got {type(key).__name__}")
    text = key.strip()
    if len(text) == 32:
        if not set(text) <= _HEX:
            raise ConfigError("a 32-character game key must be hex digits")
        return bytes.fromhex(text)
    if len(text) == 16:
        if not text.isascii():
            raise ConfigError("a 16-character game key must be ASCII")
        return text.encode("ascii")
    raise ConfigError(f"a game key is 32 hex digits or 16 ASCII characters, got {len(text)} characters")


def _key16(key: bytes | bytearray, what: str = "key") -> bytes:
    if not isinstance(key, (bytes, bytearray)) or len(key) != 16:
        size = len(key) if isinstance(key, (bytes, bytearray)) else type(key).__name__
        raise ConfigError(f"AES-128 {what} must be 16 bytes, got {size}")
    return bytes(key)


def aes_ecb_encrypt(key: bytes, data: bytes) -> bytes:
    """AES-128-ECB encrypt *data* (a multiple of 16 bytes) under *key*.

    Used for the LDN session keys (§3.3) and available to the LAN crypto
    challenge (§6.4).  Not on the per-packet path.

    Raises:
        ConfigError: key not 16 bytes, or data not a whole number of blocks.
    """
    k = _key16(key)
    if len(data) % 16:
        raise ConfigError(f"AES-ECB input must be a multiple of 16 bytes, got {len(data)}")
    try:
        # The fast backend when installed: it is loaded for AES-GCM anyway, while pycryptodome's
        # first import costs tens of milliseconds (a capture decode pays it for one block).
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    except ImportError:
        from Crypto.Cipher import AES

        return AES.new(k, AES.MODE_ECB).encrypt(bytes(data))  # type: ignore[no-any-return]
    encryptor = Cipher(algorithms.AES(k), modes.ECB()).encryptor()
    return encryptor.update(bytes(data)) + encryptor.finalize()


# ---------------------------------------------------------------------------
# Session keys (spec §3.3, §7.3, §11)


def nex_session_key(server_key: bytes) -> bytes:
    """NEX session key: the first 16 bytes of ``MatchmakeSession.m_SessionKey`` (spec §3.1, §3.3).

    Keys are always AES-128; longer server keys are truncated (KW).
    """
    if not isinstance(server_key, (bytes, bytearray)) or len(server_key) < 16:
        size = len(server_key) if isinstance(server_key, (bytes, bytearray)) else type(server_key).__name__
        raise ConfigError(f"a NEX session key has at least 16 bytes, got {size}")
    return bytes(server_key[:16])


def lan_session_key(game_key: bytes, session_key_param: bytes) -> bytes:
    """LAN session key: ``HMAC-SHA256(game_key, param')[:16]`` (spec §3.3).

    ``param'`` is the 32-byte session key param from LanSessionInfo with its
    last byte incremented modulo 256.  NC-final forgets the ``[:16]``
    (§10.1 item 15); the docs and NC-2020 keep 16 bytes, as we do.
    """
    gk = _key16(game_key, "game key")
    if len(session_key_param) != 32:
        raise ConfigError(f"LAN session key param must be 32 bytes, got {len(session_key_param)}")
    param = bytes(session_key_param[:31]) + bytes([(session_key_param[31] + 1) & 0xFF])
    return hmac.new(gk, param, hashlib.sha256).digest()[:16]


def ldn_session_key(game_key: bytes, session_param: int) -> bytes:
    """LDN session key for Pia 5.9-5.45 (spec §3.3, confirmed in §11).

    *session_param* is the u32 at offset 0x0C of the Pia LDN application data,
    read little-endian.  Four SEAD draws seeded with it, each packed
    little-endian, are encrypted with AES-128-ECB under the game key.
    """
    gk = _key16(game_key, "game key")
    if isinstance(session_param, bool) or not isinstance(session_param, int) or not 0 <= session_param <= 0xFFFFFFFF:
        raise ConfigError(f"LDN session param must be a u32, got {session_param!r}")
    rng = Random(session_param)
    buf = b"".join(rng.u32().to_bytes(4, "little") for _ in range(4))
    return aes_ecb_encrypt(gk, buf)


def _ssid16(ssid: bytes) -> bytes:
    if not isinstance(ssid, (bytes, bytearray)) or len(ssid) != 16:
        raise ConfigError("an LDN SSID is the 16 raw bytes of the session info (spec §11)")
    return bytes(ssid)


def ldn6_session_key(game_key: bytes, ssid: bytes) -> bytes:
    """LDN session key for Pia 6.x: AES-128-ECB(game key, 16 raw SSID bytes) (§11)."""
    return aes_ecb_encrypt(_key16(game_key, "game key"), _ssid16(ssid))


def ldn6_network_id(ssid: bytes) -> int:
    """LDN network id for Pia 6.x: CRC-32 of SSID bytes 1..15, i.e. ``ssid[1:16]`` (§11)."""
    return zlib.crc32(_ssid16(ssid)[1:16])


def ldn_session_key_for(
    profile: VersionProfile,
    game_key: bytes,
    *,
    session_param: int | None = None,
    ssid: bytes | None = None,
) -> bytes:
    """The LDN session key of *profile*'s era (spec §3.3, §7.3).

    * 5.9-5.45: from *session_param* (:func:`ldn_session_key`);
    * 6.x and later: from *ssid* (:func:`ldn6_session_key`).

    Raises:
        ConfigError: Pia <= 5.6 (LDN packets are not encrypted), 5.7-5.8 (the
            game supplies the session key itself: pass it directly), or the
            era's input is missing.
    """
    v = profile.version
    if profile.cipher is Cipher.ECB_HMAC:
        raise ConfigError(f"Pia {profile.name} does not encrypt LDN traffic (spec §3.3)")
    if v < (5, 9):
        # KW: 5.7 takes the key straight from the game; 5.8 is undocumented and
        # treated like its documented neighbour 5.7.
        raise ConfigError(f"Pia {profile.name} LDN keys are supplied by the game; pass the session key itself")
    if v < (6, 0):
        if session_param is None:
            raise ConfigError(f"Pia {profile.name} LDN session keys derive from the session param")
        return ldn_session_key(game_key, session_param)
    if ssid is None:
        raise ConfigError(f"Pia {profile.name} LDN session keys derive from the SSID")
    return ldn6_session_key(game_key, ssid)


# ---------------------------------------------------------------------------
# Addresses


def ipv4_to_int(address: str | ipaddress.IPv4Address) -> int:
    """Parse a dotted IPv4 address into its u32 (ConfigError when it is not IPv4)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise ConfigError(f"not an IP address: {address!r}") from None
    if ip.version != 4:
        raise ConfigError(f"an IPv4 address is required here, got {address!r}")
    return int(ip)


def _port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 0xFFFF:
        raise ConfigError(f"a UDP port is 0..65535, got {port!r}")
    return port


def parse_mac(mac: str | bytes | bytearray) -> bytes:
    """Turn ``"01:23:45:67:89:ab"`` (``:`` or ``-`` separated) or 6 bytes into 6 bytes."""
    if isinstance(mac, (bytes, bytearray)):
        if len(mac) != 6:
            raise ConfigError(f"a MAC address is 6 bytes, got {len(mac)}")
        return bytes(mac)
    if isinstance(mac, str):
        parts = mac.replace("-", ":").split(":")
        if len(parts) == 6 and all(len(p) == 2 and set(p) <= _HEX for p in parts):
            return bytes(int(p, 16) for p in parts)
    raise ConfigError(f"not a MAC address: {mac!r}")


# ---------------------------------------------------------------------------
# Identities (spec §4)


def lan_constant_id(address: str, port: int) -> int:
    """LAN constant id: ``(IPv4 << 32) | port`` (spec §4; documented up to 5.9)."""
    return (ipv4_to_int(address) << 32) | _port(port)


def lan_service_variable_id(address: str, port: int) -> int:
    """LAN service variable id: ``((IPv4 & 0xFFFF) << 16) | port`` (spec §4).

    The IPv6 form (an HMAC-SHA256 compression) is undocumented, so IPv6 is a
    ConfigError.
    """
    return ((ipv4_to_int(address) & 0xFFFF) << 16) | _port(port)


def lan_network_id(host_address: str, host_port: int) -> int:
    """LAN network id up to 5.45: the host's ``((IPv4 & 0xFFFF) << 16) | port`` (spec §4).

    KW's worked example: 192.168.178.215:49154 gives 0xB2D7C002.
    """
    return lan_service_variable_id(host_address, host_port)


def lan6_network_id(host_address: str, random32: int) -> int:
    """LAN network id for 6.16-6.40: ``(random32 << 32) | address32`` (spec §4).

    ``address32`` is the host's IPv4 address, or for IPv6 the first 4 bytes of
    HMAC-SHA256 keyed with 16 zero bytes over the 16 raw address bytes (the
    input encoding is our reading of the docs).
    """
    if isinstance(random32, bool) or not isinstance(random32, int) or not 0 <= random32 <= 0xFFFFFFFF:
        raise ConfigError(f"the random half of a 6.x network id is a u32, got {random32!r}")
    try:
        ip = ipaddress.ip_address(host_address)
    except ValueError:
        raise ConfigError(f"not an IP address: {host_address!r}") from None
    if ip.version == 4:
        low = int(ip)
    else:
        low = int.from_bytes(hmac.new(bytes(16), ip.packed, hashlib.sha256).digest()[:4], "big")
    return (random32 << 32) | low


def ldn_constant_id(mac: str | bytes) -> int:
    """LDN constant id: MAC bytes ``2 4 5 3 1 0`` as the top six bytes of a u64 (spec §4)."""
    m = parse_mac(mac)
    return int.from_bytes(bytes((m[2], m[4], m[5], m[3], m[1], m[0], 0, 0)), "big")


def ldn_service_variable_id(mac: str | bytes) -> int:
    """LDN service variable id (5.x): CRC-32 (zlib/IEEE) of the 6 MAC bytes (spec §4)."""
    return zlib.crc32(parse_mac(mac))
