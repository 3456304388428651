"""Why ``pianode decode`` read a datagram as ``unknown``, or showed only its header: the note it carries, one line.

A datagram is decoded as Pia when it starts with Pia's magic, as a LAN browse datagram when its
sizes fit one, as an LDN frame by its magic, and as PRUDP only when the session names a variant
(``--prudp-variant``): PRUDP v0 has no magic, and its checksum needs the access key.  What is left
says which of those it failed, and points at PRUDP where the bytes look like it: v1's magic
``EA D0`` (spec prudp.md §2.3), or v0's virtual ports as every source shows them (§1.1: one known
stream type on both sides, a server's port 1 or 2 on one of them; the Wireshark dissector's guess
is the same).  A datagram to or from the port of a well-known service (DNS, NTP, DHCP, ...) is named
by that service instead: its bytes can read as anything.  The note names what the bytes look like; it
decodes nothing.
"""

from __future__ import annotations

__all__ = ["NO_KEY_NOTE", "PLAIN_NO_KEY_NOTE", "service_port", "why_unknown"]

#: The note of an encrypted Pia packet read with no key material at all (no session file, no key flag).
NO_KEY_NOTE = "encrypted, and no key was given: only the header is shown (--session FILE, or --session-key)"
#: The note of a plain <= 5.6 packet read so: its messages are shown, its HMAC-MD5 trailer (spec pia.md §3.1) is not
#: judged.
PLAIN_NO_KEY_NOTE = ("not encrypted, and no key was given: the messages are shown, the HMAC is not checked"
                     " (--session FILE, --session-key or --hmac-key)")

_V0_MIN_SIZE = 11  # the shortest v0 packet with a 1-byte checksum (spec prudp.md §2.1)
_NOT_PIA = "not Pia (no magic 32 AB 98 64), nor a LAN browse datagram, nor an LDN frame"
#: UDP ports of services a console's capture holds beside Pia (IANA's registry).
_SERVICES = {53: "DNS", 67: "DHCP", 68: "DHCP", 123: "NTP", 137: "NetBIOS", 138: "NetBIOS", 1900: "SSDP",
             5353: "mDNS", 5355: "LLMNR"}  # fmt: skip


def _port(endpoint: str | None) -> int | None:
    """The port of an ``ip:port`` endpoint (None: no address, as in a JSON Lines capture)."""
    if endpoint is None:
        return None
    _, _, port = endpoint.rpartition(":")
    return int(port) if port.isdigit() else None


def service_port(src: str | None, dst: str | None) -> int | None:
    """The port of a well-known service (DNS, NTP, ...) a datagram is to or from, if any."""
    for port in (_port(dst), _port(src)):
        if port in _SERVICES:
            return port
    return None


def why_unknown(data: bytes, src: str | None = None, dst: str | None = None) -> str:
    """The note of a datagram from *src* to *dst* (``ip:port``) that nothing of the capture's settings
    decodes (see the module)."""
    if not data:
        return "an empty datagram"
    port = service_port(src, dst)
    if port is not None:
        return f"{_NOT_PIA}: UDP port {port} is {_SERVICES[port]}'s"
    # PRUDP's modules only for a datagram nothing else read (`pianode decode` imports what it uses)
    from protocols.prudp.framing_v1 import MAGIC as PRUDP_V1_MAGIC
    from protocols.prudp.packet import StreamType, split_vport

    if data[:2] == PRUDP_V1_MAGIC:
        return f"{_NOT_PIA}; it starts with EA D0, PRUDP v1's magic: decode with --prudp-variant (and --access-key)"
    if len(data) >= _V0_MIN_SIZE:
        (src_type, src_port), (dst_type, dst_port) = split_vport(data[0]), split_vport(data[1])
        server_port = src_port in (1, 2) or dst_port in (1, 2)
        if src_type == dst_type and server_port and src_type in {int(t) for t in StreamType}:
            return (f"{_NOT_PIA}; its first bytes read as PRUDP v0 virtual ports (stream type"
                    f" {StreamType(src_type).name}): decode with --prudp-variant (and --access-key)")
    return _NOT_PIA
