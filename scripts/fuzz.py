#!/usr/bin/env python3
"""Coverage-guided fuzzing (atheris) of every datagram decoder in ``protocols/``, time-bounded.

Usage::

    pip install atheris
    python scripts/fuzz.py --seconds 60                 # every target, one minute
    python scripts/fuzz.py --seconds 600 --corpus fuzz-corpus --artifacts fuzz-crashes
    python scripts/fuzz.py --target codec --seconds 30  # only targets whose name contains "codec"
    python scripts/fuzz.py --list
    python scripts/fuzz.py --replay crash-1234abcd      # re-run saved inputs (no atheris needed)

Theory of operation
-------------------
One libFuzzer input selects a target and a Pia version and feeds the rest to
the decoder: byte 0 picks the target, byte 1 the version, bytes 2.. are the
datagram or payload.  The targets are the packet codec with and without keys
(decode and inspect, AES-GCM on each installed backend and ECB+HMAC for
<= 5.6), the message area, every sub-protocol payload decoder, the reliable
window segments, LAN browse/session packets and LDN data, the common types
and, for PRUDP, ``decode_datagram`` and the packet codec of every variant.

The project rule (protocols/errors.py) is that any bytes give a value or a
``DecodeError``; anything else raised is a crash: atheris prints the
traceback, saves the input under ``--artifacts`` and the script exits non-zero.
A target asked for a version it does not apply to (it refuses even empty
input with ConfigError, e.g. a 6.x-only structure for 5.3) is skipped for
that version; a ConfigError on any other input is a crash too.

The seed corpus is built here: packets sealed by the codec for each version
(encrypted and plain), message areas, and packets encoded for each PRUDP
variant, so mutations start past magic numbers and length fields.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

VERSIONS = ("4.10", "5.3", "5.9", "5.11", "5.14", "5.18", "5.23", "5.29", "5.31", "5.45", "6.16", "6.25", "6.32", "7.2")
KEY = bytes(range(16))
SOURCE = "127.0.0.1"
PRUDP_KEY = b"8dtRv2oj"
RENDEZVOUS_KEY = bytes(range(16, 32))


def _load_atheris() -> Any:
    try:
        import atheris
    except ImportError:
        print(
            "scripts/fuzz.py needs atheris, the coverage-guided fuzzer: pip install atheris\n"
            "(the hypothesis fuzz in tests/protocols/test_fuzz_decoders.py runs without it)",
            file=sys.stderr,
        )
        sys.exit(2)
    return atheris


def build_targets() -> tuple[list[tuple[str, Callable[[bytes, Any], Any]]], list[Any], dict[str, Any]]:
    """(targets, profiles, modules); import protocols here so atheris can instrument it first."""
    import attrs

    from protocols.crypto.aead import available_backends
    from protocols.errors import ConfigError
    from protocols.pia import lan, lan_criteria, lan_messages, ldn, types
    from protocols.pia.header import decode_header, sniff_header_format
    from protocols.pia.message import Message, decode_messages, inflate_payload
    from protocols.pia.nonce import nonce_builder
    from pianode.bench.codec import bench_header, bench_message
    from protocols.pia.packet import Packet, PacketCodec
    from protocols.pia.packet_values import LoneMessage
    from protocols.pia.reliable import decode_bulk_ack, decode_segment
    from protocols.pia.subprotocols import decode_payload
    from protocols.pia.versions import Cipher, NetworkType, Proto, profile_for
    from protocols.prudp.codec import PacketCodec as PrudpCodec
    from protocols.prudp.codec import decode_datagram
    from protocols.prudp.rendezvous import HostHello
    from protocols.prudp.variants import VARIANTS

    profiles = [profile_for(v) for v in VERSIONS]
    codecs: dict[tuple[str, str, str], Any] = {}

    def codec(profile: Any, key: bytes | None, backend: str | None) -> Any:
        k = (profile.name, "key" if key else "none", backend or "")
        c = codecs.get(k)
        if c is None:
            if key is None:
                c = PacketCodec(profile)
            elif profile.cipher is Cipher.ECB_HMAC:
                c = PacketCodec(profile, key)
            else:
                c = PacketCodec(profile, key, nonce_builder(profile, NetworkType.LAN), backend=backend)
            codecs[k] = c
        return c

    def decode_with(key: bytes | None, backend: str | None) -> Callable[[bytes, Any], Any]:
        return lambda d, p: codec(p, key, backend).decode(d, SOURCE)

    def inspect_with(key: bytes | None, backend: str | None) -> Callable[[bytes, Any], Any]:
        def run(d: bytes, p: Any) -> Any:
            report = codec(p, key, backend).inspect(d, SOURCE)
            if report.error is not None and not isinstance(report.error, DecodeErrorType):
                raise AssertionError(f"inspect reported a non-DecodeError: {report.error!r}")
            return report

        return run

    openers: dict[tuple[str, str], Any] = {}

    def open_with(backend: str) -> Callable[[bytes, Any], Any]:
        """A station's opener (``PacketCodec.lone_opener``) of a stream of bench-shaped packets."""

        def run(d: bytes, p: Any) -> Any:
            k = (p.name, backend)
            if k not in openers:
                opener = None
                if p.cipher is Cipher.GCM:
                    c = codec(p, KEY, backend)
                    first = c.encode(Packet(bench_header(p, bytes(8)), (bench_message(p, b""),)), SOURCE)
                    lone = c.decode_lone(first, SOURCE)
                    opener = c.lone_opener(lone, SOURCE) if type(lone) is LoneMessage else None
                openers[k] = opener
            opener = openers[k]
            if opener is None:
                raise ConfigError(f"no opener for Pia {p.name}")
            return opener(d)

        return run

    def inflate(d: bytes, p: Any) -> Any:
        if p.zlib_flag is None:
            raise ConfigError("no zlib flag")
        return inflate_payload(Message(0x68, 0, d, flags=p.zlib_flag), p)

    from protocols.errors import DecodeError as DecodeErrorType

    targets: list[tuple[str, Callable[[bytes, Any], Any]]] = [
        ("codec.decode no key", decode_with(None, None)),
        ("codec.inspect no key", inspect_with(None, None)),
    ]
    for backend in available_backends():
        targets.append((f"codec.decode key {backend}", decode_with(KEY, backend)))
        targets.append((f"codec.inspect key {backend}", inspect_with(KEY, backend)))
        targets.append((f"codec.lone_opener key {backend}", open_with(backend)))
    targets += [
        ("decode_header", decode_header),
        ("sniff_header_format", lambda d, p: sniff_header_format(d)),
        ("decode_messages", decode_messages),
        ("inflate_payload", inflate),
        ("decode_segment", decode_segment),
        ("decode_bulk_ack", lambda d, p: decode_bulk_ack(d)),
    ]
    for proto, port in ((Proto.STATION, 0), (Proto.MESH, 0), (Proto.MESH, 1), (Proto.KEEP_ALIVE, 0), (Proto.RTT, 1), (Proto.LOCAL, 0)):
        targets.append((f"decode_payload {proto.value}:{port}", lambda d, p, pr=proto, po=port: decode_payload(pr, po, d, p)))
    targets += [
        ("lan decode_lan_message", lan_messages.decode_lan_message),
        ("lan BrowseRequest", lan.BrowseRequest.decode),
        ("lan BrowseReply", lan.BrowseReply.decode),
        ("lan LanSessionInfo", lan.LanSessionInfo.decode),
        ("lan LanNetworkProperty", lan.LanNetworkProperty.decode),
        ("lan ChallengeRequest", lambda d, p: lan.ChallengeRequest.decode(d)),
        ("lan ChallengeReply", lambda d, p: lan.ChallengeReply.decode(d)),
        ("lan LanSessionSearchCriteria", lambda d, p: lan_criteria.LanSessionSearchCriteria.decode(d)),
        ("lan LanSearchNetworkSetting", lan_criteria.LanSearchNetworkSetting.decode),
        ("ldn decode_application_data", ldn.decode_application_data),
        ("types station location", types.decode_station_location),
        ("types player info", types.decode_player_info),
        ("types mesh station info", types.decode_mesh_station_info),
        ("types session player info", types.decode_session_player_info),
        ("prudp HostHello", lambda d, p: HostHello.decode(d)),
    ]
    for name in VARIANTS:
        prudp = PrudpCodec(name, PRUDP_KEY)
        targets.append((f"prudp {name} decode", lambda d, p, c=prudp: c.decode(d)))
        targets.append((
            f"prudp {name} decode_datagram",
            lambda d, p, n=name: decode_datagram(d, n, PRUDP_KEY, aes_key=RENDEZVOUS_KEY, nex_streams={}),
        ))  # fmt: skip
    modules = {"attrs": attrs, "ConfigError": ConfigError, "DecodeError": DecodeErrorType}
    return targets, profiles, modules


def applicability(targets: list[tuple[str, Callable[[bytes, Any], Any]]], profiles: list[Any], config_error: type) -> list[list[bool]]:
    table = []
    for _, fn in targets:
        row = []
        for p in profiles:
            ok = True
            for probe in (b"", bytes(64)):
                try:
                    fn(probe, p)
                except config_error:
                    ok = False
                except Exception:  # noqa: BLE001 - only ConfigError matters here
                    pass
            row.append(ok)
        table.append(row)
    return table


def seed_corpus(directory: str, targets: list[tuple[str, Any]], profiles: list[Any]) -> int:
    """Write seed inputs (selector bytes + valid encodings) into *directory*."""
    import attrs

    from pianode.bench.codec import bench_header, bench_message
    from protocols.errors import ConfigError, EncodeError
    from protocols.pia.message import encode_messages
    from protocols.pia.nonce import nonce_builder
    from protocols.pia.packet import Packet, PacketCodec
    from protocols.pia.packet_values import LoneMessage
    from protocols.pia.versions import Cipher, NetworkType
    from protocols.prudp.codec import PacketCodec as PrudpCodec
    from protocols.prudp.packet import Flag, PacketType, PrudpPacket

    count = 0

    def write(target_prefix: str, profile_index: int, data: bytes) -> None:
        nonlocal count
        for t, (name, _) in enumerate(targets):
            if name.startswith(target_prefix):
                with open(os.path.join(directory, f"seed-{count:05d}"), "wb") as f:
                    f.write(bytes([t, profile_index]) + data)
                count += 1

    for i, p in enumerate(profiles):
        if p.cipher is Cipher.ECB_HMAC:
            sealing = PacketCodec(p, KEY)
        else:
            sealing = PacketCodec(p, KEY, nonce_builder(p, NetworkType.LAN))
        for size in (0, 7, 64):
            m = bench_message(p, bytes(range(size)))
            for encrypted in (True, False):
                header = attrs.evolve(bench_header(p, size.to_bytes(8, "big")), encrypted=encrypted)
                try:
                    datagram = sealing.encode(Packet(header, (m, m), (1, 2) if p.footer != "none" else ()), SOURCE)
                except (EncodeError, ConfigError):
                    continue
                write("codec", i, datagram)
                write("decode_header", i, datagram)
                try:
                    lone = sealing.encode(Packet(header, (m,)), SOURCE)  # a packet of an opener's stream
                except (EncodeError, ConfigError):
                    continue
                write("codec.lone_opener", i, lone)
            write("decode_messages", i, encode_messages((m, m), p))
    samples = [
        PrudpPacket(source=0xAF, destination=0xA1, type=PacketType.PING, flags=Flag.NEED_ACK | Flag.HAS_SIZE, sequence_id=3),
        PrudpPacket(source=0xAF, destination=0xA1, type=PacketType.DATA, flags=Flag.NEED_ACK | Flag.RELIABLE | Flag.HAS_SIZE,
                    sequence_id=9, fragment_id=0, payload=b"\x00hello"),
    ]  # fmt: skip
    for name, _ in targets:
        if not name.startswith("prudp ") or not name.endswith(" decode"):
            continue
        variant = name.split()[1]
        for sample in samples:
            for s in (sample, attrs.evolve(sample, signature=bytes(16))):
                try:
                    data = PrudpCodec(variant, PRUDP_KEY).encode(s)
                except (EncodeError, ConfigError, ValueError):
                    continue
                write(f"prudp {variant} ", 0, data)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fuzz.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=60, help="fuzzing time budget (default 60)")
    parser.add_argument("--target", default="", help="only targets whose name contains this text")
    parser.add_argument("--corpus", default=None, help="corpus directory (kept and grown; default: a temporary one)")
    parser.add_argument("--artifacts", default=".", help="where crashing inputs are written (default: here)")
    parser.add_argument("--seed", type=int, default=0, help="libFuzzer random seed (0 = time based)")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    parser.add_argument("--replay", nargs="+", metavar="FILE", help="run these inputs once each and report")
    args = parser.parse_args(argv)
    if args.seconds < 1 or args.seconds > 24 * 3600:
        parser.error("--seconds must be 1..86400")

    atheris = None if args.list or args.replay else _load_atheris()
    if atheris is not None:
        with atheris.instrument_imports():
            targets, profiles, modules = build_targets()
    else:
        targets, profiles, modules = build_targets()
    chosen = [t for t in targets if args.target in t[0]]
    if not chosen:
        parser.error(f"no target matches {args.target!r}")
    if args.list:
        for name, _ in chosen:
            print(name)
        return 0
    config_error, decode_error = modules["ConfigError"], modules["DecodeError"]
    usable = applicability(chosen, profiles, config_error)

    def one_input(data: bytes) -> None:
        if len(data) < 2:
            return
        t = data[0] % len(chosen)
        p = data[1] % len(profiles)
        if not usable[t][p]:
            return
        try:
            chosen[t][1](data[2:], profiles[p])
        except decode_error:
            pass
        except Exception as exc:
            raise AssertionError(f"{chosen[t][0]} (Pia {profiles[p].name}) raised {type(exc).__name__}: {exc}") from exc

    if args.replay:
        crashes = 0
        for path in args.replay:
            with open(path, "rb") as f:
                data = f.read()
            try:
                one_input(data)
            except AssertionError as exc:
                crashes += 1
                print(f"{path}: CRASH {exc}")
            else:
                print(f"{path}: ok")
        return 1 if crashes else 0

    assert atheris is not None
    corpus = args.corpus or tempfile.mkdtemp(prefix="pianode-fuzz-")
    os.makedirs(corpus, exist_ok=True)
    seeds = seed_corpus(corpus, chosen, profiles) if not os.listdir(corpus) else 0
    artifacts = os.path.join(os.path.abspath(args.artifacts), "")
    print(
        f"fuzzing {len(chosen)} targets x {len(profiles)} versions for {args.seconds} s;"
        f" corpus {corpus} ({seeds} seeds written); crashes go to {artifacts}",
        file=sys.stderr,
        flush=True,
    )
    libfuzzer_args = [
        sys.argv[0],
        f"-max_total_time={args.seconds}",
        "-timeout=10",
        "-rss_limit_mb=2048",
        "-max_len=2048",
        f"-artifact_prefix={artifacts}",
        f"-seed={args.seed}",
        "-print_final_stats=1",
        corpus,
    ]
    started = time.monotonic()
    atheris.Setup(libfuzzer_args, one_input)
    atheris.Fuzz()  # exits the process: 0 when the budget ran out, non-zero on a crash
    print(f"fuzzing ended after {time.monotonic() - started:.0f} s", file=sys.stderr)  # pragma: no cover
    return 0  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
