"""Session context for ``pianode decode``: the session JSON file and the equivalent flags.

Theory of operation
-------------------
A capture can only be decrypted with what the consoles knew: the Pia version,
the network type and either the session key itself or the public values a
console derives it from (spec ../shared/spec/pia.md §3.3, §7.3, §11).
:func:`load_session` reads those settings from a JSON object (``--session
FILE``), lets command-line flags override them one by one, checks every value
and returns a :class:`DecodeContext`.

Keys are derived exactly as a console does, by :mod:`protocols.pia.keys`:

* LAN: ``game_key`` + the 32-byte ``session_param`` (the session key param of
  LanSessionInfo) → HMAC-SHA256 rule (§3.3);
* LDN 5.9-5.45: ``game_key`` + the u32 ``session_param``, or the
  ``application_data`` of the advertisement, whose little-endian u32 at 0x0 is
  the network id and at 0xC the session param (§7.2, §11) → SEAD + AES-ECB;
* LDN 6.x: ``game_key`` + ``ssid`` (16 raw bytes) → AES-ECB; the network id is
  CRC-32 of ``ssid[1:16]`` (§11);
* NEX: the server hands out the key; give ``session_key`` (longer keys are cut
  to 16 bytes, §3.1) and ``gathering_id`` for the nonce.

Because the version may be unknown until a datagram is seen (the decoder then
detects it), derivation happens per profile in :meth:`DecodeContext.keys_for`
and is cached.  When the file names a version, :func:`load_session` derives
once up front so that a bad setting is a one-line error before any output.

Pia <= 5.6 signs packets with HMAC-MD5 (§3.1).  Its key is normally the
session key, but some titles sign with a fixed key of another length (the 3DS
Pokémon Virtual Console titles use the 10 ASCII bytes ``PokemonSIO``), so
``hmac_key`` may be given on its own, as hex or text.

Text that may be hex or ASCII (``hmac_key``, ``session_key``, ``game_key``,
``prudp.access_key``) accepts an explicit ``hex:`` or ``ascii:`` prefix; without
one, an even number of hex digits is hex and anything else is ASCII (game keys
follow the §3.6 rule: 32 hex digits or 16 characters).

A session file holding only ``"prudp": {"variant": ..., "access_key": ...}``
selects PRUDP decoding (a datagram with Pia's magic is still read as Pia).
"""

from __future__ import annotations

import ipaddress
import json
import os
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import attrs

from protocols.errors import ConfigError
from protocols.pia import keys as pia_keys
from protocols.pia.versions import Cipher, NetworkType, VersionProfile, profile_for

__all__ = ["SETTINGS", "DecodeContext", "KeySet", "PrudpSettings", "load_session", "parse_key_text", "session_path_for"]

#: Every top-level setting the session file (and the flags) understand.
SETTINGS = (
    "version",
    "allow_nearest",
    "network",
    "session_key",
    "hmac_key",
    "game_key",
    "session_param",
    "application_data",
    "ssid",
    "network_id",
    "gathering_id",
    "macs",
    "prudp",
)

_HEX = frozenset("0123456789abcdefABCDEF")

#: The largest session file read: its fields fit in a few kilobytes.
MAX_SESSION_FILE = 1 << 20


# --------------------------------------------------------------------------
# Value parsers (each raises ConfigError naming the setting)


def parse_key_text(text: object, what: str) -> bytes:
    """Bytes from ``"hex:.."``, ``"ascii:.."``, plain hex (even length) or ASCII text."""
    if not isinstance(text, str) or not text:
        raise ConfigError(f"{what} must be a non-empty string")
    if text.startswith("hex:"):
        return _hex_bytes(text[4:], what)
    if text.startswith("ascii:"):
        body = text[6:]
        if not body or not body.isascii():
            raise ConfigError(f"{what} after 'ascii:' must be non-empty ASCII text")
        return body.encode("ascii")
    if len(text) % 2 == 0 and set(text) <= _HEX:
        return bytes.fromhex(text)
    if not text.isascii():
        raise ConfigError(f"{what} is neither hex nor ASCII text")
    return text.encode("ascii")


def _hex_bytes(text: object, what: str, size: int | None = None) -> bytes:
    if not isinstance(text, str):
        raise ConfigError(f"{what} must be a hex string")
    cleaned = "".join(text.split()).replace(":", "")
    if cleaned.lower().startswith("0x"):
        cleaned = cleaned[2:]
    if not cleaned or len(cleaned) % 2 or not set(cleaned) <= _HEX:
        raise ConfigError(f"{what} must be hex digits, got {text!r}")
    data = bytes.fromhex(cleaned)
    if size is not None and len(data) != size:
        raise ConfigError(f"{what} must be {size} bytes ({2 * size} hex digits), got {len(data)}")
    return data


_DIGITS = frozenset("0123456789")


def _int(value: object, what: str, bits: int = 32) -> int:
    """A JSON integer, or text of decimal digits or of hex digits after ``0x``: one rule, so that a string
    never means decimal in one value and hex in another ("10" is ten, "abc" is refused, "0xabc" is hex)."""
    if isinstance(value, bool):
        raise ConfigError(f"{what} must be an integer")
    if isinstance(value, str):
        text = value.strip()
        if text[:2].lower() == "0x" and text[2:] and set(text[2:]) <= _HEX:
            value = int(text[2:], 16)
        elif text and set(text) <= _DIGITS:
            value = int(text, 10)
        else:
            raise ConfigError(f"{what} must be an integer (decimal digits, or hex digits after 0x), got {value!r}")
    if not isinstance(value, int):
        raise ConfigError(f"{what} must be an integer")
    if not 0 <= value < 1 << bits:
        raise ConfigError(f"{what} must fit in {bits} bits, got {value}")
    return value


def _session_key(value: object) -> bytes:
    key = parse_key_text(value, "session_key")
    if len(key) < 16:
        raise ConfigError(f"session_key must be 16 bytes (32 hex digits or 16 characters), got {len(key)} bytes")
    return key[:16]  # NEX keys longer than 16 bytes are cut to 16 (spec §3.1)


def _game_key(value: object) -> bytes:
    if isinstance(value, str) and value.startswith(("hex:", "ascii:")):
        key = parse_key_text(value, "game_key")
        if len(key) != 16:
            raise ConfigError(f"game_key must be 16 bytes, got {len(key)}")
        return key
    if not isinstance(value, str):
        raise ConfigError("game_key must be a string (32 hex digits or 16 characters)")
    try:
        return pia_keys.parse_game_key(value)
    except ConfigError as exc:
        raise ConfigError(f"game_key: {exc}") from None


def _network(value: object) -> NetworkType:
    if isinstance(value, str):
        try:
            return NetworkType(value.strip().lower())
        except ValueError:
            pass
    names = ", ".join(n.value for n in NetworkType)
    raise ConfigError(f"network must be one of {names}, got {value!r}")


def _macs(value: object) -> dict[str, bytes]:
    if not isinstance(value, Mapping):
        raise ConfigError('macs must be an object {"ip": "aa:bb:cc:dd:ee:ff"}')
    out: dict[str, bytes] = {}
    for ip, mac in value.items():
        try:
            ip_text = str(ipaddress.ip_address(str(ip).strip()))
        except ValueError:
            raise ConfigError(f"macs: {ip!r} is not an IP address") from None
        try:
            out[ip_text] = pia_keys.parse_mac(mac)
        except ConfigError as exc:
            raise ConfigError(f"macs[{ip_text}]: {exc}") from None
    return out


def _session_param(value: object) -> bytes | int:
    """LAN: 32 bytes (64 hex digits); LDN 5.9+: a u32 (spec §3.3)."""
    if isinstance(value, str):
        cleaned = value.strip()
        if len(cleaned) == 64 and set(cleaned) <= _HEX:
            return bytes.fromhex(cleaned)
    try:
        return _int(value, "session_param")
    except ConfigError:
        raise ConfigError(
            "session_param is 64 hex digits (LAN session key param) or an integer (LDN 5.9+: decimal digits,"
            f" or hex digits after 0x), got {value!r}"
        ) from None


@attrs.frozen
class PrudpSettings:
    """PRUDP decoding: variant name, access key and (Rendez-Vous) session key."""

    variant: str
    access_key: bytes = b""
    aes_key: bytes | None = None


def _prudp(value: object) -> PrudpSettings:
    if not isinstance(value, Mapping):
        raise ConfigError('prudp must be an object {"variant": ..., "access_key": ...}')
    from protocols.prudp import variant_for

    variant = value.get("variant")
    if not isinstance(variant, str):
        raise ConfigError("prudp.variant must be a string")
    variant_for(variant)  # raises ConfigError listing the known variants
    access = value.get("access_key", "")
    access_key = b"" if access in ("", None) else _ascii_or_hex(access, "prudp.access_key")
    aes = value.get("aes_key")
    aes_key = None if aes is None else _hex_bytes(aes, "prudp.aes_key", 16)
    unknown = set(value) - {"variant", "access_key", "aes_key"}
    if unknown:
        raise ConfigError(f"prudp: unknown setting {sorted(unknown)[0]!r}")
    return PrudpSettings(variant, access_key, aes_key)


def _ascii_or_hex(value: object, what: str) -> bytes:
    # Access keys are short ASCII strings ("8dtRv2oj"); hex only with "hex:".
    if isinstance(value, str) and not value.startswith(("hex:", "ascii:")):
        if not value.isascii():
            raise ConfigError(f"{what} must be ASCII")
        return value.encode("ascii")
    return parse_key_text(value, what)


# --------------------------------------------------------------------------
# The context


@attrs.frozen
class KeySet:
    """What one profile needs to open packets, and how it was obtained."""

    session_key: bytes | None
    hmac_key: bytes | None
    nonce_builder: Callable[..., bytes] | None
    #: How the key was obtained ("session_key", "game_key + ssid (LDN 6.x)", ...).
    source: str | None
    #: Why a key or nonce is missing (None when nothing is missing).
    problem: str | None

    @property
    def can_authenticate(self) -> bool:
        return self.problem is None and (self.session_key is not None or self.hmac_key is not None)


@attrs.frozen
class DecodeContext:
    """Everything ``pianode decode`` knows about the session, checked."""

    version: str | None = None
    profile: VersionProfile | None = None
    network: NetworkType | None = None
    session_key: bytes | None = None
    hmac_key: bytes | None = None
    game_key: bytes | None = None
    session_param: bytes | int | None = None
    application_data: bytes | None = None
    ssid: bytes | None = None
    network_id: int | None = None
    gathering_id: int | None = None
    macs: dict[str, bytes] | None = attrs.field(default=None, eq=False)
    prudp: PrudpSettings | None = None
    allow_nearest: bool = False
    #: Settings that were ignored (unknown keys), for a note on stderr.
    warnings: tuple[str, ...] = ()
    _cache: dict[tuple[int, int], KeySet] = attrs.field(factory=dict, eq=False, repr=False, alias="_cache")

    @property
    def awaits_lan_param(self) -> bool:
        """A LAN game key without its session param: a browse reply in the capture can supply it (§6.6)."""
        return (
            self.game_key is not None and self.session_key is None and self.session_param is None
            and self.network in (None, NetworkType.LAN)
        )

    @property
    def has_key_material(self) -> bool:
        return any(v is not None for v in (self.session_key, self.hmac_key, self.game_key))

    # -- LDN application data (spec §7.2: little-endian in 5.x) -------------
    def _app_u32(self, offset: int) -> int | None:
        data = self.application_data
        if data is None or len(data) < offset + 4:
            return None
        return int.from_bytes(data[offset : offset + 4], "little")

    def effective_network_id(self, profile: VersionProfile) -> int | None:
        if self.network_id is not None:
            return self.network_id
        if self.network is NetworkType.LDN:
            if profile.version >= (6, 0):
                return pia_keys.ldn6_network_id(self.ssid) if self.ssid is not None else None
            return self._app_u32(0)
        return None

    def keys_for(self, profile: VersionProfile) -> KeySet:
        """Session key, HMAC key and nonce builder for *profile* (cached)."""
        cached = self._cache.get(profile.version)
        if cached is None:
            cached = self._cache[profile.version] = self._derive(profile)
        return cached

    def _derive(self, profile: VersionProfile) -> KeySet:
        if (
            profile.cipher is Cipher.ECB_HMAC and self.network is NetworkType.LDN
            and self.session_key is None and self.game_key is not None
        ):
            # <= 5.6 local play: plain packets signed with the game's key (pianode.mesh.legacy).
            return KeySet(None, self.hmac_key or self.game_key, None, "game_key (LDN <= 5.6 HMAC key)", None)
        try:
            key, source = self._session_key_for(profile)
        except ConfigError as exc:
            return KeySet(None, self.hmac_key, None, None, str(exc))
        ecb = profile.cipher is Cipher.ECB_HMAC
        hmac_key = self.hmac_key if self.hmac_key is not None else (key if ecb else None)
        if key is None and hmac_key is None:
            return KeySet(None, None, None, None, None)
        builder = None
        problem = None
        if not ecb and key is not None:
            if self.network is None:
                problem = f"Pia {profile.name} nonces depend on the network type: give network (lan, ldn, nex, npln)"
            else:
                from protocols.pia.nonce import nonce_builder

                try:
                    builder = nonce_builder(
                        profile,
                        self.network,
                        gathering_id=self.gathering_id,
                        network_id=self.effective_network_id(profile),
                        macs=self.macs if self.network is NetworkType.LDN and profile.version < (6, 0) else None,
                    )
                except ConfigError as exc:
                    problem = str(exc)
        if ecb and key is None and self.hmac_key is not None and source is None:
            source = "hmac_key"
        return KeySet(key, hmac_key, builder, source, problem)

    def _session_key_for(self, profile: VersionProfile) -> tuple[bytes | None, str | None]:
        if self.session_key is not None:
            return self.session_key, "session_key"
        if self.game_key is None:
            return None, None
        net = self.network
        if net is None:
            raise ConfigError("a game key derives the session key only with a network type (lan or ldn)")
        if net is NetworkType.LAN:
            if profile.version >= (6, 31):
                raise ConfigError(f"the LAN session key of Pia {profile.name} is undocumented: give session_key")
            if not isinstance(self.session_param, bytes):
                raise ConfigError("a LAN session key derives from the 32-byte session_param (64 hex digits)")
            return pia_keys.lan_session_key(self.game_key, self.session_param), "game_key + session_param (LAN)"
        if net is NetworkType.LDN:
            if profile.version >= (6, 0):
                if self.ssid is None:
                    raise ConfigError(f"Pia {profile.name} LDN session keys derive from the ssid")
                return pia_keys.ldn_session_key_for(profile, self.game_key, ssid=self.ssid), "game_key + ssid (LDN 6.x)"
            param = self.session_param
            source = "game_key + session_param (LDN)"
            if param is None and (app := self._app_u32(0x0C)) is not None:
                param, source = app, "game_key + application_data (LDN)"
            if isinstance(param, bytes):
                raise ConfigError("an LDN session_param is an integer (the u32 at 0xC of the application data)")
            return pia_keys.ldn_session_key_for(profile, self.game_key, session_param=param), source
        raise ConfigError(f"{net.value.upper()} session keys come from the server: give session_key")


def session_path_for(capture_path: str) -> str:
    """``FILE.session.json`` beside ``FILE.pcap``: where a recording keeps its session settings
    (``pianode mesh|ldn --record``), and where ``pianode decode`` looks for them."""
    return (capture_path[:-5] if capture_path.endswith(".pcap") else capture_path) + ".session.json"


def load_session(
    path: str | os.PathLike[str] | TextIO | None, overrides: Mapping[str, Any] | None = None
) -> DecodeContext:
    """Read a session file (or none, or a text stream: standard input) and apply flag *overrides*
    (None values are ignored).

    Raises:
        ConfigError: unreadable file, bad JSON, or any bad setting (one line).
    """
    raw: dict[str, Any] = {}
    if path is not None:
        stream = path if hasattr(path, "read") else None
        name = "(standard input)" if stream is not None else os.fspath(path)  # type: ignore[arg-type]
        try:
            if stream is not None:
                text = stream.read(MAX_SESSION_FILE + 1)
            else:
                with open(name, encoding="utf-8") as f:
                    text = f.read(MAX_SESSION_FILE + 1)
            if len(text) > MAX_SESSION_FILE:
                raise ConfigError(f"session file {name} is larger than {MAX_SESSION_FILE} bytes: no session needs that much")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(f"cannot read session file {name}: {reason}") from None
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"session file {name} is not JSON: {' '.join(str(exc).split())}") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"session file {name} must hold a JSON object")
        raw.update(obj)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if isinstance(value, Mapping) and isinstance(raw.get(key), Mapping):
            raw[key] = {**raw[key], **value}  # a flag refines one field of "prudp" or "macs"
        else:
            raw[key] = value
    return _build(raw)


def _short_session_key(raw: Mapping[str, Any], profile: VersionProfile | None) -> bytes | None:
    """A session key shorter than 16 bytes given for an HMAC-only (<= 5.6) session, or None."""
    value = raw.get("session_key")
    if value is None or raw.get("hmac_key") is not None:
        return None
    if profile is None or profile.cipher is not Cipher.ECB_HMAC:
        return None
    key = parse_key_text(value, "session_key")
    return key if len(key) < 16 else None


def _build(raw: Mapping[str, Any]) -> DecodeContext:
    kw: dict[str, Any] = {}
    warnings = [f"ignored unknown setting {k!r}" for k in raw if k not in SETTINGS]
    nearest = raw.get("allow_nearest")
    nearest = False if nearest is None else nearest  # (null is no setting, as for every other field)
    if not isinstance(nearest, bool):  # "no" or 5 would otherwise read as true
        raise ConfigError(f"allow_nearest must be true or false (a JSON boolean), got {nearest!r}")
    kw["allow_nearest"] = nearest
    if raw.get("version") is not None:
        version = raw["version"]
        if not isinstance(version, (str, int)) or isinstance(version, bool):
            raise ConfigError("version must be a string such as \"5.18\"")
        kw["profile"] = profile_for(version, allow_nearest=kw["allow_nearest"])
        kw["version"] = str(version)
    parsers: dict[str, Callable[[Any], Any]] = {
        "network": _network,
        "session_key": _session_key,
        "hmac_key": lambda v: parse_key_text(v, "hmac_key"),
        "game_key": _game_key,
        "session_param": _session_param,
        "application_data": lambda v: _hex_bytes(v, "application_data"),
        "ssid": lambda v: _hex_bytes(v, "ssid", 16),
        "network_id": lambda v: _int(v, "network_id"),
        "gathering_id": lambda v: _int(v, "gathering_id"),
        "macs": _macs,
        "prudp": _prudp,
    }
    short = _short_session_key(raw, kw.get("profile"))
    if short is not None:
        # <= 5.6 signs with HMAC-MD5, whose key may have any length; a short
        # "session_key" there can only be that key (it cannot be an AES key).
        raw = {k: v for k, v in raw.items() if k != "session_key"}
        raw["hmac_key"] = "hex:" + short.hex()
        warnings.append(f"session_key of {len(short)} bytes used as the <= 5.6 HMAC key (it cannot decrypt)")
    for key, parse in parsers.items():
        if raw.get(key) is not None:
            kw[key] = parse(raw[key])
    if kw.get("network") is NetworkType.LDN and "macs" not in kw:
        # LDN 5.x nonces need each sender's MAC; without a map, the decoder takes
        # them from the capture's link layer (Ethernet / 802.11 source address).
        kw["macs"] = {}
        prof = kw.get("profile")
        six = prof is None and "ssid" in kw and "application_data" not in kw  # an SSID keys only 6.x (spec §11)
        if (prof is None or prof.version < (6, 0)) and not six and any(k in kw for k in ("session_key", "game_key")):
            warnings.append("no macs: LDN 5.x nonces will use the source MAC addresses found in the capture")
    ctx = DecodeContext(**kw, warnings=tuple(warnings))
    if ctx.profile is not None and ctx.prudp is None:
        ks = ctx.keys_for(ctx.profile)
        if ks.problem is not None and ctx.has_key_material:
            if not ctx.awaits_lan_param:
                raise ConfigError(ks.problem)
            warnings.append("no session_param: the LAN session key will be derived from a browse reply in the capture")
            ctx = attrs.evolve(ctx, warnings=tuple(warnings), _cache={})
    return ctx
