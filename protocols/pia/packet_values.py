"""The values a Pia datagram decodes to, below both codecs that build them.

:class:`Packet` is what :class:`protocols.pia.packet.PacketCodec` reads and
writes.  :class:`LoneMessage` is what its fast path (:mod:`protocols.pia.packet_fast`)
gives a receive loop for a packet of one message before any value is built: a
named tuple, so a reader names the field it takes and pays for no object.  The footer helpers pack the receivers'
variable ids (spec §1.6).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

import attrs

from protocols.errors import BadValue, EncodeError
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message

__all__ = ["LoneMessage", "NonceBuilder", "Packet", "pack_footer", "unpack_footer"]

#: ``builder(header, source_ip) -> 12-byte GCM nonce`` (protocols/pia/nonce.py).
NonceBuilder = Callable[[PacketHeader, str], bytes]


@attrs.frozen
class Packet:
    """A decoded datagram: its header, its messages and the footer's receiver variable ids."""

    header: PacketHeader
    messages: tuple[Message, ...]
    footer: tuple[int, ...] = ()


class LoneMessage(NamedTuple):
    """A packet of one message as ``PacketCodec.decode_lone`` reads it, before any value is built.

    ``header`` holds a :class:`PacketHeader`'s fields in its field order
    (``PacketHeader(*header)`` builds it); the message's fields are those of
    :class:`Message` (its source station index None, reserved 0), then the
    footer; ``PacketCodec.packet_of`` turns the first ten into the
    :class:`Packet` that ``decode`` gives.  The last three repeat the header
    fields a receive loop checks, so it names them without reading ``header``.
    """

    header: tuple[Any, ...]
    protocol_type: int
    protocol_port: int
    payload: bytes
    flags: int
    destination: int
    source_constant_id: int | None
    extra: int
    presence: int
    footer: tuple[int, ...]
    packet_id: int
    connection_id: int
    source_variable_id: int | None


#: Builds a named tuple from a plain one with no Python frame (what ``_make`` does).
new_named: Callable[..., tuple[object, ...]] = tuple.__new__

_FOOTER_STRUCTS = [struct.Struct(f">{n}H") for n in range(128)]


def pack_footer(footer: tuple[int, ...]) -> bytes:
    n = len(footer)
    if n >= len(_FOOTER_STRUCTS):
        raise EncodeError(f"footer of {n} receivers does not fit the u8 footer size")
    try:
        return _FOOTER_STRUCTS[n].pack(*footer)
    except struct.error as e:
        raise EncodeError(f"footer variable ids must be u16: {e}") from None


def unpack_footer(raw: bytes) -> tuple[int, ...]:
    n = len(raw)
    if n & 1:
        raise BadValue(f"footer of {n} bytes is not a list of u16 variable ids")
    return _FOOTER_STRUCTS[n >> 1].unpack(raw) if n else ()  # type: ignore[no-any-return]
