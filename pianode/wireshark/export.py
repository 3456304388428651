"""Decrypted exports: a pcapng that Wireshark and pianode's dissector read (``decode --decrypted-pcap``).

Theory of operation
-------------------
Wireshark cannot decrypt Pia: the keys come from a matchmaking server, a game
key and the session's LAN/LDN state.  :func:`export_decrypted` runs the
capture through :class:`pianode.capture.decode.Decoder` (the same keys and version
detection as ``pianode decode``) and writes every datagram to a pcapng file:

* A Pia packet that authenticated keeps its header (and tag, footer, HMAC
  trailer) byte for byte; only the ciphertext between header and tag/footer is
  replaced by its plaintext (AES-GCM and AES-ECB keep the length), so the
  packet is still the size it was on the wire.
* Every packet carries a pcapng comment (``opt_comment``) for the dissector::

      pianode: pia version=5.18 body=decrypted auth=ok

  ``version`` is the Pia version the messages were read with (``assumed``
  follows it when it was detected rather than given), ``body`` is
  ``decrypted``, ``plain`` (never encrypted) or ``encrypted`` (left as
  captured), ``auth`` is ``ok``, ``failed`` or ``unchecked``.  Other kinds:
  ``pianode: lan-browse-request version=5.18 challenge=ok``,
  ``pianode: prudp variant=quazal-v0 checksum=ok``, ``pianode: unknown``.
  A second comment says in words what went wrong, when something did.
* A datagram that fails authentication, or that cannot be decrypted, is written
  as captured and marked ``body=encrypted auth=failed``.
* The frames are Ethernet + IPv4/IPv6 + UDP with correct lengths and
  checksums (:class:`pianode.capture.pcap.PcapWriter` builds them).  Inputs without
  addresses (JSON Lines, hex lines) get the placeholder endpoints
  :data:`PLACEHOLDER_SRC` → :data:`PLACEHOLDER_DST` (RFC 5737 documentation
  addresses) and ``addresses=placeholder`` in the comment.

Format: pcapng, draft-ietf-opsawg-pcapng (SHB, one IDB of LINKTYPE_ETHERNET,
one EPB per datagram with ``opt_comment``).
"""

from __future__ import annotations

import io
import ipaddress
import struct
from collections.abc import Iterable
from typing import BinaryIO

import attrs

from pianode.capture.pcap import Datagram, PcapWriter, parse_endpoint
from pianode.capture.decode import Decoder, DecodeResult, endpoint_ip
from protocols.errors import DecodeError
from protocols.pia.header import HMAC_TRAILER_SIZE, decode_header
from protocols.pia.versions import Cipher, HeaderFormat, VersionProfile, profile_for

__all__ = ["PLACEHOLDER_DST", "PLACEHOLDER_SRC", "ExportStats", "PcapngWriter", "decrypted_body", "export_decrypted"]

#: Endpoints written for datagrams whose input names none (RFC 5737 TEST-NET-1).
PLACEHOLDER_SRC = "192.0.2.1:49152"
PLACEHOLDER_DST = "192.0.2.2:49152"

_LINKTYPE_ETHERNET = 1
_SHB, _IDB, _EPB = 0x0A0D0D0A, 0x00000001, 0x00000006
_OPT_COMMENT, _OPT_END = 1, 0


def _block(kind: int, body: bytes) -> bytes:
    body += bytes(-len(body) & 3)
    size = len(body) + 12
    return struct.pack("<II", kind, size) + body + struct.pack("<I", size)


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + bytes(-len(value) & 3)


#: The longest comment text an option holds (its length is 16 bits), less room for the mark of a cut.
_COMMENT_MAX = 0xFFFF - 8


def _comment_bytes(text: str) -> bytes:
    """A comment as UTF-8 (characters that have none, lone surrogates, escaped), cut to fit its option."""
    raw = text.encode("utf-8", "backslashreplace")
    if len(raw) <= _COMMENT_MAX:
        return raw
    return raw[:_COMMENT_MAX].decode("utf-8", "ignore").encode("utf-8") + " …".encode()


class PcapngWriter:
    """Ethernet/IP/UDP frames with per-packet comments into a pcapng stream (microsecond timestamps)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._out = stream
        # Frames come from PcapWriter (lengths, checksums, MACs); its pcap framing is dropped.
        self._frames = io.BytesIO()
        self._pcap = PcapWriter(self._frames)
        shb = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + _option(_OPT_END, b"")
        idb = struct.pack("<HHI", _LINKTYPE_ETHERNET, 0, PcapWriter.SNAPLEN) + _option(_OPT_END, b"")
        stream.write(_block(_SHB, shb) + _block(_IDB, idb))

    def write_udp(self, payload: bytes, src: str, dst: str, time: float | None, comments: Iterable[str]) -> None:
        """Append one datagram with its comments.

        Raises:
            ValueError: bad addresses or a payload too large (from PcapWriter).
        """
        self._frames.seek(0)
        self._frames.truncate()
        self._pcap.write_udp(payload, src, dst, time)
        self._append(comments)

    def write_link(self, d: Datagram, comments: Iterable[str]) -> None:
        """Append a non-IP link frame (:attr:`Datagram.ethertype`) as it was, with its comments."""
        assert d.ethertype is not None and d.src_mac is not None and d.dst_mac is not None
        self._frames.seek(0)
        self._frames.truncate()
        mac = bytes.fromhex
        self._pcap.write_link(d.data, mac(d.src_mac.replace(":", "")), mac(d.dst_mac.replace(":", "")), d.time,
                              d.ethertype)  # fmt: skip
        self._append(comments)

    def _append(self, comments: Iterable[str]) -> None:
        record = self._frames.getvalue()
        sec, usec, caplen, _ = struct.unpack_from("<IIII", record)
        frame = record[16:]
        ts = sec * 1_000_000 + usec
        opts = b"".join(_option(_OPT_COMMENT, _comment_bytes(c)) for c in comments)
        if opts:
            opts += _option(_OPT_END, b"")
        body = struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, caplen, caplen) + frame + bytes(-caplen & 3) + opts
        self._out.write(_block(_EPB, body))


@attrs.define
class ExportStats:
    """What an export wrote: datagrams in total, Pia packets by body state, and the failures."""

    datagrams: int = 0
    decrypted: int = 0
    plain: int = 0
    kept_encrypted: int = 0
    auth_failed: int = 0


def decrypted_body(decoder: Decoder, data: bytes, profile: VersionProfile, source: str) -> bytes | None:
    """*data* with the ciphertext replaced by its plaintext, or None when the keys cannot open it.

    Only called for a datagram the decoder authenticated under *profile*; the
    same keys and nonce rule are used (``decoder.ctx.keys_for``).
    """
    keys = decoder.ctx.keys_for(profile)
    if keys.session_key is None:
        return None
    try:
        header, off = decode_header(data, profile)
    except DecodeError:
        return None
    if profile.header_format is HeaderFormat.A:
        end = len(data) - HMAC_TRAILER_SIZE
        body = data[off:end]
        if profile.cipher is not Cipher.ECB_HMAC or len(body) & 15:
            return None
        from Crypto.Cipher import AES

        plain = AES.new(keys.session_key, AES.MODE_ECB).decrypt(body)
        return data[:off] + plain + data[end:]
    if keys.nonce_builder is None:
        return None
    end = len(data)
    if profile.footer == "plain" and header.footer_size:
        end -= header.footer_size
        if end < off:
            return None
    from protocols.crypto.aead import gcm

    try:
        plain = gcm(keys.session_key).open(keys.nonce_builder(header, source), data[off:end], header.tag)
    except DecodeError:
        return None
    return data[:off] + plain + data[end:]


def _pia_comment(r: DecodeResult, body: str) -> str:
    auth = {True: "ok", False: "failed", None: "unchecked"}[r.authenticated]
    assumed = " assumed" if r.profile_assumed else ""
    return f"pianode: pia version={r.profile}{assumed} body={body} auth={auth}"


def export_decrypted(datagrams: Iterable[Datagram], decoder: Decoder, out: BinaryIO) -> ExportStats:
    """Write every datagram to *out* as pcapng, Pia bodies decrypted where the keys allow (module doc)."""
    writer = PcapngWriter(out)
    stats = ExportStats()
    for d in datagrams:
        r = decoder.decode(d)
        data = d.data
        comments: list[str] = []
        if d.ethertype is not None and d.src_mac is not None and d.dst_mac is not None:
            link_comments = [f"pianode: {r.kind}"]
            if 14 + len(data) > PcapWriter.SNAPLEN:
                link_comments.append(f"pianode export: a link frame of {len(data)} bytes, more than the snap length;"
                                     f" the first {PcapWriter.SNAPLEN - 14} are written")
                d = attrs.evolve(d, data=data[: PcapWriter.SNAPLEN - 14])
            if d.time is not None and not 0 <= d.time < 2**32:
                link_comments.append(f"pianode export: time {d.time!r} is outside what a capture record holds; written as 0")
                d = attrs.evolve(d, time=None)
            writer.write_link(d, link_comments)  # a non-IP frame stays one (the LDN link's, 0x88b5)
            stats.datagrams += 1
            continue
        if r.kind == "pia" and r.profile is not None and r.header is not None:
            encrypted = bool(r.header.get("encrypted"))
            body = "plain"
            if encrypted:
                body = "encrypted"
                if r.authenticated:
                    opened = decrypted_body(decoder, data, profile_for(r.profile), endpoint_ip(d.src))
                    if opened is not None:
                        data, body = opened, "decrypted"
            comments.append(_pia_comment(r, body))
            if body == "decrypted":
                stats.decrypted += 1
            elif body == "plain":
                stats.plain += 1
            else:
                stats.kept_encrypted += 1
            if r.authenticated is False:
                stats.auth_failed += 1
        elif r.kind == "pia" and r.profile is not None:
            # No header to read (shorter than its layout's): the version it was judged by still goes to the dissector.
            assumed = " assumed" if r.profile_assumed else ""
            comments.append(f"pianode: pia version={r.profile}{assumed}")
        elif r.kind.startswith("lan-") and r.profile is not None:
            chal = {True: "ok", False: "failed", None: "unchecked"}[r.authenticated]
            comments.append(f"pianode: {r.kind} version={r.profile} challenge={chal}")
        elif r.kind == "prudp" and decoder.ctx.prudp is not None:
            check = {True: "ok", False: "failed", None: "unchecked"}[r.authenticated]
            what = "signature" if data[:2] == b"\xea\xd0" else "checksum"  # v1 has no checksum (prudp.md §2.3)
            comments.append(f"pianode: prudp variant={decoder.ctx.prudp.variant} {what}={check}")
        else:
            comments.append(f"pianode: {r.kind}")
        src, dst = d.src, d.dst
        if src is None or dst is None or parse_endpoint(src)[1] is None or parse_endpoint(dst)[1] is None:
            src, dst = PLACEHOLDER_SRC, PLACEHOLDER_DST
            comments[0] += " addresses=placeholder"
        if r.error is not None:
            kept = " (bytes kept as captured)" if r.kind == "pia" and r.authenticated is False else ""
            comments.append(f"pianode decode: {r.error}{kept}")
        if r.name is not None:
            comments.append(f"name: {r.name}")
        _write_udp_as_far_as_it_fits(writer, data, src, dst, d.time, comments)
        stats.datagrams += 1
    return stats


#: The largest UDP payload a frame holds: IPv4's 16-bit total length less its header and UDP's.
_UDP_PAYLOAD_MAX = 0xFFFF - 20 - 8


def _write_udp_as_far_as_it_fits(
    writer: PcapngWriter, data: bytes, src: str, dst: str, time: float | None, comments: list[str]
) -> None:
    """Write one datagram; what a capture cannot hold as it came is written the nearest way it can,
    and a comment says what changed: a time outside a record's range (0 instead), endpoints of two
    address families (the IPv4 one as IPv4-mapped IPv6), a payload longer than any UDP datagram
    (cut), anything else the frame builder refuses (placeholder endpoints).  Every datagram of the
    input is in the export, so frame numbers stay those of ``pianode decode``."""
    if time is not None and not 0 <= time < 2**32:
        comments.append(f"pianode export: time {time!r} is outside what a capture record holds; written as 0")
        time = None
    (src_ip, src_port), (dst_ip, dst_port) = parse_endpoint(src), parse_endpoint(dst)
    try:
        families = ipaddress.ip_address(src_ip).version, ipaddress.ip_address(dst_ip).version
    except ValueError:
        families = (0, 0)
    if families in ((4, 6), (6, 4)):
        mapped = [f"[::ffff:{ip}]:{port}" if family == 4 else f"[{ip}]:{port}"
                  for ip, port, family in ((src_ip, src_port, families[0]), (dst_ip, dst_port, families[1]))]
        comments.append(f"pianode export: {src} -> {dst} mix address families; the IPv4 one is written IPv4-mapped")
        src, dst = mapped
    if len(data) > _UDP_PAYLOAD_MAX:
        comments.append(f"pianode export: a payload of {len(data)} bytes, more than any UDP datagram holds;"
                        f" the first {_UDP_PAYLOAD_MAX} are written")
        data = data[:_UDP_PAYLOAD_MAX]
    try:
        writer.write_udp(data, src, dst, time, comments)
    except ValueError as exc:
        comments.append(f"pianode export: {exc}; written between placeholder endpoints")
        writer.write_udp(data, PLACEHOLDER_SRC, PLACEHOLDER_DST, time, comments)
