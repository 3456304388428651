"""The JSON of ``pianode decode``: values made JSON types (:func:`to_jsonable`), a Pia header's fields as JSON
(:func:`header_json`, :func:`header_fields_json`) and the text the decoder's fast path writes straight from the
codec's values (``_header_text``, ``_flat_decoded_text``), which equals ``json.dumps`` of the general path's
objects (tests/pianode/capture/test_decode_fast_line.py)."""

from __future__ import annotations

import enum
import json
from json import encoder as json_encoder
from typing import Any

import attrs

from protocols.pia.header import PacketHeader
from protocols.pia.rtt import RttMessage
from protocols.pia.versions import HeaderFormat, VersionProfile
from protocols.wire import KEPT_AS_SENT

__all__ = ["header_fields_json", "header_json", "to_jsonable"]

# --------------------------------------------------------------------------
# JSON conversion


def to_jsonable(value: Any) -> Any:
    """attrs values, enums, bytes, tuples and dicts → JSON types (bytes as hex)."""
    if value is None or isinstance(value, (bool, str, float)):
        return value
    if isinstance(value, enum.Enum):
        if not isinstance(value.value, int):
            return value.value
        if value.name is None:
            # Flag bits no member names (garbage or an undocumented flag): the
            # named ones, then the rest in hex.
            named = [m for m in type(value) if m.value and value.value & m.value == m.value]
            rest = value.value
            for m in named:
                rest &= ~m.value
            return "|".join([*(m.name.lower() for m in named), *([f"{rest:#x}"] if rest else [])]) or "0"
        return value.name.lower()
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if attrs.has(type(value)):
        return {
            f.name.lstrip("_"): to_jsonable(getattr(value, f.name))
            for f in attrs.fields(type(value))
            if (f.repr is not False or f.name in ("checksum_ok", "plaintext"))
            # reserved bytes and the like appear only when a peer sent something else than the node would
            and not (f.metadata.get(KEPT_AS_SENT) and getattr(value, f.name) == f.default)
        }
    if isinstance(value, dict):
        return {str(to_jsonable(k)) if not isinstance(k, str) else k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    return str(value)


#: The JSON Lines encoder: ``json.dumps``' own defaults.
_to_json_text = json.JSONEncoder().encode
#: A string as JSON text (what ``json.dumps`` writes for it: ASCII, escaped).
_json_text = json_encoder.encode_basestring_ascii


def _text_or_null(text: str | None) -> str:
    return "null" if text is None else _json_text(text)


def _header_text(profile: VersionProfile, fields: tuple[Any, ...], footer: tuple[int, ...]) -> str:
    """The JSON text of :func:`header_fields_json`'s object, for a header whose numbers are ints."""
    encrypted, packet_id, connection_id, version, st, dt, dvid, svid, fsize, psize, pflags, nonce, tag = fields
    fmt = profile.header_format
    parts = [f'{{"format": {_json_text(fmt._value_)}, "encrypted": {"true" if encrypted else "false"}, "packet_id": {packet_id:d}']
    if version is not None:
        parts.append(f'"version": {version:d}')
    if fmt in _CONNECTION_ID_FORMATS:
        parts.append(f'"connection_id": {connection_id:d}')
    if fmt in _TIMER_FORMATS:
        parts.append(f'"source_timer": {_int_text(st)}, "destination_timer": {_int_text(dt)}')
    if fmt in _VARIABLE_ID_FORMATS:
        parts.append(f'"destination_variable_id": {_int_text(dvid)}, "source_variable_id": {_int_text(svid)},'
                     f' "footer_size": {fsize:d}')  # fmt: skip
    if fmt is HeaderFormat.G:
        parts.append(f'"padding_size": {psize:d}, "packet_flags": {pflags:d}')
    if nonce:
        parts.append(f'"nonce": "{nonce.hex()}"')
    parts.append(f'"tag": "{tag.hex()}"')
    if profile.footer != "none":
        parts.append(f'"footer": [{", ".join(map(str, footer))}]')  # (plain ints: str is format(v, "d"))
    return ", ".join(parts) + "}"


def _flat_decoded_text(decoded: Any) -> str | None:
    """The JSON text of a message's ``decoded`` object (``{"type": ..., **to_jsonable(decoded)}``) for an RTT
    message with its padding as the node writes it (the padding then does not appear), else None: built by
    the general path."""
    if type(decoded) is RttMessage and decoded.reserved == b"":
        return f'{{"type": "RttMessage", "time": {decoded.time:d}, "is_response": {"true" if decoded.is_response else "false"}}}'
    return None


def _int_text(value: int | None) -> str:
    return "null" if value is None else format(value, "d")


def header_json(h: PacketHeader, profile: VersionProfile, footer: tuple[int, ...]) -> dict[str, Any]:
    """The header fields a layout carries (spec §1.1), bytes as hex."""
    return header_fields_json(
        profile, (h.encrypted, h.packet_id, h.connection_id, h.version, h.source_timer, h.destination_timer,
                  h.destination_variable_id, h.source_variable_id, h.footer_size, h.padding_size, h.packet_flags,
                  h.nonce, h.tag), footer,
    )  # fmt: skip


_CONNECTION_ID_FORMATS = (HeaderFormat.A, HeaderFormat.B, HeaderFormat.C, HeaderFormat.D)
_TIMER_FORMATS = (HeaderFormat.A, HeaderFormat.B)
_VARIABLE_ID_FORMATS = (HeaderFormat.E, HeaderFormat.F, HeaderFormat.G)


def header_fields_json(profile: VersionProfile, fields: tuple[Any, ...], footer: tuple[int, ...]) -> dict[str, Any]:
    """:func:`header_json` of a header given as :class:`PacketHeader`'s fields in their order
    (the ``header`` of a :class:`~protocols.pia.packet_values.LoneMessage`)."""
    encrypted, packet_id, connection_id, version, st, dt, dvid, svid, fsize, psize, pflags, nonce, tag = fields
    fmt = profile.header_format
    out: dict[str, Any] = {"format": fmt.value, "encrypted": encrypted, "packet_id": packet_id}
    if version is not None:
        out["version"] = version
    if fmt in _CONNECTION_ID_FORMATS:
        out["connection_id"] = connection_id
    if fmt in _TIMER_FORMATS:
        out["source_timer"] = st
        out["destination_timer"] = dt
    if fmt in _VARIABLE_ID_FORMATS:
        out["destination_variable_id"] = dvid
        out["source_variable_id"] = svid
        out["footer_size"] = fsize
    if fmt is HeaderFormat.G:
        out["padding_size"] = psize
        out["packet_flags"] = pflags
    if nonce:
        out["nonce"] = nonce.hex()
    out["tag"] = tag.hex()
    if profile.footer != "none":
        out["footer"] = list(footer)
    return out
