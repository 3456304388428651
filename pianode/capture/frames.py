"""Link, network and transport layers of a captured frame, peeled down to its UDP datagram.

:func:`_frame_to_udp` is the general path for every link type :mod:`pianode.capture.pcap` reads
(see its docstring); the constants at the end serve the reader's fast path for the common
Ethernet + IPv4 + UDP frame, which gives the same values.
"""

from __future__ import annotations

import ipaddress
import struct

from pianode.capture.fragments import Fragment, Reassembler

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
LINKTYPE_PPI = 192
# DLT_RAW as written by some platforms' libpcap (12 on most BSDs, 14 on OpenBSD).
_RAW_ALIASES = (12, 14)

_ETH_IPV4, _ETH_IPV6, _ETH_ARP = 0x0800, 0x86DD, 0x0806
_ETH_VLAN = (0x8100, 0x88A8, 0x9100)
_ETH_PPPOE_SESSION = 0x8864
_PPP_IP = {0x0021: 0x0800, 0x0057: 0x86DD}  # PPP protocol numbers of IPv4 and IPv6
_ETHERTYPE_NAMES = {_ETH_ARP: "arp", 0x8035: "rarp", 0x88CC: "lldp", 0x888E: "eapol"}
#: The two EtherTypes IEEE Std 802 reserves as "Local Experimental Ethertypes" (0x88B5, 0x88B6): free for any
#: local protocol.  A real console sends its LDN advertisements as 802.11 action frames, not IP, so a recording
#: carries the simulated LDN link's frames (protocols/ldn_link.py, "PNLD") as Ethernet frames of EtherType
#: :data:`LDN_LINK_ETHERTYPE`; readers that walk Ethernet → IP → UDP skip them, ours yields them whole.
LOCAL_EXPERIMENTAL_ETHERTYPES = (0x88B5, 0x88B6)
LDN_LINK_ETHERTYPE = 0x88B5
_IP_PROTO_NAMES = {1: "icmp", 2: "igmp", 6: "tcp", 47: "gre", 50: "esp", 58: "icmpv6", 132: "sctp"}
_IPV6_EXT = (0, 43, 60)  # hop-by-hop, routing, destination options: (len + 1) * 8 bytes
_UDP = 17
#: Dotted decimal, as ``str(ipaddress.IPv4Address(...))`` writes it, without building the object.
_IP4_TEXT = "%d.%d.%d.%d"

Udp = tuple[str, int, str, int, bytes, int]  # src ip, sport, dst ip, dport, payload, udp length


_CUT_TAIL = "UDP payload bytes (snap length)"


def cut_size(error: str | None) -> int | None:
    """The length of a datagram the capture kept only part of (the error a cut-short :class:`Datagram` carries), or
    None: the length rule that tells the Pia layouts apart is on the datagram's length, not on what was kept."""
    if error is None or not error.startswith("captured only ") or not error.endswith(_CUT_TAIL):
        return None
    words = error.split()
    return int(words[4]) if len(words) > 4 and words[4].isdigit() else None


def _u16(b: bytes, off: int) -> int:
    return (b[off] << 8) | b[off + 1]


def _mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


#: IPv4 total length and UDP length of an Ethernet + IPv4 (no options) + UDP frame.
_ETH_IP4_UDP = struct.Struct(">16xH20xH")
#: Distinct endpoint or MAC texts the reader keeps before it starts over.
_TEXT_CACHE = 4096


def _endpoint_text(key: bytes) -> str:
    """``"a.b.c.d:port"`` of 4 address bytes and 2 port bytes."""
    return "%d.%d.%d.%d:%d" % (key[0], key[1], key[2], key[3], (key[4] << 8) | key[5])


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
        if etype == _ETH_PPPOE_SESSION:  # RFC 2516 §4: 6-byte PPPoE header, then a 2-byte PPP protocol
            if len(frame) < off + 8:
                raise _Skip("short-frame")
            ppp = _u16(frame, off + 6)
            if ppp not in _PPP_IP:
                raise _Skip("pppoe")
            etype, off = _PPP_IP[ppp], off + 8
        elif etype < 0x0600:  # a length field (IEEE 802.3): IP only under LLC/SNAP (RFC 1042)
            if frame[off : off + 6] != b"\xaa\xaa\x03\x00\x00\x00" or len(frame) < off + 8:
                raise _Skip("ieee802.3")
            etype, off = _u16(frame, off + 6), off + 8
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
    if link_type == LINKTYPE_PPI:
        # Per-Packet Information (as AirPcap and Kismet write 802.11): version 0, flags, LE u16 header length,
        # LE u32 link type of the frame after it.
        if len(frame) < 8 or frame[0] != 0:
            raise _Skip("malformed-ppi")
        hlen, inner = frame[2] | frame[3] << 8, int.from_bytes(frame[4:8], "little")
        if hlen < 8 or hlen > len(frame) or inner == LINKTYPE_PPI:
            raise _Skip("malformed-ppi")
        return _link_to_ip(inner, frame[hlen:])
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


def link_frame(link_type: int, frame: bytes) -> tuple[int, bytes, str, str] | None:
    """``(EtherType, payload, source MAC, destination MAC)`` of an Ethernet frame of a local experimental
    EtherType (:data:`LOCAL_EXPERIMENTAL_ETHERTYPES`), or None for any other frame."""
    if link_type != LINKTYPE_ETHERNET:
        return None
    try:
        etype, payload, mac = _link_to_ip(link_type, frame)
    except _Skip:
        return None
    if etype not in LOCAL_EXPERIMENTAL_ETHERTYPES or mac is None:
        return None
    return etype, payload, mac, _mac(frame[0:6])


def _ip_to_udp(etype: int, pkt: bytes) -> tuple[str, str, bytes, int]:
    """Return ``(src ip, dst ip, UDP header + payload as captured, the UDP length the IP header claims)``;
    raise :class:`~pianode.capture.fragments.Fragment` for a fragment, or _Skip."""
    if etype == _ETH_IPV4:
        if len(pkt) < 20 or pkt[0] >> 4 != 4:
            raise _Skip("malformed-ipv4")
        ihl = (pkt[0] & 0x0F) * 4
        total = _u16(pkt, 2)
        if total == 0 and len(pkt) > ihl:
            # A total length of 0 is what a host that segments in its NIC (TSO/GSO) hands the capture before
            # the NIC fills it in; Wireshark's IPv4 dissector then takes the captured length ("reported as 0,
            # presumed to be because of TCP segmentation offload"), and so does this reader.
            total = len(pkt)
        if ihl < 20 or total < ihl:
            raise _Skip("malformed-ipv4")
        proto = pkt[9]
        if proto != _UDP:
            raise _Skip(_IP_PROTO_NAMES.get(proto, f"ip-proto-{proto}"))
        src, dst = _IP4_TEXT % tuple(pkt[12:16]), _IP4_TEXT % tuple(pkt[16:20])
        frag = _u16(pkt, 6)
        if frag & 0x3FFF:  # a fragment offset or "more fragments" (RFC 791 §3.1): reassembled by the caller
            raise Fragment((4, pkt[12:20], proto, pkt[4:6]), (frag & 0x1FFF) * 8, bool(frag & 0x2000),
                           pkt[ihl:total], total - ihl, proto, src, dst, False)
        # The IP total length bounds the datagram: Ethernet pads short frames.
        return src, dst, pkt[ihl:total], total - ihl
    if etype == _ETH_IPV6:
        if len(pkt) < 40 or pkt[0] >> 4 != 6:
            raise _Skip("malformed-ipv6")
        end = 40 + _u16(pkt, 4)
        src, dst = str(ipaddress.IPv6Address(pkt[8:24])), str(ipaddress.IPv6Address(pkt[24:40]))
        off = _ipv6_to_udp(pkt, pkt[6], 40, end, src, dst)
        return src, dst, pkt[off:end], end - off
    raise _Skip(_ETHERTYPE_NAMES.get(etype, f"ethertype-0x{etype:04x}"))


def _ipv6_to_udp(pkt: bytes, nxt: int, off: int, end: int, src: str | None, dst: str | None) -> int:
    """Walk IPv6 extension headers (RFC 8200 §4) from *off* to the UDP header and return its offset.  A
    fragment header raises :class:`~pianode.capture.fragments.Fragment` (*src* None: inside a reassembled
    datagram, where no fragment header may be)."""
    while nxt != _UDP:
        if nxt in _IPV6_EXT or nxt == 51:
            if len(pkt) < off + 2:
                raise _Skip("malformed-ipv6")
            size = (pkt[off + 1] + 2) * 4 if nxt == 51 else (pkt[off + 1] + 1) * 8
            nxt, off = pkt[off], off + size
        elif nxt == 44:  # fragment header
            if len(pkt) < off + 8 or end < off + 8 or src is None or dst is None:
                raise _Skip("malformed-ipv6")
            field = _u16(pkt, off + 2)
            if field & 0xFFF9:  # an offset or the M flag: a real fragment (not an atomic one)
                raise Fragment((6, pkt[8:40], pkt[off + 4 : off + 8]), field & 0xFFF8, bool(field & 1),
                               pkt[off + 8 : end], end - off - 8, pkt[off], src, dst, True)
            nxt, off = pkt[off], off + 8
        else:
            raise _Skip(_IP_PROTO_NAMES.get(nxt, f"ip-proto-{nxt}"))
    if off > end:
        raise _Skip("malformed-ipv6")
    return off


def _frame_to_udp(
    link_type: int, frame: bytes, fragments: Reassembler | None = None,
) -> tuple[str, str, int, int, bytes, str | None, str | None]:
    """Peel one frame down to UDP: ``(src, dst, sport, dport, payload, error, source MAC)``.

    An IP fragment goes to *fragments*: the frame of the one that completes its datagram gives the datagram (as
    tshark shows it), every other fragment is a skip (``ip-fragment``), as it is without a reassembler.
    """
    etype, pkt, mac = _link_to_ip(link_type, frame)
    try:
        src, dst, udp, claimed = _ip_to_udp(etype, pkt)
    except Fragment as frag:
        whole = None if fragments is None else fragments.add(frag)
        if whole is None:
            raise _Skip("ip-fragment") from None
        first, udp, claimed = whole
        src, dst = first.src, first.dst
        if first.v6:
            off = _ipv6_to_udp(udp, first.proto, 0, claimed, None, None)
            udp, claimed = udp[off:], claimed - off
    if len(udp) < 8:
        raise _Skip("malformed-udp")
    sport, dport, ulen = _u16(udp, 0), _u16(udp, 2), _u16(udp, 4)
    if ulen < 8:
        raise _Skip("malformed-udp")
    payload = udp[8:ulen]
    error = None
    if ulen > claimed:
        # The UDP length runs past its IP packet (Wireshark: "Bad length value > IP payload length"); a host
        # drops such a datagram, so it is reported, with the bytes there are, not decoded.
        error = f"UDP length field says {ulen - 8} payload bytes but its IP packet holds {claimed - 8}"
    elif len(payload) < ulen - 8:
        error = f"captured only {len(payload)} of {ulen - 8} {_CUT_TAIL}"
    return src, dst, sport, dport, payload, error, mac
