"""A reader of Pia 6.x recordings written straight from the spec, sharing no code with pianode.

It checks a recording the way a reader built from console captures would: every
Pia datagram's header (H-F 6.16-6.30, H-G 6.32+; spec §1.1), its AES-GCM nonce
for the network (§3.2, §11), the 8-byte tag, the footer (plaintext after the
ciphertext up to 6.30, inside the plaintext from 6.32; §1.6), and a walk of the
messages (M-F / M-G, delta encoded, **not aligned** in 6.x: §2.1, §2.2, §11) that
must end exactly where the 0xFF padding to 16 bytes begins (§2.4).

Keys come from the session file the way a console derives them: LAN from the
session key (or the param), LDN 6.x from ``AES-ECB(game key, SSID)`` with the
network id ``CRC-32(ssid[1:16])`` (§7.3, §11), NPLN from the handed-over key and
network id.  The pcap is read with :mod:`struct` (classic pcap, Ethernet or raw
IPv4), not pianode's reader.
"""

from __future__ import annotations

import json
import pathlib
import struct
import zlib
from collections.abc import Iterator

import attrs
from Crypto.Cipher import AES

MAGIC = bytes.fromhex("32ab9864")


@attrs.frozen
class Walked:
    src: str
    dst: str
    header_version: int
    packet_id: int
    footer: tuple[int, ...]
    messages: tuple[tuple[int, int, int, bytes], ...]  # (flags, protocol type, port, payload)


def udp_datagrams(path: pathlib.Path) -> Iterator[tuple[str, int, str, int, bytes]]:
    """(src ip, src port, dst ip, dst port, payload) of every IPv4 UDP frame of a classic pcap."""
    raw = path.read_bytes()
    magic = raw[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack(endian + "I", raw[20:24])[0]
    pos = 24
    while pos + 16 <= len(raw):
        incl = struct.unpack(endian + "I", raw[pos + 8 : pos + 12])[0]
        frame = raw[pos + 16 : pos + 16 + incl]
        pos += 16 + incl
        if linktype == 1:
            if frame[12:14] != b"\x08\x00":
                continue
            ip = frame[14:]
        elif linktype in (101, 228):
            ip = frame
        else:
            raise AssertionError(f"link type {linktype}")
        if ip[0] >> 4 != 4 or ip[9] != 17:
            continue
        ihl = (ip[0] & 0xF) * 4
        udp = ip[ihl:]
        sport, dport, ulen = struct.unpack(">HHH", udp[:6])
        yield ".".join(map(str, ip[12:16])), sport, ".".join(map(str, ip[16:20])), dport, udp[8:ulen]


def _ipv4(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return a << 24 | b << 16 | c << 8 | d


class Pia6Reader:
    """Opens and walks the Pia datagrams of one recording, with its session file."""

    def __init__(self, session: dict[str, object]) -> None:
        self.version = tuple(int(x) for x in str(session["version"]).split("."))
        assert (6, 16) <= self.version < (7, 0), self.version
        self.network = session["network"]
        if self.network == "ldn" and "ssid" in session:
            ssid = bytes.fromhex(str(session["ssid"]))
            text = str(session["game_key"])
            # 32 hex digits are 16 raw bytes; 16 characters are their ASCII bytes (spec §3.6, §11).
            game_key = bytes.fromhex(text) if len(text) == 32 else text.encode("ascii")
            self.key = AES.new(game_key, AES.MODE_ECB).encrypt(ssid)
            self.network_id = zlib.crc32(ssid[1:16])
        else:
            self.key = bytes.fromhex(str(session["session_key"]))
            self.network_id = int(session.get("network_id", 0))  # type: ignore[call-overload]

    @classmethod
    def from_file(cls, path: pathlib.Path) -> Pia6Reader:
        return cls(json.loads(path.read_text()))

    def nonce(self, src: str, hn: bytes) -> bytes:
        if self.network == "lan":
            prefix = _ipv4(src).to_bytes(4, "big")
        elif self.network == "ldn":
            prefix = (self.network_id ^ _ipv4(src)).to_bytes(4, "big")
        else:  # npln
            prefix = self.network_id.to_bytes(4, "big")
        return prefix + hn

    def read(self, src: str, dst: str, data: bytes) -> Walked:
        """Authenticate and walk one datagram; AssertionError (or ValueError from GCM) when it is not exact."""
        assert data[:4] == MAGIC
        assert data[4] & 0x80, "6.x traffic is encrypted"
        hv = data[4] & 0x7F
        if self.version <= (6, 30):
            assert hv == {True: 11, False: 12 if self.version <= (6, 26) else 13}[self.version <= (6, 23)]
            _dst, _src, pid, fsize = struct.unpack(">HHHB", data[5:12])
            hn, tag, body = data[12:20], data[20:28], data[28:]
            pad_nibble = None
        else:
            assert hv == (15 if self.version <= (6, 34) else 16)
            pad_nibble = data[5] >> 4
            assert data[5] & 0x0F == 0, "no packet flags (no Zstandard)"
            _dst, _src, pid, fsize = struct.unpack(">HHHB", data[6:13])
            hn, tag, body = data[13:21], data[21:29], data[29:]
        footer_raw = b""
        if pad_nibble is None and fsize:
            body, footer_raw = body[:-fsize], body[-fsize:]  # plaintext after the ciphertext (§1.6, §11)
        cipher = AES.new(self.key, AES.MODE_GCM, nonce=self.nonce(src, hn), mac_len=8)
        plain = cipher.decrypt_and_verify(body, tag)
        assert len(plain) % 16 == 0, "0xFF padding to 16 bytes (§2.4)"
        if pad_nibble is not None:
            end = len(plain) - pad_nibble
            assert plain[end:] == b"\xff" * pad_nibble
            footer_raw = plain[end - fsize : end]
            plain = plain[: end - fsize]
        assert len(footer_raw) % 2 == 0
        footer = struct.unpack(f">{len(footer_raw) // 2}H", footer_raw)
        return Walked(src, dst, hv, pid, footer, tuple(self._walk(plain, pad_nibble is not None)))

    def _walk(self, plain: bytes, m_g: bool) -> Iterator[tuple[int, int, int, bytes]]:
        flags = size = ptype = port = 0
        pos = 0
        first = True
        while pos < len(plain):
            if not m_g and plain[pos:] == b"\xff" * (len(plain) - pos):
                assert len(plain) - pos < 16, "at most 15 bytes of 0xFF padding"
                return
            mask = plain[pos]
            pos += 1
            if first:
                assert mask & 0x0F == 0x0F, "the first message of a packet carries every field"
                first = False
            if mask & 0x01:
                flags = plain[pos]
                pos += 1
            if mask & 0x02:
                size = int.from_bytes(plain[pos : pos + 2], "big")
                pos += 2
            if m_g:
                if mask & 0x04:
                    ptype = plain[pos]
                    pos += 1
                if mask & 0x08:
                    port = plain[pos]
                    pos += 1
                if mask & 0x10:
                    pos += 1  # the protocol-specific byte
            else:
                if mask & 0x04:
                    ptype, port = plain[pos], int.from_bytes(plain[pos + 1 : pos + 4], "big")
                    pos += 4
                if mask & 0x08:
                    pos += 8  # destination
            payload = plain[pos : pos + size]
            assert len(payload) == size, "a message runs past the plaintext"
            pos += size  # the next message starts right here: no alignment in 6.x (§11)
            yield flags, ptype, port, payload
        assert pos == len(plain), "the walk ends exactly at the padding"


@attrs.frozen
class Browse:
    """A verified 6.16-6.30 LAN browse exchange (spec §6.2-§6.4)."""

    network_id: int
    host: tuple[str, int]
    session_key_param: bytes
    session_key: bytes


def read_browse(version: tuple[int, int], game_key: bytes, broadcast_ip: str, request: bytes, reply: bytes) -> Browse:
    """Check a browse request and its reply byte for byte and return what the reply publishes."""
    import hashlib
    import hmac

    setting_size = 0x16 if version >= (6, 23) else 0xE
    assert request[0] == 0 and int.from_bytes(request[1:5], "big") == setting_size
    chal = request[5 + setting_size :]
    assert len(chal) == 0x12A and chal[0] == 3 and chal[1] == 1, "challenge version 3, crypto enabled"
    n1, ck_req, tag1, ct1 = chal[2:10], chal[10:26], chal[26:42], chal[42:]
    k1 = AES.new(game_key, AES.MODE_ECB).encrypt(ck_req)
    bcast = bytes(int(x) for x in broadcast_ip.split("."))
    secret = AES.new(k1, AES.MODE_GCM, nonce=bcast + n1).decrypt_and_verify(ct1, tag1)
    assert reply[0] == 1 and int.from_bytes(reply[1:5], "big") == 0x22D
    prop, rchal = reply[5 : 5 + 0x22D], reply[5 + 0x22D :]
    assert len(rchal) == 58 and rchal[0] == 3 and rchal[1] == 1
    n2, ck_rep, tag2, ct2 = rchal[2:10], rchal[10:26], rchal[26:42], rchal[42:]
    k2 = hmac.new(game_key, ck_rep + ck_req, hashlib.sha256).digest()[:16]
    answer = AES.new(k2, AES.MODE_GCM, nonce=bcast + n2).decrypt_and_verify(ct2, tag2)
    assert answer == hmac.new(game_key, secret, hashlib.sha256).digest()[:16]
    network_id = int.from_bytes(prop[0:8], "big")
    data_size = int.from_bytes(prop[0x208:0x20C], "big")
    system = prop[8 : 8 + data_size]
    assert int.from_bytes(system[0:2], "big") == 0x7C and system[2] == 10, "system property, LAN system version 10"
    param = system[0x5C:0x7C]
    host_ip = ".".join(map(str, prop[0x21B:0x21F]))
    assert prop[0x21F:0x22B] == bytes(12)
    host_port = int.from_bytes(prop[0x22B:0x22D], "big")
    bumped = param[:31] + bytes(((param[31] + 1) & 0xFF,))
    key = hmac.new(game_key, bumped, hashlib.sha256).digest()[:16]
    return Browse(network_id, (host_ip, host_port), param, key)
