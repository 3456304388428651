"""The capture decode engine behind ``pianode decode``: one result per datagram.

Theory of operation
-------------------
:class:`Decoder` takes a :class:`~pianode.capture.session_file.DecodeContext` and turns
each :class:`~pianode.capture.pcap.Datagram` into a :class:`DecodeResult`, a plain
JSON-ready record.  It never raises for bad bytes: whatever goes wrong with one
datagram becomes that result's one-line ``error`` and the next datagram is
decoded as usual.

Classification, per datagram:

* Magic ``32 AB 98 64`` → Pia (kind ``pia``), whatever the session names.  The profile is the session's
  version, or, without one, is detected (spec ../shared/spec/pia.md §0.3, §1.2):
  byte 4 = 1/2 means H-A or H-B, told apart by the length rule
  (:func:`protocols.pia.header.sniff_header_format`, captures/README), and
  ``0x80 | v`` maps header version ``v`` to its layout.  Each layout may cover
  several message formats (H-A: M-A and M-B; H-C v3: M-C and M-D); one
  representative version per distinct packet format is tried in order and the
  first that decodes cleanly wins.  The result says which profile was
  assumed.  :meth:`protocols.pia.packet.PacketCodec.inspect` does the work:
  headers always, tag/HMAC when a key is known, messages when the body is
  plain or decrypted.  A plain packet whose HMAC fails still shows its
  messages, with ``authenticated: false``.
* The session names PRUDP → :func:`protocols.prudp.decode_datagram` (kind ``prudp``; several packets per
  datagram are possible; :mod:`pianode.capture.prudp_read`).
* Byte 0 = 0/1 with a LAN browse size field (spec §6.2, §6.3) → the LAN browse
  request / reply codecs of :mod:`protocols.pia.lan`.
* Anything else → kind ``unknown``, its bytes and why (:mod:`pianode.capture.unknown`).
Message payloads are inflated when the version's zlib flag is set (§2.3, §2.8)
and handed to the sub-protocol decoder (``protocols.pia.subprotocols``) for a
``decoded`` form when it knows the protocol.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import attrs

from protocols.pia import session6
from pianode.capture.frames import cut_size
from pianode.capture.json_text import (
    _flat_decoded_text,
    _header_text,
    _int_text,
    _json_text,
    _text_or_null,
    _to_json_text,
    header_json,
    to_jsonable,
)
from pianode.capture.lan_detect import lan_candidates as _lan_candidates
from pianode.capture.lan_detect import lan_kind as _lan_kind
from pianode.capture.pcap import Datagram, parse_endpoint
from pianode.capture.prudp_read import read_prudp
from pianode.capture.session_file import DecodeContext, KeySet
from pianode.capture.timestamps import time_text
from pianode.capture.unknown import NO_KEY_NOTE, PLAIN_NO_KEY_NOTE, service_port, why_unknown
from protocols.errors import ConfigError, DecodeError
from protocols.ldn_link import MAGIC as LDN_MAGIC
from protocols.pia.header import (
    MAGIC,
    header_format_for_version,
    sniff_header_format,
)
from protocols.pia.message import Message, inflate_payload
from protocols.pia.packet import PacketCodec, PacketReport
from protocols.pia.packet_values import LoneMessage
from protocols.pia.versions import (
    DOCUMENTED_VERSIONS,
    Cipher,
    HeaderFormat,
    NetworkType,
    Proto,
    VersionProfile,
    profile_for,
)

__all__ = ["KINDS", "DecodeResult", "Decoder", "FlowTracker", "candidate_profiles", "to_jsonable"]

#: The keys of the line's optional fields, as JSON text.
_FRAME_KEY, _NAME_KEY = '"frame"', '"name"'

KINDS = ("pia", "lan-browse-request", "lan-browse-reply", "ldn-discovery", "prudp", "unknown")


# --------------------------------------------------------------------------
# Profile detection


def _packet_shape(p: VersionProfile) -> tuple[Any, ...]:
    """The profile facts that change how a datagram decodes."""
    return (p.header_format, p.header_version, p.message_format, p.align_messages, p.zlib_flag, p.footer,
            p.tag_length, p.cipher)


def _representatives() -> dict[tuple[HeaderFormat, int | None], list[VersionProfile]]:
    """Per (layout, header version): one profile per distinct packet shape, oldest shape first.

    The representative of a shape is its newest documented version.
    """
    shapes: dict[tuple[Any, ...], VersionProfile] = {}
    for v in DOCUMENTED_VERSIONS:  # ascending, so later versions overwrite
        p = profile_for(v)
        shapes[_packet_shape(p)] = p
    out: dict[tuple[HeaderFormat, int | None], list[VersionProfile]] = collections.defaultdict(list)
    for p in sorted(shapes.values(), key=lambda p: p.version):
        out[(p.header_format, p.header_version)].append(p)
    return dict(out)


_REPRESENTATIVES = _representatives()


def candidate_profiles(data: bytes, size: int | None = None) -> list[VersionProfile]:
    """Profiles to try for a Pia datagram of unknown version, most likely first (*size*: its length when *data* is
    the part a capture kept)."""
    if len(data) < 5 or data[:4] != MAGIC:
        return []
    fmt = sniff_header_format(data, size)
    b4 = data[4]
    if b4 in (1, 2):
        fmts = [fmt] if fmt is not None else [HeaderFormat.A, HeaderFormat.B]
        return [p for f in fmts for p in _REPRESENTATIVES.get((f, None), [])]
    layout = header_format_for_version(b4 & 0x7F)
    if layout is None:
        return []
    return list(_REPRESENTATIVES.get((layout, b4 & 0x7F), []))


# --------------------------------------------------------------------------
# Results


@attrs.frozen
class DecodeResult:
    """Everything decoded from one datagram, in JSON-ready form."""

    index: int
    time: float | None
    src: str | None
    dst: str | None
    kind: str
    size: int
    frame: int | None = None
    name: str | None = None
    #: Pia: the profile used ("5.18") and whether it was detected rather than given.
    profile: str | None = None
    profile_assumed: bool | None = None
    header: dict[str, Any] | None = None
    authenticated: bool | None = None
    messages: list[dict[str, Any]] | None = None
    prudp: list[dict[str, Any]] | None = None
    lan: dict[str, Any] | None = None
    #: The simulated LDN link's discovery channel (advertisement, connect, reply, leave: protocols.ldn_link).
    ldn: dict[str, Any] | None = None
    #: Raw bytes (hex) of datagrams no decoder claimed.
    data: str | None = None
    error: str | None = None
    #: Something the decoder learned from this datagram (a LAN session key param).
    note: str | None = None
    #: The capture's time exactly, in integer nanoseconds (pcap and pcapng input); ``time`` is its nearest float.
    time_ns: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The output object: the issue's fields always, the others when they say something."""
        out: dict[str, Any] = {
            "index": self.index,
            "time": None if self.time is None else round(self.time, 9),
            "src": self.src,
            "dst": self.dst,
            "kind": self.kind,
            "size": self.size,
        }
        if self.frame is not None:
            out["frame"] = self.frame
        if self.name is not None:
            out["name"] = self.name
        if self.profile is not None:
            out["profile"] = self.profile
            out["profile_assumed"] = self.profile_assumed
        out["header"] = self.header
        out["authenticated"] = self.authenticated
        out["messages"] = self.messages
        if self.prudp is not None:
            out["prudp"] = self.prudp
        if self.ldn is not None:
            out["ldn"] = self.ldn
        if self.lan is not None:
            out["lan"] = self.lan
        if self.data is not None:
            out["data"] = self.data
        out["error"] = self.error
        if self.note is not None:
            out["note"] = self.note
        return out


def _one_line(exc: BaseException | str) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())


# --------------------------------------------------------------------------
# Sub-protocol payloads (optional module; absent → no "decoded" field)


def _subprotocol_decoder() -> Any:
    try:
        from protocols.pia import subprotocols
    except ImportError:
        return None
    return getattr(subprotocols, "decode_payload", None)


class Decoder:
    """Decode datagrams under one :class:`DecodeContext`.

    Args:
        ctx: the session settings.
        backend: AES-GCM backend name (default: the fastest installed).
    """

    def __init__(self, ctx: DecodeContext, *, backend: str | None = None) -> None:
        self.ctx = ctx
        self._backend = backend
        self._codecs: dict[tuple[int, int], tuple[PacketCodec, PacketCodec | None, KeySet]] = {}
        self._subdecode: Any = None  # protocols.pia.subprotocols.decode_payload, imported for the first message
        self._subdecode_loaded = False
        # Per (version, protocol type): the protocol's name and Proto; per endpoint text: its IP.
        #: (version, protocol type) -> (its name, its Proto, whether it is pianode's 6.x session management)
        self._protocols: dict[tuple[Any, int], tuple[str | None, Proto | None, bool]] = {}
        self._source_ips: dict[str | None, str] = {}
        self._learned_macs: collections.deque[str] = collections.deque()  # source IPs whose MAC the wire gave
        self._nex_streams: dict[tuple[str | None, str | None], dict[Any, Any]] = {}
        # Browse requests seen, by requester: (challenge key, challenge plaintext, broadcast address).
        self._lan_requests: dict[str, tuple[bytes, bytes, str]] = {}
        #: The session key params the browse replies advertised (one per LAN session answering), as learned.
        self._lan_params: list[bytes] = []
        #: Results per kind, and authenticated true/false/null counts.
        self.kinds: collections.Counter[str] = collections.Counter()
        self.auth: collections.Counter[str] = collections.Counter()
        self.errors = 0
        #: The Pia versions of the datagrams decoded (what the settings were applied to).
        self.pia_versions: set[tuple[int, int]] = set()

    # -- entry points -----------------------------------------------------
    def decode_all(self, datagrams: Iterator[Datagram] | list[Datagram]) -> Iterator[DecodeResult]:
        for d in datagrams:
            yield self.decode(d)

    def decode(self, d: Datagram) -> DecodeResult:
        try:
            result = self._decode(d)
        except (DecodeError, ConfigError) as exc:  # a codec path we did not wrap: still one line
            result = self._base(d, "unknown", error=_one_line(exc))
        if d.warning is not None:
            result = attrs.evolve(result, note=d.warning if result.note is None else f"{result.note}; {d.warning}")
        self.kinds[result.kind] += 1
        self.auth[{True: "true", False: "false", None: "null"}[result.authenticated]] += 1
        if result.error is not None:
            self.errors += 1
        return result

    def json_line(self, d: Datagram) -> str:
        """``json.dumps(self.decode(d).to_json())``: the same text, written straight from the codec's
        values for the common datagram (an authenticated Pia packet that the codec's strict decode reads).

        But a capture's time (``d.time_ns``) is written exactly (:func:`time_text`), not as its nearest float:
        the same text wherever the float is exact to its decimals (a microsecond capture)."""
        if d.error is None and d.warning is None and d.ethertype is None and d.data[:4] == MAGIC:
            line = self._pia_fast_line(d)
            if line is not None:
                return line
        out = self.decode(d).to_json()
        if d.time_ns is None:
            return _to_json_text(out)
        # "index" and "time" come first: the rest is json.dumps' own text after them.
        index = out.pop("index")
        del out["time"]
        return f'{{"index": {index:d}, "time": {time_text(d.time_ns)}, {_to_json_text(out)[1:]}'


    # -- helpers ----------------------------------------------------------
    def _source_ip(self, src: str | None) -> str:
        ip = self._source_ips.get(src)
        if ip is None:
            if len(self._source_ips) > 4096:  # stay small on a capture of many endpoints
                self._source_ips.clear()
            ip = self._source_ips[src] = endpoint_ip(src)
        return ip

    def _base(self, d: Datagram, kind: str, **kw: Any) -> DecodeResult:
        src, dst = d.src, d.dst
        if d.ethertype is not None:  # a non-IP link frame: its endpoints are the link-layer addresses
            src, dst = d.src_mac, d.dst_mac
        return DecodeResult(
            index=d.index, time=d.time, src=src, dst=dst, kind=kind, size=len(d.data), frame=d.frame,
            name=d.name, time_ns=d.time_ns, **kw,
        )

    def _decode(self, d: Datagram) -> DecodeResult:
        if d.error is not None:
            if d.data[:4] == MAGIC:  # a Pia datagram the capture cut short: its header still says what it was
                return self._cut_short_pia(d)
            return self._base(d, "unknown", data=d.data.hex(), error=d.error)
        data = d.data
        if d.ethertype is not None:  # a non-IP link frame (pianode.capture.frames.LOCAL_EXPERIMENTAL_ETHERTYPES)
            if data[:4] == LDN_MAGIC:
                return self._ldn(d)
            return self._base(d, "unknown", data=data.hex(), note=f"link frame of EtherType 0x{d.ethertype:04x}")
        if data[:4] == MAGIC:
            # Pia even where the session names PRUDP: a console's capture holds both (PRUDP to the game server,
            # Pia between consoles), and no PRUDP packet starts so (v0's two stream types would differ, v1 starts
            # EA D0: spec prudp.md §1.1, §2.3).
            return self._pia(d)
        if self.ctx.prudp is not None:
            return self._prudp(d)
        lan_kind = _lan_kind(data)
        if lan_kind is not None:
            return self._lan(d, lan_kind)
        if data[:4] == LDN_MAGIC:
            return self._ldn(d)
        return self._base(d, "unknown", data=data.hex(), note=why_unknown(data, d.src, d.dst))

    def _ldn(self, d: Datagram) -> DecodeResult:
        """A datagram of the simulated LDN link's discovery channel: how stations found the network."""
        from protocols.ldn_link import decode_frame

        try:
            frame = decode_frame(d.data)
        except DecodeError as exc:
            return self._base(d, "ldn-discovery", data=d.data.hex(), error=_one_line(exc))
        return self._base(d, "ldn-discovery", ldn={"type": type(frame).__name__, **_as_dict(to_jsonable(frame))})

    # -- Pia --------------------------------------------------------------
    def _codecs_for(self, profile: VersionProfile) -> tuple[PacketCodec, PacketCodec | None, KeySet]:
        entry = self._codecs.get(profile.version)
        if entry is None:
            self.pia_versions.add(profile.version)
            keys = self.ctx.keys_for(profile)
            plain = PacketCodec(profile)
            keyed: PacketCodec | None = None
            if keys.problem is None and (keys.session_key is not None or keys.hmac_key is not None):
                keyed = PacketCodec(
                    profile, keys.session_key, keys.nonce_builder, hmac_key=keys.hmac_key, backend=self._backend
                )
            entry = self._codecs[profile.version] = (plain, keyed, keys)
        return entry

    def _learn_mac(self, d: Datagram) -> str:
        """The datagram's source IP, after noting its MAC for LDN 5.x nonces."""
        source_ip = self._source_ip(d.src)
        macs = self.ctx.macs
        if d.src_mac is not None and macs is not None and source_ip not in macs:
            # The nonce builder reads the map live (protocols/pia/nonce.py); a MAC
            # from the session file always wins over one seen on the wire.
            macs[source_ip] = bytes.fromhex(d.src_mac.replace(":", ""))
            self._learned_macs.append(source_ip)
            if len(self._learned_macs) > _FLOWS_KEPT:  # stay small on a capture of ever new senders (learned again
                macs.pop(self._learned_macs.popleft(), None)  # when one comes back)
        return source_ip

    def _pia_fast_line(self, d: Datagram) -> str | None:
        """:meth:`json_line` of a Pia datagram through the codec's strict decode, or None.

        A datagram that decodes and authenticates there gives what :meth:`_pia` gives, which
        would report the same header, ``authenticated: true`` and the same messages (the codec's
        fast path equals its general decode, tests/protocols/pia/test_codec_fast_path.py); every
        other datagram (no key, a plain or unauthenticated packet, an error) returns None and goes
        the general way, which says why.  tests/pianode/capture/test_decode_fast_line.py holds the
        text to ``json.dumps`` of :meth:`decode`'s result.
        """
        source_ip = self._learn_mac(d)
        profile = self.ctx.profile
        assumed = profile is None
        if profile is None:
            candidates = candidate_profiles(d.data)
            if not candidates:
                return None
            profile = candidates[0]
        if profile.cipher is not Cipher.GCM:
            return None
        _plain, keyed, _keys = self._codecs_for(profile)
        if keyed is None:
            return None
        t_text = time_text(d.time_ns) if d.time_ns is not None else "null" if d.time is None else repr(round(d.time, 9))
        if t_text[-1] in "fn":  # inf, nan: no JSON number (the general path writes what json.dumps writes)
            return None
        try:
            got = keyed.decode_lone(d.data, source_ip)
        except DecodeError:
            return None
        if type(got) is LoneMessage:
            header = _header_text(profile, got.header, got.footer)
            message, error = self._lone_message_text(profile, got)
            messages = f"[{message}]"
        elif got.header.encrypted:
            header = _to_json_text(header_json(got.header, profile, got.footer))
            shown, error = [], None
            for m in got.messages:
                msg, msg_error = self._message(m, profile)
                shown.append(msg)
                if msg_error is not None and error is None:
                    error = msg_error
            messages = _to_json_text(shown)
        else:
            return None
        self.kinds["pia"] += 1
        self.auth["true"] += 1
        if error is not None:
            self.errors += 1
        return (
            f'{{"index": {d.index:d}, "time": {t_text}, "src": {_text_or_null(d.src)},'
            f' "dst": {_text_or_null(d.dst)}, "kind": "pia", "size": {len(d.data):d}'
            f'{"" if d.frame is None else f", {_FRAME_KEY}: {d.frame:d}"}'
            f'{"" if d.name is None else f", {_NAME_KEY}: {_json_text(d.name)}"},'
            f' "profile": {_json_text(profile.name)}, "profile_assumed": {"true" if assumed else "false"},'
            f' "header": {header}, "authenticated": true, "messages": {messages}, "error": {_text_or_null(error)}}}'
        )

    def _lone_message_text(self, profile: VersionProfile, lone: LoneMessage) -> tuple[str, str | None]:
        """The JSON text of a lone message (what :meth:`_message_json` gives, encoded), and its error."""
        known = self._protocols.get((profile.version, lone.protocol_type))
        zflag = profile.zlib_flag
        # unseen, to inflate, or pianode's 6.x session management (decoded by the general builder)
        general = known is None or known[2] or bool(zflag is not None and lone.flags & zflag)
        decoded, decoded_text = None, ""
        if not general and known[1] in DECODED_PROTOCOLS:  # type: ignore[index]
            try:
                decoded = self._decode_known(known[1], lone.protocol_port, lone.payload, profile)  # type: ignore[index]
            except (DecodeError, ConfigError):
                general = True  # the general builder reports the error
            else:
                if decoded is not None:
                    # The decoded form: written here where it is flat (an RTT message: in a 16-station 5.29 recording
                    # 7,310 of the 15,855 datagrams that are not frames), else by the general builder, which is given it.
                    text = _flat_decoded_text(decoded)
                    general = text is None
                    decoded_text = f', "decoded": {text}'
        if general:
            msg, error = self._message_json(
                profile, lone.flags, lone.protocol_type, lone.protocol_port, lone.destination,
                lone.source_constant_id, None, lone.payload, decoded=decoded,
            )
            return _to_json_text(msg), error
        assert known is not None
        name = known[0]
        src = lone.source_constant_id
        return (
            f'{{"flags": {lone.flags:d}, "protocol_type": {lone.protocol_type:d}, "protocol_port": {lone.protocol_port:d},'
            f' "protocol": {_text_or_null(name)}, "destination": {lone.destination:d},'
            f' "source_constant_id": {_int_text(src)}, "payload": "{lone.payload.hex()}"'
            f'{decoded_text}}}'
        ), None

    def _pia(self, d: Datagram) -> DecodeResult:
        result = self._pia_once(d)
        if result.authenticated is False and len(self._lan_params) > 1:
            # A capture of several LAN sessions (every host of the game answers a browse, spec §6.2): the packet
            # may be another advertised session's; its key, once it authenticates one, reads the packets after it.
            ctx, codecs = self.ctx, self._codecs
            for param in reversed(self._lan_params):
                if param != ctx.session_param:
                    self.ctx, self._codecs = attrs.evolve(ctx, session_param=param, _cache={}), {}
                    other = self._pia_once(d)
                    if other.authenticated:
                        return other
            self.ctx, self._codecs = ctx, codecs
        return result

    def _pia_once(self, d: Datagram) -> DecodeResult:
        source_ip = self._learn_mac(d)
        if self.ctx.profile is not None:
            candidates, assumed = [self.ctx.profile], False
        else:
            candidates, assumed = candidate_profiles(d.data), True
            if not candidates:
                b4 = d.data[4] if len(d.data) > 4 else None
                why = "too short for a Pia header" if b4 is None else f"byte 4 = {b4:#04x} names no documented header"
                return self._base(d, "pia", error=f"cannot tell the Pia version: {why}; give --version")
        first: tuple[VersionProfile, PacketReport, KeySet] | None = None
        for profile in candidates:
            report, keys = self._inspect(profile, d.data, source_ip)
            if first is None:
                first = (profile, report, keys)
            if report.error is None and report.authenticated is not False:
                return self._pia_result(d, profile, assumed, report, keys)
        assert first is not None
        if first[1].header is None and not assumed:
            # The session's version does not fit this header (spec §1.2): decode
            # it as the header says, and say so.
            for profile in candidate_profiles(d.data):
                report, keys = self._inspect(profile, d.data, source_ip)
                if report.header is not None:
                    given = first[0].name
                    why = _one_line(first[1].error or "")
                    note = f"the header does not fit Pia {given} ({why}); decoded as {profile.name}"
                    return attrs.evolve(self._pia_result(d, profile, True, report, keys), note=note)
        return self._pia_result(d, first[0], assumed, first[1], first[2])

    def _cut_short_pia(self, d: Datagram) -> DecodeResult:
        """The header of a Pia datagram whose end the capture lacks (as tshark still shows it), its bytes and why
        the rest cannot be checked; no authentication is tried on a part of a packet."""
        assumed = self.ctx.profile is None
        profiles = candidate_profiles(d.data, cut_size(d.error)) if assumed else [self.ctx.profile]
        for profile in profiles:
            # H-A's HMAC is the packet's last 16 bytes, not in the capture: zeros stand in so that the header reads.
            trailer = bytes(16) if profile.header_format is HeaderFormat.A else b""
            report = self._codecs_for(profile)[0].inspect(d.data + trailer, self._source_ip(d.src))
            if report.header is not None:
                header = header_json(report.header, profile, ())
                if profile.header_format is HeaderFormat.A:
                    header.pop("tag", None)
                return self._base(d, "pia", profile=profile.name, profile_assumed=assumed,
                                  header=header, data=d.data.hex(), error=d.error)
        first = profiles[0].name if profiles else None  # less than a header: still the layout it names
        return self._base(d, "pia", profile=first, profile_assumed=assumed if first else None, data=d.data.hex(),
                          error=d.error)

    def _inspect(self, profile: VersionProfile, data: bytes, source_ip: str) -> tuple[PacketReport, KeySet]:
        plain, keyed, keys = self._codecs_for(profile)
        if keyed is None:
            return plain.inspect(data, source_ip), keys
        report = keyed.inspect(data, source_ip)
        if report.authenticated is False and report.header is not None and not report.header.encrypted:
            # A plain packet whose signature fails: show its messages anyway.
            shown = plain.inspect(data, source_ip)
            report = attrs.evolve(report, messages=shown.messages, footer=shown.footer)
        return report, keys

    def _pia_result(
        self, d: Datagram, profile: VersionProfile, assumed: bool, report: PacketReport, keys: KeySet
    ) -> DecodeResult:
        error: str | None = None
        note: str | None = None
        if report.error is not None:
            error = _one_line(report.error)
            if report.authenticated is False:
                error = f"authentication failed: {error}"
        header = None if report.header is None else header_json(report.header, profile, report.footer)
        messages = None
        if report.messages is not None:
            messages = []
            for m in report.messages:
                msg, msg_error = self._message(m, profile)
                messages.append(msg)
                if msg_error is not None and error is None:
                    error = msg_error
        elif report.header is not None and report.header.encrypted and error is None:
            if keys.problem is not None:
                error = f"cannot decrypt: {keys.problem}"
            elif not self.ctx.has_key_material:
                note = NO_KEY_NOTE  # the header is all there is to show
        if report.authenticated is None and profile.cipher is Cipher.ECB_HMAC and not self.ctx.has_key_material:
            note = note or (PLAIN_NO_KEY_NOTE if messages is not None else None)
        return self._base(
            d, "pia", profile=profile.name, profile_assumed=assumed, header=header,
            authenticated=report.authenticated, messages=messages, error=error, note=note,
        )

    def _message(self, m: Message, profile: VersionProfile) -> tuple[dict[str, Any], str | None]:
        return self._message_json(
            profile, m.flags, m.protocol_type, m.protocol_port, m.destination, m.source_constant_id,
            m.source_station_index, m.payload, m,
        )

    def _message_json(
        self, profile: VersionProfile, flags: int, protocol_type: int, port: int, destination: int,
        source_constant_id: int | None, source_station_index: int | None, payload: bytes, m: Message | None = None,
        decoded: Any = None,
    ) -> tuple[dict[str, Any], str | None]:
        """One message as JSON, and the error to report for it (a payload that does not inflate); *decoded*: its
        decoded form where the caller has it already (:meth:`_decode_known` of this very payload), not decoded again."""
        known = self._protocols.get((profile.version, protocol_type))
        if known is None:
            own_name = session6.session_message_name(profile, protocol_type)
            known = self._protocols[(profile.version, protocol_type)] = (
                profile.protocol_name(protocol_type) or own_name, _proto_for(profile, protocol_type), own_name is not None
            )
        name, proto, own_session = known
        if proto not in DECODED_PROTOCOLS:
            proto = None  # no decoded form, whatever the payload
        out: dict[str, Any] = {
            "flags": flags,
            "protocol_type": protocol_type,
            "protocol_port": port,
            "protocol": name,
            "destination": destination,
            "source_constant_id": source_constant_id,
        }
        if source_station_index is not None:
            out["source_station_index"] = source_station_index
        error = None
        zflag = profile.zlib_flag
        if zflag is not None and flags & zflag:
            if m is None:
                m = Message(protocol_type=protocol_type, protocol_port=port, payload=payload, flags=flags,
                            destination=destination, source_constant_id=source_constant_id)  # fmt: skip
            try:
                inflated = inflate_payload(m, profile)
                out["compressed_size"] = len(payload)
                payload = inflated
            except DecodeError as exc:
                error = f"message payload: {_one_line(exc)}"
                out["error"] = error
        out["payload"] = payload.hex()
        if error is None and own_session:
            # pianode's own session management inside 6.x packets (protocols.pia.session6).
            try:
                decoded = session6.decode_session_message(profile, protocol_type, port, payload)
            except (DecodeError, ConfigError) as exc:
                out["decoded_error"] = _one_line(exc)
            else:
                if decoded is not None:
                    out["decoded"] = {"type": type(decoded).__name__, **_as_dict(to_jsonable(decoded))}
        elif error is None and proto is not None:
            try:
                if decoded is None:
                    decoded = self._decode_known(proto, port, payload, profile)
            except (DecodeError, ConfigError) as exc:
                out["decoded_error"] = _one_line(exc)
            else:
                if decoded is not None:
                    out["decoded"] = {"type": type(decoded).__name__, **_as_dict(to_jsonable(decoded))}
        return out, error

    def _decode_known(self, proto: Proto, port: int, payload: bytes, profile: VersionProfile) -> Any:
        """A decoded form of a known sub-protocol message, or None."""
        decoded = None
        if not self._subdecode_loaded:
            self._subdecode, self._subdecode_loaded = _subprotocol_decoder(), True
        if self._subdecode is not None:
            decoded = self._subdecode(proto, port, payload, profile)
        if decoded is None and proto is Proto.LAN:
            # LAN host/session/keep-alive messages (spec §6.5).
            from protocols.pia.lan_messages import decode_lan_message

            decoded = decode_lan_message(payload, profile)
        return decoded

    # -- LAN browse -------------------------------------------------------
    def _lan(self, d: Datagram, kind: str) -> DecodeResult:
        from protocols.pia.lan import BrowseReply, BrowseRequest

        codec = BrowseRequest if kind == "lan-browse-request" else BrowseReply
        if self.ctx.profile is not None:
            candidates, assumed = [self.ctx.profile], False
        else:
            candidates, assumed = _lan_candidates(d.data, kind), True
        first_error: str | None = None
        for profile in candidates:
            try:
                value = codec.decode(d.data, profile)
            except (DecodeError, ConfigError) as exc:
                first_error = first_error or _one_line(exc)
                continue
            if isinstance(value, BrowseRequest):
                auth, error, note = self._lan_request(d, value)
            else:
                auth, error, note = self._lan_reply(d, value)
            return self._base(
                d, kind, profile=profile.name, profile_assumed=assumed, lan=to_jsonable(value),
                authenticated=auth, error=error, note=note,
            )
        return self._base(d, kind, data=d.data.hex(), error=first_error or "no LAN profile fits")

    def _lan_request(self, d: Datagram, request: Any) -> tuple[bool | None, str | None, str | None]:
        """Open the crypto challenge with the game key (spec §6.4 step 1): the browser knows the key."""
        from protocols.pia.lan import open_challenge_request

        chal = request.challenge
        game_key = self.ctx.game_key
        if chal is None or not chal.enabled or game_key is None or d.dst is None:
            return None, None, None
        broadcast = endpoint_ip(d.dst)  # the request is sent to the broadcast address (§6.1)
        try:
            plaintext = open_challenge_request(chal, game_key, broadcast, backend=self._backend)
        except (DecodeError, ConfigError) as exc:
            return False, f"challenge: {_one_line(exc)}", None
        if d.src is not None:
            _keep_recent(self._lan_requests, d.src, (chal.key, plaintext, broadcast))  # a reply answers a recent one
        return True, None, None

    def _lan_reply(self, d: Datagram, reply: Any) -> tuple[bool | None, str | None, str | None]:
        """Check the challenge reply against the request it answers (§6.4 step 3) and learn the session key param."""
        from protocols.pia.lan import verify_challenge_reply

        auth: bool | None = None
        error: str | None = None
        game_key = self.ctx.game_key
        request = self._lan_requests.get(d.dst) if d.dst is not None else None
        chal = reply.challenge
        if game_key is not None and chal is not None and chal.enabled and request is not None:
            request_key, plaintext, broadcast = request
            try:
                verify_challenge_reply(chal, game_key, request_key, plaintext, broadcast, backend=self._backend)
                auth = True
            except (DecodeError, ConfigError) as exc:
                auth, error = False, f"challenge reply: {_one_line(exc)}"
        param = getattr(reply.session, "session_key_param", None)
        ctx = self.ctx
        if (
            auth is not False and isinstance(param, bytes) and game_key is not None and ctx.session_key is None
            and (ctx.session_param is None or self._lan_params) and ctx.network in (None, NetworkType.LAN)
            and param not in self._lan_params
        ):
            # What a joining console does next (§6.6): derive the session key from the advertised param.
            self._lan_params = [*self._lan_params[-7:], param]  # (a few sessions' worth)
            if len(self._lan_params) > 1:
                return auth, error, "another session's key param learned: later packets use the key that reads them"
            self.ctx = attrs.evolve(ctx, session_param=param, network=NetworkType.LAN, _cache={})
            self._codecs.clear()
            return auth, error, "session key param learned: later packets use the LAN session key derived from it"
        return auth, error, None

    # -- PRUDP ------------------------------------------------------------
    def _prudp(self, d: Datagram) -> DecodeResult:
        settings = self.ctx.prudp
        assert settings is not None
        if service_port(d.src, d.dst) is not None:  # DNS, NTP, ... beside the game's PRUDP
            return self._base(d, "unknown", data=d.data.hex(), note=why_unknown(d.data, d.src, d.dst))
        # The RC4 state of each direction; a capture of more flows than _FLOWS_KEPT forgets the
        # longest idle (its next packets then say they cannot be opened).
        streams = _keep_recent(self._nex_streams, (d.src, d.dst), self._nex_streams.get((d.src, d.dst)) or {})
        try:
            packets, signatures, auth, error, note = read_prudp(d.data, settings, streams)
        except DecodeError as exc:
            return self._base(d, "unknown", data=d.data.hex(), error=f"not {settings.variant} PRUDP: {_one_line(exc)}")
        rows = [{**_prudp_json(p), "signature_ok": ok} for p, ok in zip(packets, signatures, strict=True)]
        return self._base(d, "prudp", prudp=rows, authenticated=auth, error=error, note=note)


#: Per-endpoint state a decoder keeps (PRUDP cipher streams, LAN browse requests) for at most this
#: many endpoints or flows, so that its memory stays flat in the capture size.
_FLOWS_KEPT = 4096


def _keep_recent(table: dict[Any, Any], key: Any, value: Any) -> Any:
    """Set ``table[key] = value`` as the most recently used entry, forgetting the least recently
    used one beyond :data:`_FLOWS_KEPT`; returns *value*."""
    if table.pop(key, None) is None and len(table) >= _FLOWS_KEPT:
        del table[next(iter(table))]
    table[key] = value
    return value


#: The sub-protocols a message payload has a decoded form for: those of
#: protocols.pia.subprotocols.decode_payload, and LAN (protocols.pia.lan_messages); for any other both give
#: None whatever the payload (tests/pianode/capture/test_decode_fast_line.py checks it).
DECODED_PROTOCOLS = frozenset({Proto.STATION, Proto.MESH, Proto.KEEP_ALIVE, Proto.RTT, Proto.LOCAL, Proto.LAN})


def _proto_for(profile: VersionProfile, protocol_type: int) -> Proto | None:
    for proto, pid in profile.protocol_ids.items():
        if pid == protocol_type:
            return proto
    return None


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {"value": value}


def _prudp_json(p: Any) -> dict[str, Any]:
    out: dict[str, Any] = to_jsonable(p)
    out["type"] = p.type.name
    out["flags"] = p.flag_names
    out["source_stream_type"], out["source_port"] = p.source_stream_type, p.source_port
    out["destination_stream_type"], out["destination_port"] = p.destination_stream_type, p.destination_port
    out.pop("option_order", None)
    return out


def endpoint_ip(src: str | None) -> str:
    """The IP of a capture's endpoint text (the sender's, for nonces); captures without addresses use 0.0.0.0 (LAN/LDN 6.x nonces then fail)."""
    if src is None:
        return "0.0.0.0"
    try:
        return parse_endpoint(src)[0]
    except ValueError:
        return "0.0.0.0"


def __getattr__(name: str) -> Any:
    # FlowTracker (pianode decode --flows) lives in pianode.capture.flows, loaded when asked for.
    if name == "FlowTracker":
        from pianode.capture.flows import FlowTracker

        return FlowTracker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
