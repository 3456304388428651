"""A stream's packets as fields: what :mod:`protocols.pia.packet_fast`'s stream sealer and opener do,
spelled out for a caller that handles many packets in one loop (``pianode.mesh.stream``).

The closures of :mod:`protocols.pia.packet_fast` are checked against the general codec when they are
made; a plan is made beside its closure and checked against it, so a loop that follows the plan gives
the codec's bytes and values too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

__all__ = ["OpenPlan", "SealPlan", "open_by_plan", "payload_end", "seal_by_plan"]


class SealPlan(NamedTuple):
    """A stream sealer's packet as fields, for a caller that seals a frame to many peers in one loop
    (``pianode.mesh.stream``): H-C/H-D headers, messages with a destination (M-C..M-E).  The datagram for
    packet id ``pid``, header nonce ``hn`` and *payload* of ``n`` bytes::

        sealed = seal(nonce_lead + hn[nonce_skip:],
                      message_pack(full, flags, n, *rest) + payload + tails[n & 15], None)
        datagram = header_pack(magic, version_byte, connection_id, pid, hn, sealed[tag_part]) + sealed[:-16]

    with the AEAD's one-call ``seal``, or (``seal`` None: pycryptodome's fast path) ``seal_many`` of the
    nonces and plaintexts of many packets at once giving each ``sealed``;
    where ``message_fields`` is ``(full, flags, *rest)``: the message header's fields but its size; which is
    ``sealer(pid, hn, payload)``'s bytes (checked when the sealer is made).
    """

    nonce_lead: bytes
    nonce_skip: int
    seal: Callable[[bytes, bytes, bytes | None], bytes] | None
    seal_many: Callable[[list[bytes], list[bytes]], list[bytes]] | None
    message_pack: Callable[..., bytes]
    message_fields: tuple[int, ...]
    tails: tuple[bytes, ...]
    header_pack: Callable[..., bytes]
    magic: int
    version_byte: int
    connection_id: int
    tag_part: slice


class OpenPlan(NamedTuple):
    """A stream opener's checks as fields, for a caller that opens a batch in one loop
    (``pianode.mesh.stream``).  A datagram is the stream's when ``len(d) >= header_size``,
    ``d.startswith(prefix)``, ``not (footer_at and d[footer_at])``.  Its nonce is ``nonce_lead +
    d[nonce_at:tag_at]``, its ciphertext ``d[header_size:]`` and its tag ``d[tag_at:header_size]``; its
    body is ``open_one(nonce, ciphertext, tag)`` (the AEAD's checked open: raises AuthenticationError for
    a tag that fails), or the same by ``decrypt(nonce, ciphertext + tag, None)`` where the AEAD has an
    unchecked full-tag open (raises ``tag_error``), or by ``open_many(nonces, ciphertexts, tags)`` for many
    datagrams in one call where it opens them cheaper so (pycryptodome's fast path: None for a tag that
    fails).  The body is the stream's
    message when it starts with ``message_first``, has ``message_rest`` at 4, and its length and end fit
    the size in bytes 2-3 (``message_header_size + size + tails``); the payload follows the header.
    ``opener(d)`` gives the same payload (checked when the opener is made)."""

    prefix: bytes
    header_size: int
    footer_at: int
    nonce_lead: bytes
    nonce_at: int
    tag_at: int
    open_one: Callable[[bytes, bytes, bytes], bytes]
    decrypt: Callable[[bytes, bytes, bytes | None], bytes] | None
    tag_error: type[Exception]
    open_many: Callable[[list[bytes], list[bytes], list[bytes]], list[bytes | None]] | None
    message_first: bytes
    message_rest: bytes
    message_header_size: int
    tails: tuple[bytes, ...]
    tail_lengths: tuple[int, ...]


def seal_by_plan(plan: SealPlan, packet_id: int, hn: bytes, payload: bytes, *, type_port: int | None = None) -> bytes:
    """The datagram as :class:`SealPlan` describes it (what ``pianode.mesh.stream`` computes inline);
    *type_port*: another message's protocol type and port (``type << 24 | port``) in place of the stream's."""
    n = len(payload)
    fields = plan.message_fields
    if type_port is not None:
        fields = (fields[0], fields[1], type_port, *fields[3:])
    body = plan.message_pack(fields[0], fields[1], n, *fields[2:]) + payload + plan.tails[n & 15]
    nonce = plan.nonce_lead + hn[plan.nonce_skip :]
    sealed = plan.seal(nonce, body, None) if plan.seal is not None else plan.seal_many([nonce], [body])[0]
    return plan.header_pack(plan.magic, plan.version_byte, plan.connection_id, packet_id, hn, sealed[plan.tag_part]) + sealed[:-16]


def open_by_plan(plan: OpenPlan, data: bytes) -> bytes | None:
    """The stream's payload in *data* as :class:`OpenPlan` describes it, or None when *data* is not of
    the stream's shape (the opener decides those); raises ``plan.tag_error`` (``decrypt``) or
    AuthenticationError (``open_one``) for a tag that fails."""
    hsize, tag_at = plan.header_size, plan.tag_at
    if len(data) < hsize or not data.startswith(plan.prefix) or (plan.footer_at and data[plan.footer_at]):
        return None
    nonce = plan.nonce_lead + data[plan.nonce_at : tag_at]
    if plan.decrypt is not None:
        body = plan.decrypt(nonce, data[hsize:] + data[tag_at:hsize], None)
    else:
        body = plan.open_one(nonce, data[hsize:], data[tag_at:hsize])
    stop = payload_end(plan, body)
    return body[plan.message_header_size : stop] if stop else None


def payload_end(plan: OpenPlan, body: bytes) -> int:
    """Where the payload of the stream's message in the opened *body* ends (the plan's message checks:
    constant bytes, size, padding), or 0 when *body* is not the stream's message."""
    if not (body.startswith(plan.message_first) and body.startswith(plan.message_rest, 4)):
        return 0
    size = body[2] << 8 | body[3]
    stop = plan.message_header_size + size
    k = size & 15
    if len(body) != stop + plan.tail_lengths[k] or not body.endswith(plan.tails[k]):
        return 0
    return stop
