"""``pianode decode``: read a capture and print every datagram decoded ("Wireshark for Pia").

Input: pcap, pcapng, JSON Lines or hex lines (``-`` for stdin), see
:mod:`pianode.capture.pcap`.  Session context: ``--session FILE.json`` and/or the
flags of the same names, see :mod:`pianode.capture.session_file`.  Output: ``--format
table`` (the default on a terminal) or ``--format jsonl`` (the default when
piped), one record per datagram from :mod:`pianode.capture.decode`.

Exit status 0 when the whole input could be read, whatever individual
datagrams hold; 2 with a one-line message when the capture or the session
settings cannot be used at all (an input with no bytes, or text with no datagram
line, included; a pcap or pcapng with no packet records is an empty capture), or (after every readable datagram) when the
capture is cut short or corrupt, as tshark does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any, NoReturn, TextIO

from pianode.capture.pcap import Capture, CaptureError, open_capture
from pianode.cli.common import CliError, check_not_standard_output, check_output_path, printable
from pianode.capture.decode import Decoder, DecodeResult
from pianode.capture.session_file import DecodeContext, load_session, session_path_for
from pianode.capture.prudp_read import NO_ACCESS_KEY_NOTE, V1_NOTE
from pianode.capture.unknown import NO_KEY_NOTE
from protocols.errors import ConfigError

__all__ = ["add_parser", "render_flow", "render_row", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "decode",
        help="decode Pia/PRUDP datagrams from a capture (pcap, pcapng, JSON Lines, hex)",
        description=(
            "Decode every UDP datagram of a capture as Pia (or PRUDP when the session says so). "
            "Settings come from --session FILE.json; each flag below overrides the setting of the same name."
        ),
    )
    p.add_argument("capture", help="pcap, pcapng, JSON Lines or hex-lines file; - for standard input")
    p.add_argument("--session", metavar="FILE", help="session settings (JSON object; - for standard input)")
    p.add_argument("--format", choices=("table", "jsonl"), default=None,
                   help="output format (default: table on a terminal, jsonl otherwise)")
    p.add_argument("--flows", action="store_true",
                   help="print one summary per Pia flow (connection and packet id progression) instead of datagrams")
    p.add_argument("--decrypted-pcap", metavar="OUT.pcapng",
                   help="instead of printing, write every datagram with Pia bodies decrypted (- for standard output), for Wireshark with"
                        " pianode's dissector (pianode wireshark path)")
    g = p.add_argument_group("session settings (override --session)")
    g.add_argument("--version", metavar="X.Y", help='Pia version, e.g. 5.18 (default: detect per datagram)')
    g.add_argument("--allow-nearest-version", action="store_true", default=None,
                   help="use the nearest documented version for an undocumented one")
    g.add_argument("--network", metavar="TYPE", help="lan, ldn, nex or npln (needed for 5.7+ nonces)")
    g.add_argument("--session-key", metavar="HEX", help="16-byte session key (hex)")
    g.add_argument("--hmac-key", metavar="KEY",
                   help="<= 5.6 HMAC-MD5 key when it is not the session key (hex, or text; hex:/ascii: prefix)")
    g.add_argument("--game-key", metavar="KEY", help="game key: 32 hex digits or 16 characters")
    g.add_argument("--session-param", metavar="PARAM", help="LAN: 64 hex digits; LDN 5.9+: an integer")
    g.add_argument("--application-data", metavar="HEX",
                   help="hex of the LDN advertisement's Pia application data")
    g.add_argument("--ssid", metavar="HEX", help="LDN 6.x: the 16 SSID bytes (hex)")
    g.add_argument("--network-id", metavar="N", help="network id (integer, decimal or 0x hex)")
    g.add_argument("--gathering-id", metavar="N", help="NEX gathering id (integer)")
    g.add_argument("--mac", action="append", metavar="IP=MAC", help="LDN 5.x: a station's MAC (repeatable)")
    g.add_argument("--prudp-variant", metavar="NAME",
                   help="decode PRUDP of this variant instead of Pia (e.g. quazal-v0)")
    g.add_argument("--access-key", metavar="KEY", help="PRUDP access key (text; hex: prefix for hex)")
    g.add_argument("--backend", choices=("cryptography", "pycryptodome"), default=None,
                   help="AES-GCM backend (default: fastest installed)")
    p.set_defaults(handler=run)

    def one_line_error(message: str) -> NoReturn:
        # A bad flag value is a user error like any other: one line, status 2 (no usage dump).
        print(f"pianode decode: {printable(message)}", file=sys.stderr)
        sys.exit(2)

    p.error = one_line_error  # type: ignore[method-assign]


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "version": args.version,
        "allow_nearest": args.allow_nearest_version,
        "network": args.network,
        "session_key": args.session_key,
        "hmac_key": args.hmac_key,
        "game_key": args.game_key,
        "session_param": args.session_param,
        "application_data": args.application_data,
        "ssid": args.ssid,
        "network_id": args.network_id,
        "gathering_id": args.gathering_id,
    }
    if args.mac:
        macs: dict[str, str] = {}
        for item in args.mac:
            ip, sep, mac = item.partition("=")
            if not sep:
                raise CliError(f"--mac takes IP=MAC, got {item!r}")
            macs[ip.strip()] = mac.strip()
        out["macs"] = macs
    prudp: dict[str, Any] = {}
    if args.prudp_variant is not None:
        prudp["variant"] = args.prudp_variant
    if args.access_key is not None:
        prudp["access_key"] = args.access_key
    if prudp:
        out["prudp"] = prudp
    return out


#: Session settings → the flag that overrides each (a setting's error names the flag when the flag gave it).
_SETTING_FLAGS = {
    "version": "--version", "network": "--network", "session_key": "--session-key", "hmac_key": "--hmac-key",
    "game_key": "--game-key", "session_param": "--session-param", "application_data": "--application-data",
    "ssid": "--ssid", "network_id": "--network-id", "gathering_id": "--gathering-id", "macs": "--mac",
}  # fmt: skip


def _flag_of_error(message: str, args: argparse.Namespace) -> str:
    """A settings error in the words of the flag that gave the value ("session_key must be ..." →
    "--session-key must be ..."); errors about the session file's own values stay as they are."""
    message = message.replace("(allow the nearest version to use it anyway)", "(--allow-nearest-version uses the nearest anyway)")
    given = {k for k, v in vars(args).items() if v is not None}
    given |= {"macs"} if args.mac else set()
    m = re.match(r"([a-z_]+)\b", message)
    if m and m[1] in _SETTING_FLAGS and m[1] in given:
        return _SETTING_FLAGS[m[1]] + message[m.end():]
    if "Pia version" in message and args.version is not None:
        return f"--version: {message}"
    if "PRUDP variant" in message and args.prudp_variant is not None:
        return f"--prudp-variant: {message}"
    if message.startswith("prudp.variant ") and args.access_key is not None and args.prudp_variant is None:
        return "--access-key needs --prudp-variant NAME: which PRUDP variant the capture holds (e.g. nintendo-v1)"
    if message.startswith("prudp.access_key ") and args.access_key is not None:
        return "--access-key" + message[len("prudp.access_key"):]
    return message


def run(args: argparse.Namespace) -> int:
    if args.capture == "":
        raise CliError("capture: no file named (give a capture file, or - for standard input)")
    if args.capture == "-" and sys.stdin is None:  # started with it closed (<&-)
        raise CliError("capture -: standard input is closed (pipe a capture into it, or name a file)")
    if args.session == "":
        raise CliError("--session needs a file name")
    if args.session == "-":
        if args.capture == "-":
            raise CliError("--session - and capture -: standard input carries only one of them (name a file for the other)")
        if sys.stdin is None:  # started with it closed (<&-)
            raise CliError("--session -: standard input is closed (pipe the session file into it, or name a file)")
    note = None  # said once at the end, in the line of the result (one line whatever happens)
    if args.session is None:
        args.session, note = _recording_session(args)
    _check_export(args)
    check_not_standard_output("capture", args.capture)
    check_not_standard_output("--session", args.session)
    try:
        ctx = load_session(sys.stdin if args.session == "-" else args.session, _overrides(args))
    except ConfigError as exc:
        raise CliError(_flag_of_error(_name_flags(" ".join(str(exc).split())), args)) from None
    for warning in ctx.warnings:
        _say(f"pianode decode: {_name_flags(warning)}")
    try:
        cap = open_capture(args.capture)
    except CaptureError as exc:
        raise CliError(str(exc)) from None
    if cap.empty_input is not None:  # no bytes, or text without a datagram line: not a capture, bad input
        cap.close()
        raise CliError(f"{cap.name}: nothing to decode: {cap.empty_input}")
    fmt = args.format or ("table" if sys.stdout.isatty() else "jsonl")
    decoder = Decoder(ctx, backend=args.backend)
    exported = None
    try:
        with cap:
            if args.decrypted_pcap is not None:
                from pianode.cli.wireshark_export import write_export

                exported = write_export(cap, decoder, args.decrypted_pcap)
            elif args.flows:
                _emit_flows(cap, decoder, fmt, sys.stdout)
            else:
                _emit(cap, decoder, ctx, fmt, sys.stdout)
    except CaptureError as exc:
        raise CliError(str(exc)) from None
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, and keep Python from
        # complaining when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    unused = _unused_hmac_key(args, decoder)
    if cap.stats.problem is not None:
        # One line: where the capture broke, what was written of it before, what went unused and where the
        # settings came from.
        extra = "".join(f"; {part}" for part in (exported, unused, note) if part is not None)
        _say(f"pianode decode: {cap.name}: {cap.stats.problem}{extra}")
        return 2
    if exported is not None:
        _say("; ".join(part for part in (exported, unused, note) if part is not None))
        return 0
    parts = [unused, note if args.session is None or not args.quiet else None]  # (a file left out is said even with -q)
    if fmt == "jsonl" and not args.quiet and not cap.stats.udp and not cap.stats.link:
        # JSON Lines has no summary line: an empty result is said here, not left silent (-q: only the
        # result, which is empty; an input with nothing in it at all was refused above, -q or not).
        parts.insert(0, f"{cap.name}: {_nothing_read(cap)}")
    said = [part for part in parts if part is not None]
    if said:
        _say("pianode decode: " + "; ".join(said))
    return 0


def _say(line: str) -> None:
    """A line on stderr: the capture's name and the values in it with line breaks and escapes escaped."""
    print(printable(line), file=sys.stderr)


def _unused_hmac_key(args: argparse.Namespace, decoder: Decoder) -> str | None:
    """Why --hmac-key did nothing, if it did nothing: only Pia 5.6 and older sign packets with
    HMAC-MD5; later versions seal them with AES-GCM under the session key."""
    seen = sorted(decoder.pia_versions)
    if args.hmac_key is None or not seen or any(v <= (5, 6) for v in seen):
        return None
    names = ", ".join(f"{a}.{b}" for a, b in seen)
    return (f"--hmac-key was not used: the capture's Pia packets were read as {names}, which seal with AES-GCM under the"
            " session key (HMAC-MD5 signs Pia 5.6 and older)")


def _check_export(args: argparse.Namespace) -> None:
    """--decrypted-pcap: a file it can write (- for standard output, not a terminal), and no flag of the
    printed output beside it (it prints nothing: --flows and --format would do nothing)."""
    if args.decrypted_pcap is None:
        return
    check_output_path("--decrypted-pcap", args.decrypted_pcap, stdout=True,
                      reads=(("capture", args.capture), ("session file", args.session)))
    if args.decrypted_pcap == "-" and sys.stdout.isatty():
        raise CliError("--decrypted-pcap -: standard output is a terminal; pipe it (| wireshark -k -i -) or give a file name")
    for flag, given in (("--flows", args.flows), ("--format", args.format is not None)):
        if given:
            raise CliError(f"{flag} shapes the printed output, and --decrypted-pcap prints none (it writes the"
                           " capture): use one or the other")


def _nothing_read(cap: Capture) -> str:
    """Why a capture gave no datagram, in words: no packet records, or every frame without UDP."""
    stats = cap.stats
    if stats.skipped:
        n = sum(stats.skipped.values())
        why = ", ".join(f"{k} {v}" for k, v in stats.skipped.most_common())
        return f"no UDP datagrams ({n} frame{'s' if n != 1 else ''} without UDP skipped: {why})"
    if stats.frames:
        return f"no UDP datagrams in its {stats.frames} records"
    # (An input with no bytes or no datagram line was refused before reading: Capture.empty_input.)
    return f"no UDP datagrams (a {stats.format} file with no packet records)"


def _recording_session(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The session file a recording keeps beside its capture (``FILE.session.json``, written
    by ``--record``), when no settings were given: decoding a recording then needs no flags.

    Returns ``(path or None, what to tell the user or None)``.  Used only when it reads as
    settings (a file of that name that is not one is left out, and the note says why); the
    flags still override it, and ``--session`` names another file.
    """
    if args.capture == "-":
        return None, None
    path = session_path_for(args.capture)
    if path == args.capture or not os.path.isfile(path):
        return None, None
    flag = {"allow_nearest": "allow-nearest-version"}
    given = [f"--{flag.get(k, k.replace('_', '-'))}" for k, v in _overrides(args).items() if v is not None]
    if given:  # settings on the command line stand alone (README): say so, the file's key may be the one missing
        return None, f"not using {path} beside the capture: {', '.join(given)} given (add --session {path} for both)"
    try:
        load_session(path)
    except ConfigError as exc:
        return None, f"not using {path} beside the capture: {' '.join(str(exc).split())}"
    return path, f"session settings from {path}, beside the capture (--session FILE for others)"


def _name_flags(text: str) -> str:
    """"give network" (a session-file setting) → "give --network": the flag of the same name."""
    return re.sub(r"\bgive (?!--)([a-z_]+)", lambda m: f"give --{m[1].replace('_', '-')}", text)


#: JSON Lines written per write call.
_BATCH = 256


def _emit(cap: Capture, decoder: Decoder, ctx: DecodeContext, fmt: str, out: TextIO) -> None:
    if fmt == "jsonl":
        # One line per datagram as it is read: nothing is held back, so memory stays flat in the capture size.
        # Lines go out in batches of _BATCH: one write call each, and never more than a batch held.
        line_of = decoder.json_line  # json.dumps(decoder.decode(d).to_json()), built directly where it can be
        write = out.write
        lines: list[str] = []
        add = lines.append
        for d in cap:
            add(line_of(d))
            if len(lines) >= _BATCH:
                lines.append("")
                write("\n".join(lines))
                lines.clear()
        if lines:
            lines.append("")
            write("\n".join(lines))
        out.flush()
        return
    t0: float | None = None
    t0_ns: int | None = None
    unkeyed = v1 = 0  # PRUDP datagrams whose checksum needed the access key that was not given; v1 datagrams
    for d in cap:
        r = decoder.decode(d)
        if t0 is None and r.time is not None:
            t0, t0_ns = r.time, r.time_ns
        unkeyed += r.note == NO_ACCESS_KEY_NOTE
        v1 += r.note == V1_NOTE
        out.write(render_row(r, t0, t0_ns) + "\n")
    out.write(_summary(cap, decoder, ctx, unkeyed, v1) + "\n")
    out.flush()


def _emit_flows(cap: Capture, decoder: Decoder, fmt: str, out: TextIO) -> None:
    from pianode.capture.flows import FlowTracker

    tracker = FlowTracker()
    for d in cap:
        tracker.add(decoder.decode(d))
    flows = tracker.flows()
    for flow in flows:
        out.write((json.dumps(flow) if fmt == "jsonl" else render_flow(flow)) + "\n")
    out.flush()
    if not flows and decoder.kinds and cap.stats.problem is None:  # (no datagram, or a broken file: the caller says)
        n = sum(decoder.kinds.values())
        kinds = ", ".join(f"{c} {k}" for k, c in decoder.kinds.most_common())
        _say(f"pianode decode: {cap.name}: no Pia flow ({n} datagram{'s' if n != 1 else ''}: {kinds})")


def render_flow(f: dict[str, Any]) -> str:
    """One flow as text: totals, then one line per run of a connection id."""
    lines = [
        f"flow {f['flow']}: {f['src'] or '?'} → {f['dst'] or '?'}  {f['packets']} packets"
        f" ({f['encrypted']} encrypted, {f['plain']} plain); connection ids {f['connection_ids_in_order']}"
    ]
    for conn, s in f["nonzero_connection_id_packet_ids"].items():
        shown = f"{len(s['missing'])} of {s['missing_count']}: " if "missing_count" in s else ""
        missing = f", missing {shown}{s['missing']}" if s["missing"] else ", no gaps"
        lines.append(f"{'':>4}connection {conn}: packet ids {s['min']}-{s['max']} ({s['count']}){missing}")
    for run in f["runs"]:
        steps = f", other steps {run['other_steps']}" if run["other_steps"] else ""
        lines.append(
            f"{'':>4}run from frame {run['first_frame']}: connection {run['connection_id']} x{run['count']},"
            f" ids {run['first_packet_id']}..{run['last_packet_id']}{steps}"
        )
    return "\n".join(printable(line) for line in lines)  # (addresses and names come from the capture)


# --------------------------------------------------------------------------
# Table rendering


def _short_hex(hx: str, limit: int = 48) -> str:
    return hx if len(hx) <= limit else hx[:limit] + "…"


def _auth(value: bool | None) -> str:
    return {True: "auth ok", False: "AUTH FAILED", None: "auth ?"}[value]


def _fields(d: dict[str, Any], skip: tuple[str, ...] = ()) -> str:
    parts = []
    for k, v in d.items():
        if k in skip or v is None:
            continue
        if isinstance(v, dict):
            v = "{" + _fields(v) + "}"
        elif isinstance(v, list):
            v = "[" + ", ".join(("{" + _fields(x) + "}") if isinstance(x, dict) else str(x) for x in v[:8])
            v += (", …" if len(v) > 8 else "") + "]"
        elif isinstance(v, str) and len(v) > 40:
            v = _short_hex(v, 40)
        parts.append(f"{k}={v}")
    return " ".join(parts)


def render_row(r: DecodeResult, t0: float | None = None, t0_ns: int | None = None) -> str:
    """One datagram as readable text: a summary line, then one line per message/packet.  The time is since
    *t0* (the first frame's), from the exact nanoseconds where the capture has them (*t0_ns*)."""
    if r.time is None:
        when = ""
    elif r.time_ns is not None and t0_ns is not None:
        when = f"{(r.time_ns - t0_ns) / 1e9:+.6f}"  # a difference of integers: exact before this one rounding
    else:
        when = f"{r.time - (t0 or 0.0):+.6f}"
    route = f"{r.src or '?'} → {r.dst or '?'}" if (r.src or r.dst) else (r.name or "")
    head = f"{r.index:>5} {when:>12} {route}  {r.kind}"
    lines: list[str] = []
    if r.kind == "pia":
        h = r.header or {}
        assumed = "?" if r.profile_assumed else ""
        parts = [f"Pia {r.profile}{assumed}" if r.profile else "Pia", h.get("format", "")]
        if h:
            parts.append("enc" if h.get("encrypted") else "plain")
            if "connection_id" in h:
                parts.append(f"conn={h['connection_id']}")
            if "source_variable_id" in h:
                parts.append(f"var={h['source_variable_id']}→{h['destination_variable_id']}")
            parts.append(f"id={h['packet_id']}")
            if "source_timer" in h:
                parts.append(f"timers={h['source_timer']}/{h['destination_timer']}")
            if h.get("footer"):
                parts.append(f"footer={h['footer']}")
        parts.append(_auth(r.authenticated))
        parts.append(f"{r.size} B")
        head += "  " + " ".join(p for p in parts if p)
        for i, m in enumerate(r.messages or []):
            name = m.get("protocol") or "?"
            src = m.get("source_constant_id")
            line = (
                f"{'':>8}[{i}] {name}(0x{m['protocol_type']:x}):{m['protocol_port']} flags=0x{m['flags']:02x}"
                f" dst=0x{m['destination']:x}"
            )
            if src is not None:
                line += f" src=0x{src:x}"
            if "source_station_index" in m:
                line += f" sta={m['source_station_index']}"
            line += f" {len(m['payload']) // 2} B {_short_hex(m['payload'])}"
            lines.append(line)
            if "decoded" in m:
                dec = m["decoded"]
                text = f"{dec.get('type', '')}: {_fields(dec, skip=('type',))}"
                lines.append(f"{'':>12}{text if len(text) <= 200 else text[:199] + '…'}")
            elif "decoded_error" in m:
                lines.append(f"{'':>12}(not decoded: {m['decoded_error']})")
    elif r.kind == "prudp":
        head += f"  {_auth(r.authenticated).replace('auth', 'checksum')} {r.size} B"
        for p in r.prudp or []:
            flags = "|".join(p.get("flags") or []) or "-"
            body = p.get("plaintext") if p.get("plaintext") is not None else p.get("payload", "")
            lines.append(
                f"{'':>8}{p['type']} {flags} 0x{p['source']:02x}→0x{p['destination']:02x} seq={p['sequence_id']}"
                f" session={p['session_id']} {len(p.get('payload', '')) // 2} B {_short_hex(body or '')}"
            )
    elif r.kind.startswith("lan-"):
        profile = f" {r.profile}{'?' if r.profile_assumed else ''}" if r.profile else ""
        head += f"  LAN{profile} {_auth(r.authenticated).replace('auth', 'challenge')} {r.size} B"
        if r.lan:
            for part in ("search", "session"):
                if isinstance(r.lan.get(part), dict):
                    body = _fields(r.lan[part], skip=("attributes", "stations", "application_data_padding"))
                    lines.append(f"{'':>8}{part}: {body}")
            chal = r.lan.get("challenge")
            if isinstance(chal, dict):
                lines.append(f"{'':>8}challenge: version={chal.get('version')} enabled={chal.get('enabled')}"
                             f" counter={chal.get('counter')} key={chal.get('key')}")
    elif r.kind == "ldn-discovery" and r.ldn is not None:
        head += f"  LDN {r.ldn.get('type', '')} {r.size} B"
        body = {k: v for k, v in r.ldn.items() if k not in ("type", "advertisement")}
        if body:
            lines.append(f"{'':>8}{_fields(body)}")
        adv = r.ldn.get("advertisement")
        if isinstance(adv, dict):
            lines.append(f"{'':>8}advertisement: {_fields(adv, skip=('participants',))}")
            for part in adv.get("participants") or []:
                lines.append(f"{'':>10}participant: {_fields(part)}")
    else:
        head += f"  {r.size} B {_short_hex(r.data or '')}"
    if r.note is not None and r.note not in (NO_KEY_NOTE, NO_ACCESS_KEY_NOTE, V1_NOTE):  # (said once, in the summary)
        lines.append(f"{'':>8}note: {r.note}")
    if r.error is not None:
        lines.append(f"{'':>8}! {r.error}")
    # Names, notes and decoded strings come from the capture: shown, never acted on by the terminal.
    return "\n".join(printable(line) for line in (head, *lines))


def _summary(cap: Capture, decoder: Decoder, ctx: DecodeContext, unkeyed: int = 0, v1: int = 0) -> str:
    kinds = ", ".join(f"{n} {k}" for k, n in decoder.kinds.most_common())
    auth = decoder.auth
    text = (
        f"-- {cap.stats.udp + sum(cap.stats.link.values())} datagrams ({kinds or 'none'}); authenticated: {auth['true']} yes, {auth['false']} no,"
        f" {auth['null']} not checked; {decoder.errors} with errors"
    )
    if cap.stats.link:
        link = ", ".join(f"0x{t:04x} {n}" for t, n in sorted(cap.stats.link.items()))
        text += f"\n-- {sum(cap.stats.link.values())} of them non-IP link frames, by EtherType ({link})"
    if cap.stats.skipped:
        skipped = ", ".join(f"{k} {n}" for k, n in cap.stats.skipped.most_common())
        text += f"\n-- {sum(cap.stats.skipped.values())} frames without UDP skipped ({skipped})"
    if cap.stats.incomplete:
        n = cap.stats.incomplete
        text += (f"\n-- {n} IP-fragmented datagram{'s' if n != 1 else ''} never whole (a fragment is not in the"
                 " capture): not decoded")
    if not ctx.has_key_material and (ctx.prudp is None or decoder.kinds.get("pia")):
        beside = session_path_for(cap.name)
        hint = f"--session {beside}, beside the capture" if beside != cap.name and os.path.isfile(beside) else "see --session"
        text += f"\n-- no key given: encrypted bodies are not shown ({hint})"
    if unkeyed:
        text += f"\n-- no access key given: PRUDP checksums were not checked in {unkeyed} (--access-key)"
    if v1:
        text += f"\n-- {v1} PRUDP v1 datagram{'s' if v1 != 1 else ''}: no checksum, and only SYN signatures are checked"
    if decoder.kinds.get("unknown") and ctx.prudp is None:
        text += "\n-- unknown datagrams: PRUDP? give --prudp-variant (and --access-key)"
    return text
