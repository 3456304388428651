"""The simulated LDN link's wire formats: the address plan, the advertisement and the discovery channel (spec §7.1).

Theory of operation: a pure codec module (bytes in, frozen values out and back,
byte-exact; decoders raise only :class:`protocols.errors.DecodeError`) for
what :mod:`pianode.ldn.network` puts on the wire around Pia.

* **Address plan.**  An LDN network is ``169.254.X.0/24``, host ``.1`` (§7.1).
  On one machine the LDN address ``169.254.X.Y`` maps onto loopback
  ``127.254.X.Y`` (:func:`ldn_to_loopback`, :func:`loopback_to_ldn`).
* **Discovery channel** (our design).  UDP port :data:`DISCOVERY_PORT`
  (30400); every datagram starts ``"PNLD" · u8 channel version (1) · u8 kind``:

  ========== ========================== =========================================================
  kind       direction                  body
  ========== ========================== =========================================================
  1 advert   host → broadcast,          u16 Pia port · u16 control port · the plaintext LDN
             every 100 ms (§7.1)        advertisement payload of §7.1 (encryption 1 = plain)
  2 connect  station → control port     8-byte token · u32 requested LDN IPv4 (0: assign one) ·
                                        u8 platform · u16 app comm version · 32-byte name
                                        (stands in for association + authentication)
  3 reply    host → station             8-byte token · u8 result (0 accepted, else the §7.1
                                        disconnect reason, 5 = rejected) · LDN IPv4 · MAC (6)
  4 leave    station → control port     LDN IPv4 · u8 reason
  ========== ========================== =========================================================

* **Advertisement payload** (§7.1, plain variant): 32-byte session info (u64
  local communication id · 2 pad · u16 game mode · 4 pad · 16-byte SSID) · u8
  LDN version · u8 encryption (1) · u16 data size · u32 nonce · SHA-256 of the
  advertisement data · advertisement data (16-byte network key · u16 security
  level · u8 accept policy · pad · u16 band/channel · u8 max participants · u8
  current · 8 × 56-byte participant (u32 IPv4 · MAC · u8 connected · u8
  platform · 32-byte user name · u16 app comm version · 10 pad) · 2 pad · u16
  app data size · 384-byte application data · 412 pad · u64 auth token).  The
  byte order of these LDN fields is not documented; we write them big-endian.
  Pia's application data inside keeps its own rule (:mod:`protocols.pia.ldn`).
"""

from __future__ import annotations

import hashlib
import ipaddress

import attrs

from protocols.errors import BadMagic, BadValue, ConfigError, EncodeError
from protocols.pia.ldn import APPLICATION_DATA_SIZE
from protocols.wire import Reader, Writer

__all__ = [
    "DISCOVERY_PORT",
    "MAGIC",
    "LOOPBACK_OCTET",
    "MAX_PARTICIPANTS",
    "REJECTED",
    "AdvertFrame",
    "Advertisement",
    "ConnectReply",
    "ConnectRequest",
    "Frame",
    "LdnParticipant",
    "LeaveNotice",
    "decode_frame",
    "encode_frame",
    "is_ldn_address",
    "ldn_to_loopback",
    "loopback_to_ldn",
    "mac_text",
]

DISCOVERY_PORT = 30400
MAX_PARTICIPANTS = 8  # 8 participant slots in the advertisement (spec §7.1)
LOOPBACK_OCTET = 254  # 169.254.X.Y <-> 127.254.X.Y
REJECTED = 5  # LDN disconnect reason "rejected" (spec §7.1)

#: The first bytes of every datagram of the discovery channel.
MAGIC = b"PNLD"
_MAGIC = MAGIC
_CHANNEL_VERSION = 1
_ADVERT, _CONNECT, _REPLY, _LEAVE = 1, 2, 3, 4
_NAME_SIZE = 32
_PARTICIPANT_SIZE = 56


# ---------------------------------------------------------------------- address plan


def ldn_to_loopback(ip: str) -> str:
    """LDN ``169.254.X.Y`` → loopback ``127.254.X.Y`` (the address the station's sockets use)."""
    a = ipaddress.IPv4Address(ip).packed
    if a[:2] != b"\xa9\xfe":
        raise ConfigError(f"{ip} is not an LDN address (169.254.X.Y)")
    return str(ipaddress.IPv4Address(bytes((127, LOOPBACK_OCTET)) + a[2:]))


def loopback_to_ldn(ip: str) -> str:
    """Loopback ``127.254.X.Y`` → LDN ``169.254.X.Y``."""
    a = ipaddress.IPv4Address(ip).packed
    if a[:2] != bytes((127, LOOPBACK_OCTET)):
        raise ConfigError(f"{ip} is not a simulated LDN loopback address (127.{LOOPBACK_OCTET}.X.Y)")
    return str(ipaddress.IPv4Address(b"\xa9\xfe" + a[2:]))


def is_ldn_address(ip: str) -> bool:
    return ipaddress.IPv4Address(ip).packed[:2] == b"\xa9\xfe"


def mac_text(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


# ---------------------------------------------------------------------- advertisement codec


def _name_bytes(name: str) -> bytes:
    raw = name.encode("utf-8")[: _NAME_SIZE - 1]
    return raw + bytes(_NAME_SIZE - len(raw))


def _name_text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


@attrs.frozen
class LdnParticipant:
    """One participant slot of the advertisement (spec §7.1): LDN IPv4, MAC, user name."""

    ip: str
    mac: bytes = attrs.field(repr=mac_text)
    name: str = ""
    connected: bool = True
    platform: int = 0
    app_version: int = 0

    @property
    def loopback_ip(self) -> str:
        """The participant's socket address under the loopback plan."""
        return ldn_to_loopback(self.ip)


@attrs.frozen
class Advertisement:
    """The plaintext LDN advertisement payload (spec §7.1); ``participants[0]`` is the host."""

    local_communication_id: int
    ssid: bytes = attrs.field(repr=lambda b: b.hex())
    application_data: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    max_participants: int = MAX_PARTICIPANTS
    participants: tuple[LdnParticipant, ...] = ()
    game_mode: int = 0
    network_key: bytes = attrs.field(default=bytes(16), repr=False)
    ldn_version: int = 3
    security_level: int = 1
    accept_policy: int = 0
    channel: int = 1
    nonce: int = 0
    auth_token: int = 0

    @property
    def host(self) -> LdnParticipant:
        if not self.participants:
            raise BadValue("advertisement without a host participant")
        return self.participants[0]

    def _data(self) -> bytes:
        if len(self.participants) > MAX_PARTICIPANTS:
            raise EncodeError(f"at most {MAX_PARTICIPANTS} participants")
        if len(self.application_data) > APPLICATION_DATA_SIZE:
            raise EncodeError(f"application data is at most {APPLICATION_DATA_SIZE} bytes")
        w = Writer()
        w.fixed(self.network_key, 16, "network key")
        w.u16(self.security_level, "security level")
        w.u8(self.accept_policy, "accept policy")
        w.zeros(1)
        w.u16(self.channel, "band/channel")
        w.u8(self.max_participants, "max participants")
        w.u8(len(self.participants))
        for p in self.participants:
            w.fixed(ipaddress.IPv4Address(p.ip).packed, 4, "participant IPv4")
            w.fixed(p.mac, 6, "participant MAC")
            w.u8(int(p.connected))
            w.u8(p.platform, "platform")
            w.bytes(_name_bytes(p.name))
            w.u16(p.app_version, "app comm version")
            w.zeros(10)
        w.zeros(_PARTICIPANT_SIZE * (MAX_PARTICIPANTS - len(self.participants)) + 2)
        w.u16(len(self.application_data))
        w.bytes(self.application_data + bytes(APPLICATION_DATA_SIZE - len(self.application_data)))
        w.zeros(412)
        w.u64(self.auth_token, "auth token")
        return w.getvalue()

    def encode(self) -> bytes:
        data = self._data()
        w = Writer()
        w.u64(self.local_communication_id, "local communication id")
        w.zeros(2)
        w.u16(self.game_mode, "game mode")
        w.zeros(4)
        w.fixed(self.ssid, 16, "SSID")
        w.u8(self.ldn_version, "LDN version")
        w.u8(1)  # encryption 1: plain (§7.1)
        w.u16(len(data))
        w.u32(self.nonce, "nonce")
        w.bytes(hashlib.sha256(data).digest())
        w.bytes(data)
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes) -> Advertisement:
        r = Reader(data)
        local_id = r.u64("local communication id")
        r.skip(2)
        game_mode = r.u16("game mode")
        r.skip(4)
        ssid = r.bytes(16, "SSID")
        ldn_version, encryption = r.u8("LDN version"), r.u8("encryption")
        if encryption != 1:
            raise BadValue(f"only plain advertisements (encryption 1) are simulated, got {encryption}")
        size, nonce = r.u16("data size"), r.u32("nonce")
        digest = r.bytes(32, "SHA-256")
        body = r.bytes(size, "advertisement data")
        r.expect_end("advertisement")
        if hashlib.sha256(body).digest() != digest:
            raise BadValue("advertisement SHA-256 does not match its data")
        b = Reader(body)
        network_key = b.bytes(16, "network key")
        security, accept = b.u16("security level"), b.u8("accept policy")
        b.skip(1)
        channel, max_p, count = b.u16("band/channel"), b.u8("max participants"), b.u8("participant count")
        if count > MAX_PARTICIPANTS:
            raise BadValue(f"{count} participants in an advertisement of {MAX_PARTICIPANTS} slots")
        participants = []
        for i in range(MAX_PARTICIPANTS):
            ip = str(ipaddress.IPv4Address(b.bytes(4, "participant IPv4")))
            mac = b.bytes(6, "participant MAC")
            connected, platform = b.u8("connected"), b.u8("platform")
            name = _name_text(b.bytes(_NAME_SIZE, "user name"))
            app_version = b.u16("app comm version")
            b.skip(10)
            if i < count:
                participants.append(LdnParticipant(ip, mac, name, bool(connected), platform, app_version))
        b.skip(2)
        app_size = b.u16("application data size")
        if app_size > APPLICATION_DATA_SIZE:
            raise BadValue(f"application data size {app_size} exceeds {APPLICATION_DATA_SIZE}")
        app = b.bytes(APPLICATION_DATA_SIZE, "application data")[:app_size]
        b.skip(412)
        token = b.u64("auth token")
        b.expect_end("advertisement data")
        return cls(local_id, ssid, app, max_p, tuple(participants), game_mode, network_key, ldn_version, security,
                   accept, channel, nonce, token)  # fmt: skip


# ---------------------------------------------------------------------- channel frames


@attrs.frozen
class AdvertFrame:
    pia_port: int
    control_port: int
    advertisement: Advertisement


@attrs.frozen
class ConnectRequest:
    token: bytes = attrs.field(repr=lambda b: b.hex())
    name: str = ""
    platform: int = 0
    app_version: int = 0
    #: The LDN address the station's interface already has (direct plan); 0.0.0.0 = assign one.
    requested_ip: str = "0.0.0.0"


@attrs.frozen
class ConnectReply:
    token: bytes = attrs.field(repr=lambda b: b.hex())
    result: int
    ip: str = "0.0.0.0"
    mac: bytes = attrs.field(default=bytes(6), repr=mac_text)


@attrs.frozen
class LeaveNotice:
    ip: str
    reason: int = 0


Frame = AdvertFrame | ConnectRequest | ConnectReply | LeaveNotice


def encode_frame(frame: Frame) -> bytes:
    w = Writer()
    w.bytes(_MAGIC)
    w.u8(_CHANNEL_VERSION)
    if isinstance(frame, AdvertFrame):
        w.u8(_ADVERT)
        w.u16(frame.pia_port, "Pia port")
        w.u16(frame.control_port, "control port")
        w.bytes(frame.advertisement.encode())
    elif isinstance(frame, ConnectRequest):
        w.u8(_CONNECT)
        w.fixed(frame.token, 8, "token")
        w.bytes(ipaddress.IPv4Address(frame.requested_ip).packed)
        w.u8(frame.platform, "platform")
        w.u16(frame.app_version, "app comm version")
        w.bytes(_name_bytes(frame.name))
    elif isinstance(frame, ConnectReply):
        w.u8(_REPLY)
        w.fixed(frame.token, 8, "token")
        w.u8(frame.result, "result")
        w.bytes(ipaddress.IPv4Address(frame.ip).packed)
        w.fixed(frame.mac, 6, "MAC")
    else:
        w.u8(_LEAVE)
        w.bytes(ipaddress.IPv4Address(frame.ip).packed)
        w.u8(frame.reason, "reason")
    return w.getvalue()


def decode_frame(data: bytes) -> Frame:
    """One discovery-channel datagram; raises only :class:`DecodeError` subclasses."""
    r = Reader(data)
    if r.bytes(4, "magic") != _MAGIC:
        raise BadMagic("not an LDN discovery datagram")
    version = r.u8("channel version")
    if version != _CHANNEL_VERSION:
        raise BadValue(f"discovery channel version {version}")
    kind = r.u8("kind")
    frame: Frame
    if kind == _ADVERT:
        pia_port, control_port = r.u16("Pia port"), r.u16("control port")
        frame = AdvertFrame(pia_port, control_port, Advertisement.decode(r.rest()))
    elif kind == _CONNECT:
        token = r.bytes(8, "token")
        requested = str(ipaddress.IPv4Address(r.bytes(4, "requested IPv4")))
        platform, app_version = r.u8("platform"), r.u16("app comm version")
        frame = ConnectRequest(token, _name_text(r.bytes(_NAME_SIZE, "name")), platform, app_version, requested)
    elif kind == _REPLY:
        token, result = r.bytes(8, "token"), r.u8("result")
        ip = str(ipaddress.IPv4Address(r.bytes(4, "IPv4")))
        frame = ConnectReply(token, result, ip, r.bytes(6, "MAC"))
    elif kind == _LEAVE:
        frame = LeaveNotice(str(ipaddress.IPv4Address(r.bytes(4, "IPv4"))), r.u8("reason"))
    else:
        raise BadValue(f"unknown discovery datagram kind {kind}")
    r.expect_end("discovery datagram")
    return frame
