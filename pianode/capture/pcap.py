"""Capture files in and out: UDP datagrams from pcap, pcapng, JSON Lines or hex lines; pcap out.

Theory of operation
-------------------
:func:`open_capture` sniffs the first bytes of its input and picks a reader:

* Any of these gzip-compressed, as tshark reads them (:mod:`pianode.capture.compressed`).
* **pcap** (all four magics: micro/nanosecond, either byte order) and **pcapng**
  (any number of sections and interfaces, enhanced/simple/obsolete packet blocks,
  ``if_tsresol``/``if_tsoffset``).  Each frame is peeled down to UDP through its
  link layer (Ethernet with 802.1Q/802.1ad tags, PPPoE or LLC/SNAP, Linux cooked SLL and SLL2, raw IP,
  BSD null/loopback, and decrypted IEEE 802.11 data frames, bare or under radiotap or PPI,
  as an LDN monitor capture has them), keeping the sender's MAC where the frame has
  one (LDN 5.x nonces need it, spec §3.2), then IPv4 or IPv6 (extension headers walked); IP fragments are
  reassembled in bounded memory (:mod:`pianode.capture.fragments`), the datagram given in its last fragment's frame.  Frames that carry no UDP are *counted* by reason in
  :class:`CaptureStats` (``tcp``, ``icmp``, ``arp``, ...) and otherwise ignored, except
  Ethernet frames of a local experimental EtherType (0x88B5/0x88B6), yielded whole
  (:attr:`Datagram.ethertype`): recordings carry the simulated LDN link's frames so.
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
the files it writes; ``write_link`` writes a non-IP Ethernet frame.

Formats: pcap — the libpcap file format (draft-ietf-opsawg-pcap); pcapng —
draft-ietf-opsawg-pcapng; link types — tcpdump.org LINKTYPE_* registry.
"""

from __future__ import annotations

import collections
import decimal
import ipaddress
import json
import os
import struct
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any, BinaryIO

import attrs

from pianode.capture.frames import (  # _frame_to_udp and _Skip: the general path (tests reach them here)
    _ETH_IP4_UDP,
    _ETH_IPV4,
    _ETH_IPV6,
    _TEXT_CACHE,
    _UDP,
    LDN_LINK_ETHERTYPE,
    LINKTYPE_ETHERNET,
    _endpoint_text,
    _frame_to_udp,
    _mac,
    _Skip,
    link_frame,
)
from pianode.capture.compressed import gunzip_if_compressed
from pianode.capture.fragments import Reassembler
from pianode.capture.timestamps import PCAP_MAGICS, pcapng_if_options, record_time

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
    #: Set for a non-IP link-layer frame yielded whole (a local experimental EtherType, as recordings carry the
    #: simulated LDN link's frames): its EtherType; ``data`` is the frame's payload, ``src``/``dst`` are None.
    ethertype: int | None = None
    #: The destination link-layer address of such a frame.
    dst_mac: str | None = None
    #: The capture's time exactly, in integer nanoseconds since 1970 (None without a time; hex lines have none).
    #: ``time`` is the nearest float, which at today's dates is only good to about 240 ns.
    time_ns: int | None = None


def _datagram_maker() -> Any:
    """``make(index, data, time, src, dst, frame, src_mac, time_ns)``: a :class:`Datagram` with no error, name or
    warning, its slots set directly (attrs' frozen ``__init__`` goes through ``object.__setattr__`` per field)."""
    fields = ("index", "data", "time", "src", "dst", "frame", "src_mac", "time_ns")
    setters = [getattr(Datagram, f).__set__ for f in fields]
    blank = [getattr(Datagram, f).__set__ for f in ("error", "name", "warning", "ethertype", "dst_mac")]
    new = object.__new__
    s_index, s_data, s_time, s_src, s_dst, s_frame, s_mac, s_time_ns = setters
    s_error, s_name, s_warning, s_ethertype, s_dst_mac = blank

    def make(
        index: int, data: bytes, time: float, src: str, dst: str, frame: int, src_mac: str, time_ns: int
    ) -> Datagram:
        d = new(Datagram)
        s_index(d, index)
        s_data(d, data)
        s_time(d, time)
        s_src(d, src)
        s_dst(d, dst)
        s_frame(d, frame)
        s_error(d, None)
        s_name(d, None)
        s_warning(d, None)
        s_mac(d, src_mac)
        s_ethertype(d, None)
        s_dst_mac(d, None)
        s_time_ns(d, time_ns)
        return d

    if make(1, b"", 0.0, "a", "b", 1, "m", 0) != Datagram(1, b"", 0.0, "a", "b", 1, src_mac="m", time_ns=0):  # pragma: no cover
        return lambda index, data, time, src, dst, frame, src_mac, time_ns: Datagram(
            index=index, data=data, time=time, src=src, dst=dst, frame=frame, src_mac=src_mac, time_ns=time_ns
        )
    return make


_new_datagram = _datagram_maker()


@attrs.define
class CaptureStats:
    """What a reader saw, including what it skipped."""

    format: str = ""
    #: Link types of the pcap file or of the pcapng interfaces, in order of appearance.
    link_types: list[int] = attrs.Factory(list)
    #: Frames (pcap/pcapng packet records) or records (non-blank text lines) read.
    frames: int = 0
    #: UDP datagrams yielded (every record for text input).
    udp: int = 0
    #: Non-IP link-layer frames yielded whole, by EtherType (pcap/pcapng; see :attr:`Datagram.ethertype`).
    link: collections.Counter[int] = attrs.Factory(collections.Counter)
    #: Frames without UDP, by reason ("tcp", "icmp", "arp", "ip-fragment", ...).
    skipped: collections.Counter[str] = attrs.Factory(collections.Counter)
    #: IP-fragmented datagrams that never became whole (a fragment not in the capture, or given up): not yielded.
    incomplete: int = 0
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
# Readers

_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_UTF8_BOM = b"\xef\xbb\xbf"
#: How much of a pcap file is read at once.
_CHUNK = 1 << 18
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

    def __init__(self, raw: BinaryIO, head: bytes = b"", name: str = "<stream>", head_lines: list[bytes] | None = None) -> None:
        self._raw = raw
        self._head = head
        self._name = name
        #: Whole lines read while sniffing a text capture, given back first by :meth:`lines`.
        self._head_lines = head_lines or []

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
        """The text lines, each at most :data:`MAX_LINE` bytes (a longer one is a :class:`CaptureError`):
        first the whole lines read while sniffing (:func:`open_capture`), then the rest of the stream."""
        count = 0
        sniffed, self._head_lines = self._head_lines, []
        for line in sniffed:  # (a list: giving back many blank lines stays linear)
            count += 1
            yield line
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
        #: Why the input holds nothing to read, when it holds nothing: no bytes at all, or text with no datagram
        #: line; None otherwise (a pcap or pcapng with no packet records is a capture, if an empty one).
        self.empty_input: str | None = None

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closer is not None:
            self._closer.close()
            self._closer = None

    def __iter__(self) -> Iterator[Datagram]:
        try:
            yield from self._datagrams()
        except CaptureError as exc:
            gz_problem = getattr(self._stream._raw, "problem", None)  # a gzip stream corrupt or cut short
            raise exc if gz_problem is None else CaptureError(f"{exc} ({gz_problem})") from None
        gz_problem = getattr(self._stream._raw, "problem", None)
        if gz_problem is not None:
            self.stats.problem = gz_problem if self.stats.problem is None else f"{self.stats.problem} ({gz_problem})"

    def _datagrams(self) -> Iterator[Datagram]:
        if self.format == "pcap":
            frames = self._pcap_frames()
        elif self.format == "pcapng":
            frames = self._pcapng_frames()
        else:
            yield from self._text_records()
            return
        stats = self.stats
        skipped = stats.skipped
        # Ethernet + IPv4 without options + UDP, whole and unfragmented, is read with one unpack and
        # endpoint and MAC texts from small caches; any other frame takes the general path
        # (_frame_to_udp), which gives the same values for this one.
        unpack = _ETH_IP4_UDP.unpack_from
        endpoints: dict[bytes, str] = {}
        macs: dict[bytes, str] = {}
        new = _new_datagram
        fragments = Reassembler()  # IP fragments until their datagram is whole (bounded: capture/fragments.py)
        index = 0  # datagrams and link frames yielded
        for frame_no, link_type, t_ns, data in frames:
            stats.frames += 1
            t = t_ns / 1_000_000_000  # int / int: the float nearest the exact time
            if (
                link_type == LINKTYPE_ETHERNET
                and len(data) >= 42
                and data[12] == 8 and data[13] == 0 and data[14] == 0x45  # IPv4, 20-byte header
                and data[23] == _UDP
                and not data[20] & 0x3F and not data[21]  # no fragment offset, no "more fragments"
            ):
                total, ulen = unpack(data)
                if 28 <= 20 + ulen <= total and 34 + ulen <= len(data) and ulen >= 8:
                    stats.udp += 1
                    index += 1
                    src_key, dst_key, mac_key = data[26:30] + data[34:36], data[30:34] + data[36:38], data[6:12]
                    src = endpoints.get(src_key)
                    if src is None:
                        src = endpoints[src_key] = _endpoint_text(src_key)
                    dst = endpoints.get(dst_key)
                    if dst is None:
                        dst = endpoints[dst_key] = _endpoint_text(dst_key)
                    mac = macs.get(mac_key)
                    if mac is None:
                        mac = macs[mac_key] = _mac(mac_key)
                    if len(endpoints) > _TEXT_CACHE or len(macs) > _TEXT_CACHE:  # stay small on any capture
                        endpoints.clear()
                        macs.clear()
                    yield new(index, data[42 : 34 + ulen], t, src, dst, frame_no, mac, t_ns)
                    continue
            try:
                src, dst, sport, dport, payload, error, mac = _frame_to_udp(link_type, data, fragments)
            except _Skip as skip:
                link = link_frame(link_type, data)
                if link is None:
                    skipped[str(skip)] += 1
                    continue
                ethertype, payload, src_mac, dst_mac = link
                stats.link[ethertype] += 1
                index += 1
                yield Datagram(
                    index=index, data=payload, time=t, frame=frame_no, src_mac=src_mac, ethertype=ethertype,
                    dst_mac=dst_mac, time_ns=t_ns,
                )
                continue
            stats.udp += 1
            index += 1
            yield Datagram(
                index=index,
                data=payload,
                time=t,
                src=format_endpoint(src, sport),
                dst=format_endpoint(dst, dport),
                frame=frame_no,
                error=error,
                src_mac=mac,
                time_ns=t_ns,
            )
        stats.incomplete = fragments.incomplete()

    # -- pcap ----------------------------------------------------------
    def _pcap_frames(self) -> Iterator[tuple[int, int, int, bytes]]:
        """(frame number, link type, time in integer nanoseconds, frame bytes) per record."""
        s = self._stream
        hdr = s.read(24)
        if len(hdr) < 24:
            raise CaptureError(f"{self.name}: pcap file header is cut short ({len(hdr)} of 24 bytes)")
        order, unit = PCAP_MAGICS[hdr[:4]]
        _major, _minor, _zone, _sig, _snap, network = struct.unpack(order + "HHiIII", hdr[4:])
        link_type = network & 0x0FFFFFFF  # upper bits: FCS length flags
        self.stats.link_types.append(link_type)
        unpack = struct.Struct(order + "IIII").unpack_from
        # Records are cut from one buffer of at most about _CHUNK bytes (plus one record that is
        # larger), refilled as it runs out: few reads, and memory that does not grow with the file.
        buf = b""
        pos = n = 0
        while True:
            if len(buf) - pos < 16:
                buf = buf[pos:] + s.read(_CHUNK)
                pos = 0
                if not buf:
                    return
                if len(buf) < 16:
                    self.stats.problem = f"pcap record {n + 1} header is cut short"
                    return
            n += 1
            sec, frac, incl, _orig = unpack(buf, pos)
            if incl > _MAX_RECORD:
                self.stats.problem = f"pcap record {n} claims {incl} bytes: file is corrupt from here on"
                return
            end = pos + 16 + incl
            if end > len(buf):
                buf = buf[pos:] + s.read(max(_CHUNK, end - len(buf)))
                pos, end = 0, 16 + incl
                if end > len(buf):
                    self.stats.problem = f"pcap record {n} is cut short ({len(buf) - 16} of {incl} bytes)"
                    return
            yield n, link_type, sec * 1_000_000_000 + frac * unit, buf[pos + 16 : end]
            pos = end

    # -- pcapng --------------------------------------------------------
    def _pcapng_frames(self) -> Iterator[tuple[int, int, int, bytes]]:
        """(frame number, link type, time in integer nanoseconds, frame bytes) per packet block."""
        s = self._stream
        order = "<"
        # Per interface: (link type, nanoseconds per timestamp unit as a fraction num/den, offset in nanoseconds).
        interfaces: list[tuple[int, int, int, int]] = []
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
                if blen < 28 or blen % 4 or blen > _MAX_RECORD:  # 28: the header's fixed fields and its trailer
                    msg = f"pcapng section header block of length {blen}: file is corrupt from here on"
                    if first:
                        raise CaptureError(f"{self.name}: {msg}")
                    self.stats.problem = msg
                    return
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
            trailing = struct.unpack(order + "I", trailer)[0]
            if trailing != blen:  # a block gives its length at both ends: a mismatch is corruption
                self.stats.problem = (f"pcapng block ends with length {trailing} where it began with {blen}: file is"
                                      " corrupt from here on")
                return
            if btype_raw == _PCAPNG_SHB:
                continue
            if btype == 1:  # Interface Description Block
                if len(body) < 8:
                    self.stats.problem = "pcapng interface block is too short"
                    return
                link_type = struct.unpack(order + "H", body[:2])[0]
                num, den, offset = pcapng_if_options(body[8:], order)
                interfaces.append((link_type, num, den, offset))
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
                if caplen > len(body) - 20:  # the packet data lies inside its block, or the block is corrupt
                    self.stats.problem = (f"pcapng packet block claims {caplen} captured bytes but holds"
                                          f" {len(body) - 20}: file is corrupt from here on")
                    return
                data = body[20 : 20 + caplen]
            elif btype == 3:  # Simple Packet Block: interface 0, no timestamp
                if len(body) < 4:
                    self.stats.problem = "pcapng packet block is too short"
                    return
                iface, hi, lo = 0, 0, 0
                origlen = struct.unpack(order + "I", body[:4])[0]
                caplen = min(origlen, len(body) - 4)
                data = body[4 : 4 + caplen]
            elif btype in _PCAPNG_SHOWN_RECORDS:
                n += 1  # a frame in Wireshark: counted, so that frame numbers stay its own
                self.stats.frames += 1
                self.stats.skipped[_PCAPNG_SHOWN_RECORDS[btype]] += 1
                continue
            else:
                continue  # name resolution, statistics, decryption secrets, ...
            n += 1
            if iface >= len(interfaces):
                self.stats.frames += 1
                self.stats.skipped["unknown-interface"] += 1
                continue
            link_type, num, den, offset = interfaces[iface]
            # Exact in integers; a unit finer than a nanosecond is cut to whole nanoseconds, as Wireshark
            # cuts it (its frame times are nanoseconds).
            t = ((hi << 32) | lo) * num // den + offset if btype != 3 else 0
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
        obj: Any = json.loads(line, parse_float=decimal.Decimal)  # a time keeps every digit (record_time)
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
    t, t_ns = record_time(obj.get("time"))
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
        time_ns=t_ns,
        src=endpoints["src"],
        dst=endpoints["dst"],
        frame=line_no,
        error=error,
        name=name if isinstance(name, str) else None,
        src_mac=mac.lower().replace("-", ":") if isinstance(mac, str) else None,
        warning=f"line {line_no}: " + "; ".join(warnings) if warnings else None,
    )


def _is_mac(text: str) -> bool:
    parts = text.replace("-", ":").split(":")
    return len(parts) == 6 and all(len(p) == 2 and all(c in "0123456789abcdefABCDEF" for c in p) for p in parts)


#: pcapng blocks of no packet that Wireshark lists as frames (pcapng §4.7-4.8), by the reason they are skipped under.
_PCAPNG_SHOWN_RECORDS = {9: "systemd-journal", 0x00000BAD: "pcapng-custom-block", 0x40000BAD: "pcapng-custom-block"}


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
    gz = gunzip_if_compressed(head, raw)
    if gz is not None:  # a gzip-compressed capture (tshark reads them): the capture inside, decompressed as read
        raw, head = gz, gz.read(4)  # type: ignore[assignment]
        if gz.problem is not None:
            if closer:
                closer.close()
            raise CaptureError(f"{name}: {gz.problem}")
    stream = _Stream(raw, head, name)
    if head in PCAP_MAGICS:
        return Capture(stream, "pcap", name, closer)
    if head == _PCAPNG_SHB:
        return Capture(stream, "pcapng", name, closer)
    # Text: look at the first meaningful line to refuse binary junk up front.  The lines read
    # meanwhile (blank or comments, however many) are kept in a list and given back first.
    try:
        chunk = head + _bounded_line(raw, 1, name)  # (the 4 sniffed bytes may hold several short lines)
        if chunk.startswith(_UTF8_BOM):
            chunk = chunk[len(_UTF8_BOM) :]  # text saved by an editor that marks UTF-8
        sniffed = [part + b"\n" for part in chunk.split(b"\n")]
        sniffed[-1] = sniffed[-1][:-1]
        if not sniffed[-1] and len(sniffed) > 1:
            sniffed.pop()
        meaningful = [line for line in sniffed if not _blank_or_comment(line)]
        last = meaningful[0] if meaningful else sniffed[-1]
        line_no = len(sniffed)
        while not meaningful:
            line_no += 1
            last = _bounded_line(raw, line_no, name)
            if not last:
                break
            sniffed.append(last)
            if not _blank_or_comment(last):
                break
    except CaptureError:
        if closer:
            closer.close()
        raise
    stream = _Stream(raw, b"", name, head_lines=sniffed)
    first = last.strip()
    if first.startswith(b"{") and not _json_object_line(first):
        if closer:
            closer.close()
        raise CaptureError(f"{name}: not JSON Lines: its first line opens a JSON object it does not close (a JSON"
                           " document over several lines, such as a session file, is not a capture)")
    if not first or first.startswith(b"{") or _looks_hex(first):
        fmt = "jsonl" if first.startswith(b"{") else "hex"
        cap = Capture(stream, fmt, name, closer)
        if not head:
            cap.empty_input = "the input is empty once decompressed" if gz is not None else "the input is empty (0 bytes)"
        elif not first:
            cap.empty_input = "no datagram lines in it (only blank lines and comments)"
        return cap
    if closer:
        closer.close()
    raise CaptureError(f"{name}: not a pcap, pcapng, JSON Lines or hex-lines file")


def _json_object_line(line: bytes) -> bool:
    """Whether *line* is one JSON object, or at least closes what it opens (a record with a bad value is
    still a record of JSON Lines: the reader reports it in its place)."""
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return line.rstrip().endswith(b"}")


def _blank_or_comment(line: bytes) -> bool:
    return line.strip() == b"" or line.lstrip().startswith(b"#")


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


def _mac_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


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
        self._frame(_mac_for(dip) + _mac_for(sip) + struct.pack(">H", etype) + hdr + udp, time)

    def write_link(
        self, payload: bytes, src_mac: bytes, dst_mac: bytes, time: float | None = None,
        ethertype: int = LDN_LINK_ETHERTYPE,
    ) -> None:
        """Append one non-IP Ethernet frame: *payload* under *ethertype* (by default the local experimental
        EtherType that carries the simulated LDN link's frames, see :data:`pianode.capture.frames.LDN_LINK_ETHERTYPE`).

        Raises:
            ValueError: a MAC that is not 6 bytes, an EtherType that is not one, or a payload over the snap length.
        """
        if len(src_mac) != 6 or len(dst_mac) != 6:
            raise ValueError("a MAC address is 6 bytes")
        if not 0x0600 <= ethertype <= 0xFFFF:
            raise ValueError(f"0x{ethertype:x} is not an EtherType")
        if 14 + len(payload) > self.SNAPLEN:
            raise ValueError(f"a link payload of {len(payload)} bytes does not fit in one frame")
        self._frame(dst_mac + src_mac + struct.pack(">H", ethertype) + payload, time)

    def _frame(self, frame: bytes, time: float | None) -> None:
        t = 0.0 if time is None else max(0.0, time)
        if t >= 2**32:
            raise ValueError(f"time {time!r} is beyond what a pcap record holds")
        sec = int(t)
        usec = round((t - sec) * 1e6)
        if usec >= 1_000_000:
            sec, usec = sec + 1, usec - 1_000_000
        self._out.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame)

    def write_all(self, datagrams: Iterable[Datagram]) -> int:
        """Write every datagram that has both endpoints, and every link frame; return how many were written."""
        n = 0
        for d in datagrams:
            if d.ethertype is not None and d.src_mac is not None and d.dst_mac is not None:
                self.write_link(d.data, _mac_bytes(d.src_mac), _mac_bytes(d.dst_mac), d.time, d.ethertype)
                n += 1
                continue
            if d.src is None or d.dst is None:
                continue
            self.write_udp(d.data, d.src, d.dst, d.time)
            n += 1
        return n
