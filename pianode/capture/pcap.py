"""Capture files in and out: UDP datagrams from pcap, pcapng, JSON Lines or hex lines; pcap out.

Theory of operation
-------------------
:func:`open_capture` sniffs the first bytes of its input and picks a reader:

* **pcap** (all four magics: micro/nanosecond, either byte order) and **pcapng**
  (any number of sections and interfaces, enhanced/simple/obsolete packet blocks,
  ``if_tsresol``/``if_tsoffset``).  Each frame is peeled down to UDP through its
  link layer (Ethernet with 802.1Q/802.1ad tags, Linux cooked SLL and SLL2, raw IP,
  BSD null/loopback, and decrypted IEEE 802.11 data frames, bare or under radiotap,
  as an LDN monitor capture has them), keeping the sender's MAC where the frame has
  one (LDN 5.x nonces need it, spec §3.2), then IPv4 (fragments are skipped, not reassembled) or IPv6
  (extension headers walked).  Frames that carry no UDP are *counted* by reason in
  :class:`CaptureStats` (``tcp``, ``icmp``, ``arp``, ...) and otherwise ignored.
* **JSON Lines**: one object per line with ``"hex"`` (or ``"data"``/``"payload"``)
  and optional ``"src"``, ``"dst"`` (``"ip:port"``), ``"time"`` (seconds, or an
  ISO 8601 time), ``"name"`` and ``"src_mac"``.  Only unreadable bytes make a
  record an error; a bad optional field is dropped with a warning.
* **hex lines**: one datagram per line in bare hex (spaces and colons allowed,
  ``#`` comments).  JSON and hex lines may be mixed; a line's first character
  decides.

A record that is present but unusable (bad hex, a UDP datagram cut short by the
snap length) still yields a :class:`Datagram` whose ``error`` says why, so the
decoder can report it and go on.  Input that is not a capture at all raises
:class:`CaptureError` (one line, for the CLI's exit status 2).  A file cut off in
the middle of a record ends the iteration and leaves a note in
``CaptureStats.problem``.

:class:`PcapWriter` is the mirror: it wraps UDP payloads in Ethernet + IPv4 (or
IPv6) + UDP frames with correct lengths and checksums (RFC 791 header checksum,
RFC 768/8200 UDP checksum over the pseudo-header), so Wireshark and tshark read
the files it writes.

Formats: pcap — the libpcap file format (draft-ietf-opsawg-pcap); pcapng —
draft-ietf-opsawg-pcapng; link types — tcpdump.org LINKTYPE_* registry.
"""

from __future__ import annotations

import collections
import datetime
import ipaddress
import json
import math
import os
import struct
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any, BinaryIO

import attrs

__all__ = [
    "Capture",
    "CaptureError",
    "CaptureStats",
    "Datagram",
    "PcapWriter",
    "format_endpoint",
    "open_capture",
    "parse_endpoint",
]


class CaptureError(ValueError):
    """The input cannot be read as a capture at all (one line for the user)."""


@attrs.frozen
class Datagram:
    """One UDP payload from a capture, with where and when it was seen."""

    #: 1-based position among the datagrams this capture yields.
    index: int
    data: bytes = attrs.field(repr=lambda b: b.hex())
    time: float | None = None
    #: ``"ip:port"`` (``"[v6]:port"`` for IPv6), or None when the input does not say.
    src: str | None = None
    dst: str | None = None
    #: 1-based frame number (pcap/pcapng) or line number (text input).
    frame: int | None = None
    #: Why this record could not be fully read (then ``data`` may be partial or empty).
    error: str | None = None
    #: A label the input gave the record (the ``"name"`` field of JSON Lines).
    name: str | None = None
    #: A non-fatal problem with the record (a field that was ignored).
    warning: str | None = None
    #: The sender's link-layer address ("aa:bb:cc:dd:ee:ff") when the frame carries one
    #: (Ethernet, Linux cooked, 802.11); LDN 5.x nonces are built from it (spec §3.2).
    src_mac: str | None = None


@attrs.define
class CaptureStats:
    """What a reader saw, including what it skipped."""

    format: str = ""
    #: Link types of the pcap file or of the pcapng interfaces, in order of appearance.
    link_types: list[int] = attrs.Factory(list)
    #: Frames (pcap/pcapng packet records) or records (non-blank text lines) read.
    frames: int = 0
    #: Datagrams yielded (UDP datagrams for pcap/pcapng).
    udp: int = 0
    #: Frames without UDP, by reason ("tcp", "icmp", "arp", "ip-fragment", ...).
    skipped: collections.Counter[str] = attrs.Factory(collections.Counter)
    #: Set when the input ended inside a record or turned out corrupt part-way.
    problem: str | None = None


# --------------------------------------------------------------------------
# Endpoints


def format_endpoint(ip: str, port: int | None) -> str:
    """``"1.2.3.4:5"``, ``"[::1]:5"``; the bare address when there is no port."""
    if port is None:
        return ip
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def parse_endpoint(text: str) -> tuple[str, int | None]:
    """Split ``"ip:port"`` / ``"[v6]:port"`` / a bare address into ``(ip, port)``.

    Raises:
        ValueError: not an IP address (with an optional port).
    """
    text = text.strip()
    port: int | None = None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"bad address {text!r}")
        if rest:
            port = _port(rest[1:], text)
    elif text.count(":") == 1:
        host, _, p = text.partition(":")
        port = _port(p, text)
    else:
        host = text  # bare IPv4 or bare IPv6
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"bad address {text!r} (expected ip:port)") from None
    return str(addr), port


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 0xFFFF:
        raise ValueError(f"bad port in {whole!r}")
    return int(text)


# --------------------------------------------------------------------------
# Link, network and transport layers


class _Skip(Exception):
    """A frame that carries no (complete, unfragmented) UDP datagram."""


# Link types (tcpdump.org LINKTYPE_* registry).
LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
LINKTYPE_IEEE802_11 = 105
LINKTYPE_RADIOTAP = 127
# DLT_RAW as written by some platforms' libpcap (12 on most BSDs, 14 on OpenBSD).
_RAW_ALIASES = (12, 14)

_ETH_IPV4, _ETH_IPV6, _ETH_ARP = 0x0800, 0x86DD, 0x0806
_ETH_VLAN = (0x8100, 0x88A8, 0x9100)
_ETHERTYPE_NAMES = {_ETH_ARP: "arp", 0x8035: "rarp", 0x88CC: "lldp", 0x888E: "eapol"}
_IP_PROTO_NAMES = {1: "icmp", 2: "igmp", 6: "tcp", 47: "gre", 50: "esp", 58: "icmpv6", 132: "sctp"}
_IPV6_EXT = (0, 43, 60)  # hop-by-hop, routing, destination options: (len + 1) * 8 bytes
_UDP = 17

Udp = tuple[str, int, str, int, bytes, int]  # src ip, sport, dst ip, dport, payload, udp length


def _u16(b: bytes, off: int) -> int:
    return (b[off] << 8) | b[off + 1]


def _mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def _link_to_ip(link_type: int, frame: bytes) -> tuple[int, bytes, str | None]:
    """Return ``(ethertype, network-layer bytes, source MAC or None)`` for one frame.

    Trailing bytes (Ethernet padding, an FCS) are harmless: the IP length bounds the datagram.
    """
    if link_type == LINKTYPE_ETHERNET:
        if len(frame) < 14:
            raise _Skip("short-frame")
        off, etype = 14, _u16(frame, 12)
        while etype in _ETH_VLAN:  # 802.1Q / 802.1ad tags: 2-byte TCI, then the next type
            if len(frame) < off + 4:
                raise _Skip("short-frame")
            etype = _u16(frame, off + 2)
            off += 4
        if etype < 0x0600:
            raise _Skip("ieee802.3")  # a length field: LLC, not IP
        return etype, frame[off:], _mac(frame[6:12])
    if link_type == LINKTYPE_LINUX_SLL:  # 16-byte cooked header, protocol at 14
        if len(frame) < 16:
            raise _Skip("short-frame")
        mac = _mac(frame[6:12]) if _u16(frame, 4) == 6 else None  # link-layer address length
        return _u16(frame, 14), frame[16:], mac
    if link_type == LINKTYPE_LINUX_SLL2:  # 20-byte cooked header, protocol at 0
        if len(frame) < 20:
            raise _Skip("short-frame")
        mac = _mac(frame[12:18]) if frame[11] == 6 else None
        return _u16(frame, 0), frame[20:], mac
    if link_type in (LINKTYPE_RAW, *_RAW_ALIASES, LINKTYPE_IPV4, LINKTYPE_IPV6):
        if not frame:
            raise _Skip("short-frame")
        return (_ETH_IPV6 if frame[0] >> 4 == 6 else _ETH_IPV4), frame, None
    if link_type in (LINKTYPE_NULL, LINKTYPE_LOOP):  # 4-byte address family
        if len(frame) < 4:
            raise _Skip("short-frame")
        fam = struct.unpack(">I" if link_type == LINKTYPE_LOOP else "<I", frame[:4])[0]
        if link_type == LINKTYPE_NULL and fam > 0xFFFF:  # written by a big-endian host
            fam = struct.unpack(">I", frame[:4])[0]
        if fam == 2:
            return _ETH_IPV4, frame[4:], None
        if fam in (10, 24, 28, 30):  # AF_INET6 on Linux, the BSDs and Darwin
            return _ETH_IPV6, frame[4:], None
        raise _Skip(f"address-family-{fam}")
    if link_type == LINKTYPE_RADIOTAP:
        # Radiotap: version 0, pad, LE u16 header length, then the 802.11 frame.
        if len(frame) < 8 or frame[0] != 0:
            raise _Skip("malformed-radiotap")
        hlen = frame[2] | frame[3] << 8
        if hlen < 8 or hlen > len(frame):
            raise _Skip("malformed-radiotap")
        return _wlan_to_ip(frame[hlen:])
    if link_type == LINKTYPE_IEEE802_11:
        return _wlan_to_ip(frame)
    raise _Skip(f"linktype-{link_type}")


def _wlan_to_ip(frame: bytes) -> tuple[int, bytes, str | None]:
    """An IEEE 802.11 data frame (already decrypted) with an LLC/SNAP header (IEEE 802.11-2020 §9.2)."""
    if len(frame) < 24:
        raise _Skip("short-frame")
    fc0, fc1 = frame[0], frame[1]
    ftype, subtype = (fc0 >> 2) & 3, fc0 >> 4
    if ftype != 2:
        raise _Skip("802.11-management" if ftype == 0 else "802.11-control")
    if subtype & 0x04:
        raise _Skip("802.11-null-data")
    if fc1 & 0x40:
        raise _Skip("802.11-protected")  # still encrypted: nothing to read
    to_ds, from_ds = fc1 & 0x01, fc1 & 0x02
    off = 24
    if to_ds and from_ds:
        off += 6  # address 4
    if subtype & 0x08:
        off += 2  # QoS control
        if fc1 & 0x80:
            off += 4  # HT control (order bit on a QoS frame)
    # Source address: addr2 unless the AP relayed it (FromDS: addr3; WDS: addr4).
    if from_ds and to_ds:
        sa = frame[24:30]
    elif from_ds:
        sa = frame[16:22]
    else:
        sa = frame[10:16]
    llc = frame[off : off + 8]
    if len(llc) < 8 or llc[:3] != b"\xaa\xaa\x03":
        raise _Skip("802.11-non-snap")
    return _u16(llc, 6), frame[off + 8 :], _mac(sa)


def _ip_to_udp(etype: int, pkt: bytes) -> tuple[str, str, bytes]:
    """Return ``(src ip, dst ip, UDP header + payload)`` or raise _Skip."""
    if etype == _ETH_IPV4:
        if len(pkt) < 20 or pkt[0] >> 4 != 4:
            raise _Skip("malformed-ipv4")
        ihl = (pkt[0] & 0x0F) * 4
        total = _u16(pkt, 2)
        if ihl < 20 or total < ihl:
            raise _Skip("malformed-ipv4")
        frag = _u16(pkt, 6)
        if frag & 0x3FFF:  # a fragment offset or "more fragments": not reassembled here
            raise _Skip("ip-fragment")
        proto = pkt[9]
        if proto != _UDP:
            raise _Skip(_IP_PROTO_NAMES.get(proto, f"ip-proto-{proto}"))
        # The IP total length bounds the datagram: Ethernet pads short frames.
        return (
            str(ipaddress.IPv4Address(pkt[12:16])),
            str(ipaddress.IPv4Address(pkt[16:20])),
            pkt[ihl:total],
        )
    if etype == _ETH_IPV6:
        if len(pkt) < 40 or pkt[0] >> 4 != 6:
            raise _Skip("malformed-ipv6")
        end = 40 + _u16(pkt, 4)
        nxt, off = pkt[6], 40
        while nxt != _UDP:
            if nxt in _IPV6_EXT or nxt == 51:
                if len(pkt) < off + 2:
                    raise _Skip("malformed-ipv6")
                size = (pkt[off + 1] + 2) * 4 if nxt == 51 else (pkt[off + 1] + 1) * 8
                nxt, off = pkt[off], off + size
            elif nxt == 44:  # fragment header
                if len(pkt) < off + 8:
                    raise _Skip("malformed-ipv6")
                if _u16(pkt, off + 2) & 0xFFF9:  # offset or M flag
                    raise _Skip("ip-fragment")
                nxt, off = pkt[off], off + 8
            else:
                raise _Skip(_IP_PROTO_NAMES.get(nxt, f"ip-proto-{nxt}"))
        if off > end:
            raise _Skip("malformed-ipv6")
        return (
            str(ipaddress.IPv6Address(pkt[8:24])),
            str(ipaddress.IPv6Address(pkt[24:40])),
            pkt[off:end],
        )
    raise _Skip(_ETHERTYPE_NAMES.get(etype, f"ethertype-0x{etype:04x}"))


def _frame_to_udp(link_type: int, frame: bytes) -> tuple[str, str, int, int, bytes, str | None, str | None]:
    """Peel one frame down to UDP: ``(src, dst, sport, dport, payload, error, source MAC)``."""
    etype, pkt, mac = _link_to_ip(link_type, frame)
    src, dst, udp = _ip_to_udp(etype, pkt)
    if len(udp) < 8:
        raise _Skip("malformed-udp")
    sport, dport, ulen = _u16(udp, 0), _u16(udp, 2), _u16(udp, 4)
    if ulen < 8:
        raise _Skip("malformed-udp")
    payload = udp[8:ulen]
    error = None
    if len(payload) < ulen - 8:
        error = f"captured only {len(payload)} of {ulen - 8} UDP payload bytes (snap length)"
    return src, dst, sport, dport, payload, error, mac


# --------------------------------------------------------------------------
# Readers

_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
# A frame larger than this is taken as a sign of corruption, not read into memory.
_MAX_RECORD = 1 << 26
#: The longest text line a capture may hold: a 65,535-byte datagram in hex within a JSON
#: record, with room for its other fields.  Longer lines hold no datagram; they are refused
#: before they are read whole, so a hostile file cannot make the reader hold it in memory.
MAX_LINE = 2 * 65535 + 16384


def _bounded_line(raw: BinaryIO, line_no: int, name: str) -> bytes:
    line = raw.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise CaptureError(f"{name}: line {line_no} is longer than {MAX_LINE} bytes, which no datagram needs")
    return line


class _Stream:
    """Exact reads from a binary stream, with a small pushback for sniffing."""

    def __init__(self, raw: BinaryIO, head: bytes = b"", name: str = "<stream>") -> None:
        self._raw = raw
        self._head = head
        self._name = name

    def read(self, n: int) -> bytes:
        out = self._head[:n]
        self._head = self._head[n:]
        while len(out) < n:
            chunk = self._raw.read(n - len(out))
            if not chunk:
                break
            out += chunk
        return out

    def lines(self) -> Iterator[bytes]:
        """The text lines, each at most :data:`MAX_LINE` bytes (a longer one is a :class:`CaptureError`)."""
        head, self._head = self._head, b""
        count = 0
        if head:
            nl = head.find(b"\n")
            while nl >= 0:
                count += 1
                yield head[: nl + 1]
                head = head[nl + 1 :]
                nl = head.find(b"\n")
            if head:
                count += 1
                head += _bounded_line(self._raw, count, self._name)
                if len(head) > MAX_LINE:
                    raise CaptureError(f"{self._name}: line {count} is longer than {MAX_LINE} bytes, which no datagram needs")
                yield head
        while True:
            count += 1
            line = _bounded_line(self._raw, count, self._name)
            if not line:
                return
            yield line


class Capture:
    """An opened capture: iterate for :class:`Datagram` values; see :attr:`stats`."""

    def __init__(self, stream: _Stream, fmt: str, name: str, closer: IO[bytes] | None) -> None:
        self._stream = stream
        self.format = fmt
        self.name = name
        self.stats = CaptureStats(format=fmt)
        self._closer = closer

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closer is not None:
            self._closer.close()
            self._closer = None

    def __iter__(self) -> Iterator[Datagram]:
        if self.format == "pcap":
            frames = self._pcap_frames()
        elif self.format == "pcapng":
            frames = self._pcapng_frames()
        else:
            yield from self._text_records()
            return
        for frame_no, link_type, t, data in frames:
            self.stats.frames += 1
            try:
                src, dst, sport, dport, payload, error, mac = _frame_to_udp(link_type, data)
            except _Skip as skip:
                self.stats.skipped[str(skip)] += 1
                continue
            self.stats.udp += 1
            yield Datagram(
                index=self.stats.udp,
                data=payload,
                time=t,
                src=format_endpoint(src, sport),
                dst=format_endpoint(dst, dport),
                frame=frame_no,
                error=error,
                src_mac=mac,
            )

    # -- pcap ----------------------------------------------------------
    def _pcap_frames(self) -> Iterator[tuple[int, int, float, bytes]]:
        s = self._stream
        hdr = s.read(24)
        if len(hdr) < 24:
            raise CaptureError(f"{self.name}: pcap file header is cut short ({len(hdr)} of 24 bytes)")
        order, unit = _PCAP_MAGICS[hdr[:4]]
        _major, _minor, _zone, _sig, _snap, network = struct.unpack(order + "HHiIII", hdr[4:])
        link_type = network & 0x0FFFFFFF  # upper bits: FCS length flags
        self.stats.link_types.append(link_type)
        rec = struct.Struct(order + "IIII")
        n = 0
        while True:
            head = s.read(16)
            if not head:
                return
            n += 1
            if len(head) < 16:
                self.stats.problem = f"pcap record {n} header is cut short"
                return
            sec, frac, incl, _orig = rec.unpack(head)
            if incl > _MAX_RECORD:
                self.stats.problem = f"pcap record {n} claims {incl} bytes: file is corrupt from here on"
                return
            data = s.read(incl)
            if len(data) < incl:
                self.stats.problem = f"pcap record {n} is cut short ({len(data)} of {incl} bytes)"
                return
            yield n, link_type, sec + frac * unit, data

    # -- pcapng --------------------------------------------------------
    def _pcapng_frames(self) -> Iterator[tuple[int, int, float, bytes]]:
        s = self._stream
        order = "<"
        # Per interface: (link type, seconds per timestamp unit, offset in seconds).
        interfaces: list[tuple[int, float, int]] = []
        n = 0
        first = True
        while True:
            head = s.read(8)
            if not head:
                return
            if len(head) < 8:
                self.stats.problem = "pcapng block header is cut short"
                return
            btype_raw = head[:4]
            if btype_raw == _PCAPNG_SHB:
                bom = s.read(4)
                if bom == b"\x4d\x3c\x2b\x1a":
                    order = "<"
                elif bom == b"\x1a\x2b\x3c\x4d":
                    order = ">"
                else:
                    msg = "pcapng section header has a bad byte-order magic"
                    if first:
                        raise CaptureError(f"{self.name}: {msg}")
                    self.stats.problem = msg
                    return
                blen = struct.unpack(order + "I", head[4:])[0]
                body_len = blen - 12
                interfaces = []  # interface ids restart in every section
                consumed = 4
            else:
                btype, blen = struct.unpack(order + "II", head)
                body_len = blen - 12
                consumed = 0
            first = False
            if blen < 12 or blen % 4 or blen > _MAX_RECORD:
                self.stats.problem = f"pcapng block of length {blen}: file is corrupt from here on"
                return
            body = s.read(body_len - consumed)
            trailer = s.read(4)
            if len(body) < body_len - consumed or len(trailer) < 4:
                self.stats.problem = "pcapng block is cut short"
                return
            if btype_raw == _PCAPNG_SHB:
                continue
            if btype == 1:  # Interface Description Block
                if len(body) < 8:
                    self.stats.problem = "pcapng interface block is too short"
                    return
                link_type = struct.unpack(order + "H", body[:2])[0]
                res, offset = _pcapng_if_options(body[8:], order)
                interfaces.append((link_type, res, offset))
                self.stats.link_types.append(link_type)
                continue
            if btype in (6, 2):  # Enhanced Packet Block, obsolete Packet Block
                if len(body) < 20:
                    self.stats.problem = "pcapng packet block is too short"
                    return
                if btype == 6:
                    iface, hi, lo, caplen, origlen = struct.unpack(order + "IIIII", body[:20])
                else:
                    iface, _drops, hi, lo, caplen, origlen = struct.unpack(order + "HHIIII", body[:20])
                data = body[20 : 20 + caplen]
            elif btype == 3:  # Simple Packet Block: interface 0, no timestamp
                if len(body) < 4:
                    self.stats.problem = "pcapng packet block is too short"
                    return
                iface, hi, lo = 0, 0, 0
                origlen = struct.unpack(order + "I", body[:4])[0]
                caplen = min(origlen, len(body) - 4)
                data = body[4 : 4 + caplen]
            else:
                continue  # name resolution, statistics, custom blocks, ...
            n += 1
            if iface >= len(interfaces):
                self.stats.frames += 1
                self.stats.skipped["unknown-interface"] += 1
                continue
            link_type, res, offset = interfaces[iface]
            t = ((hi << 32) | lo) * res + offset if btype != 3 else 0.0
            yield n, link_type, t, data

    # -- text ----------------------------------------------------------
    def _text_records(self) -> Iterator[Datagram]:
        line_no = 0
        for raw in self._stream.lines():
            line_no += 1
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                line = None
            if line is not None and (not line or line.startswith("#")):
                continue
            self.stats.frames += 1
            self.stats.udp += 1
            index = self.stats.udp
            if line is None:
                yield Datagram(index=index, data=b"", frame=line_no, error=f"line {line_no}: not UTF-8 text")
            elif line[0] in "{[":
                yield _json_record(line, index, line_no)
            else:
                data, error = _hex(line, line_no)
                yield Datagram(index=index, data=data, frame=line_no, error=error)


def _pcapng_if_options(opts: bytes, order: str) -> tuple[float, int]:
    """Timestamp resolution (seconds per unit) and offset from IDB options."""
    res, offset, pos = 1e-6, 0, 0
    while pos + 4 <= len(opts):
        code, length = struct.unpack(order + "HH", opts[pos : pos + 4])
        value = opts[pos + 4 : pos + 4 + length]
        if code == 0:
            break
        if code == 9 and length >= 1:  # if_tsresol: 10^-v, or 2^-v with the top bit set
            v = value[0]
            res = 2.0 ** -(v & 0x7F) if v & 0x80 else 10.0 ** -v
        elif code == 14 and length == 8:  # if_tsoffset, seconds
            offset = struct.unpack(order + "q", value)[0]
        pos += 4 + length + (-length % 4)
    return res, offset


def _hex(text: str, line_no: int) -> tuple[bytes, str | None]:
    cleaned = "".join(text.split()).replace(":", "")
    if cleaned.lower().startswith("0x"):
        cleaned = cleaned[2:]
    try:
        return bytes.fromhex(cleaned), None
    except ValueError:
        return b"", f"line {line_no}: not hex"


def _json_record(line: str, index: int, line_no: int) -> Datagram:
    try:
        obj: Any = json.loads(line)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        reason = " ".join((getattr(exc, "msg", None) or str(exc) or type(exc).__name__).split())
        return Datagram(index=index, data=b"", frame=line_no, error=f"line {line_no}: not JSON ({reason})")
    if not isinstance(obj, dict):
        return Datagram(index=index, data=b"", frame=line_no, error=f"line {line_no}: not a JSON object")
    # Only the bytes are essential: a bad "hex" makes the record an error; a bad
    # address, time or MAC is dropped with a warning and the datagram still decodes.
    data = b""
    error: str | None = None
    hx = next((obj[k] for k in ("hex", "data", "payload") if k in obj), None)
    if not isinstance(hx, str):
        error = f'line {line_no}: no "hex" string'
    else:
        data, err = _hex(hx, line_no)
        if err:
            error = f'line {line_no}: "hex" is not hex'
    warnings: list[str] = []
    endpoints: dict[str, str | None] = {}
    for key in ("src", "dst"):
        value = obj.get(key)
        endpoints[key] = None
        if value is None:
            continue
        try:
            ip, port = parse_endpoint(str(value))
        except ValueError as exc:
            warnings.append(f'"{key}" ignored: {exc}')
            continue
        endpoints[key] = format_endpoint(ip, port)
    t = _time(obj.get("time"))
    if t is None and obj.get("time") is not None:
        warnings.append('"time" ignored: not a number or ISO 8601 time')
    name = obj.get("name")
    mac = obj.get("src_mac")
    if mac is not None and not (isinstance(mac, str) and _is_mac(mac)):
        warnings.append('"src_mac" ignored: not a MAC address')
        mac = None
    return Datagram(
        index=index,
        data=data,
        time=t,
        src=endpoints["src"],
        dst=endpoints["dst"],
        frame=line_no,
        error=error,
        name=name if isinstance(name, str) else None,
        src_mac=mac.lower().replace("-", ":") if isinstance(mac, str) else None,
        warning=f"line {line_no}: " + "; ".join(warnings) if warnings else None,
    )


def _time(value: object) -> float | None:
    """Seconds from a number, a numeric string or an ISO 8601 time (UTC when no zone is given)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            return number if math.isfinite(number) else None
        try:
            when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        return when.timestamp()
    return None


def _is_mac(text: str) -> bool:
    parts = text.replace("-", ":").split(":")
    return len(parts) == 6 and all(len(p) == 2 and all(c in "0123456789abcdefABCDEF" for c in p) for p in parts)


def open_capture(source: str | os.PathLike[str] | BinaryIO) -> Capture:
    """Open a capture file, ``"-"`` for standard input, or a binary stream.

    Raises:
        CaptureError: the input is unreadable or is not pcap, pcapng, JSON Lines or hex lines.
    """
    closer: IO[bytes] | None = None
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        if name == "-":
            raw: BinaryIO = sys.stdin.buffer
            name = "<stdin>"
        else:
            try:
                raw = closer = open(name, "rb")  # noqa: SIM115 - closed by Capture.close
            except OSError as exc:
                raise CaptureError(f"cannot open {name}: {exc.strerror or exc}") from None
    else:
        raw = source
        name = getattr(source, "name", "<stream>")
    try:
        head = raw.read(4)
    except OSError as exc:
        if closer:
            closer.close()
        raise CaptureError(f"cannot read {name}: {exc.strerror or exc}") from None
    stream = _Stream(raw, head, name)
    if head in _PCAP_MAGICS:
        return Capture(stream, "pcap", name, closer)
    if head == _PCAPNG_SHB:
        return Capture(stream, "pcapng", name, closer)
    # Text: look at the first meaningful line to refuse binary junk up front.
    try:
        line_no = 1
        probe = last = head + _bounded_line(raw, line_no, name)
        while last.strip() == b"" or last.lstrip().startswith(b"#"):
            line_no += 1
            last = _bounded_line(raw, line_no, name)
            if not last:
                break
            probe += last
    except CaptureError:
        if closer:
            closer.close()
        raise
    stream = _Stream(raw, probe, name)
    first = last.strip()
    if not first or first.startswith(b"{") or _looks_hex(first):
        fmt = "jsonl" if first.startswith(b"{") else "hex"
        return Capture(stream, fmt, name, closer)
    if closer:
        closer.close()
    raise CaptureError(f"{name}: not a pcap, pcapng, JSON Lines or hex-lines file")


def _looks_hex(line: bytes) -> bool:
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        return False
    return _hex(text, 0)[1] is None


# --------------------------------------------------------------------------
# Writer

# Link-layer addresses for written frames: 02:00 (locally administered) + the
# last four address bytes, so every host keeps one distinct MAC.  pianode/ldn/network.py
# gives its simulated stations the same MACs, so LDN 5.x recordings decode with
# the MACs the link layer shows.
def _mac_for(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    return b"\x02\x00" + ip.packed[-4:]


def _checksum(data: bytes) -> int:
    """RFC 1071 one's-complement sum, folded and complemented."""
    if len(data) % 2:
        data += b"\x00"
    total: int = sum(struct.unpack(f">{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


Endpoint = str | tuple[str, int]


def _endpoint(ep: Endpoint) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    if isinstance(ep, tuple):
        ip, port = ep
    else:
        ip, maybe = parse_endpoint(ep)
        if maybe is None:
            raise ValueError(f"address {ep!r} has no port")
        port = maybe
    return ipaddress.ip_address(ip), int(port)


class PcapWriter:
    """Write UDP datagrams as Ethernet/IPv4|IPv6/UDP frames into a pcap stream.

    Example::

        with open("out.pcap", "wb") as f:
            w = PcapWriter(f)
            w.write_udp(payload, "192.168.1.2:49152", "192.168.1.3:49152", time=0.5)
    """

    SNAPLEN = 65535

    def __init__(self, stream: BinaryIO) -> None:
        self._out = stream
        self._ip_id = 0
        # Global header: magic, version 2.4, zone 0, sigfigs 0, snaplen, Ethernet.
        stream.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, self.SNAPLEN, LINKTYPE_ETHERNET))

    def write_udp(self, payload: bytes, src: Endpoint, dst: Endpoint, time: float | None = None) -> None:
        """Append one datagram.

        Raises:
            ValueError: bad or mixed-family addresses, or a payload too large for one datagram.
        """
        sip, sport = _endpoint(src)
        dip, dport = _endpoint(dst)
        if sip.version != dip.version:
            raise ValueError(f"cannot send from {sip} to {dip}: address families differ")
        if not (0 <= sport <= 0xFFFF and 0 <= dport <= 0xFFFF):
            raise ValueError("port out of range")
        ulen = 8 + len(payload)
        if ulen > 0xFFFF - (20 if sip.version == 4 else 0):
            raise ValueError(f"UDP payload of {len(payload)} bytes does not fit in one datagram")
        proto_len = struct.pack(">BBH", 0, _UDP, ulen)
        if sip.version == 4:
            pseudo = sip.packed + dip.packed + proto_len
        else:
            pseudo = sip.packed + dip.packed + struct.pack(">IxxxB", ulen, _UDP)
        udp_hdr = struct.pack(">HHHH", sport, dport, ulen, 0)
        csum = _checksum(pseudo + udp_hdr + payload) or 0xFFFF  # 0 means "no checksum" (RFC 768)
        udp = struct.pack(">HHHH", sport, dport, ulen, csum) + payload
        if sip.version == 4:
            self._ip_id = (self._ip_id + 1) & 0xFFFF
            # IPv4 header: version/IHL, DSCP, total length, id, DF, TTL 64, UDP, checksum, addresses.
            hdr = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + ulen, self._ip_id, 0x4000, 64, _UDP, 0,
                              sip.packed, dip.packed)
            hdr = hdr[:10] + struct.pack(">H", _checksum(hdr)) + hdr[12:]
            etype = _ETH_IPV4
        else:
            # IPv6 header: version 6, no traffic class or flow label, payload length, UDP, hop limit 64.
            hdr = struct.pack(">IHBB16s16s", 6 << 28, ulen, _UDP, 64, sip.packed, dip.packed)
            etype = _ETH_IPV6
        frame = _mac_for(dip) + _mac_for(sip) + struct.pack(">H", etype) + hdr + udp
        t = 0.0 if time is None else max(0.0, time)
        sec = int(t)
        usec = round((t - sec) * 1e6)
        if usec >= 1_000_000:
            sec, usec = sec + 1, usec - 1_000_000
        self._out.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame)

    def write_all(self, datagrams: Iterable[Datagram]) -> int:
        """Write every datagram that has both endpoints; return how many were written."""
        n = 0
        for d in datagrams:
            if d.src is None or d.dst is None:
                continue
            self.write_udp(d.data, d.src, d.dst, d.time)
            n += 1
        return n
