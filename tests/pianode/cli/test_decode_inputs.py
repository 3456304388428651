"""``pianode decode``: inputs and settings that are wrong are said in one line and exit 2.

An input with nothing in it (no bytes, or text with no datagram line) is bad input, said even with ``-q``;
a pcap with a header and no records is a capture, if an empty one (exit 0 and one line; with ``-q``, which
prints only the result, nothing).  Session values mean one thing whatever their spelling: ``allow_nearest`` is a JSON
boolean, an integer is decimal digits or hex digits after ``0x``.  Each run says at most one line on stderr.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pianode.capture.pcap import PcapWriter
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.nonce import nonce_builder
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.versions import Proto, profile_for

KEY = bytes.fromhex("00112233445566778899aabbccddeeff")


def _decode(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pianode", "decode", *argv], input=stdin, capture_output=True,
                          text=True, timeout=120, check=False)


def _one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err[:-1]


def _pcap_header_only(path: Path) -> Path:
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    return path


def _recording(tmp_path: Path) -> Path:
    """A 5.18 LAN capture of two sealed packets, with its session file beside it as a recording has."""
    profile = profile_for("5.18")
    codec = PacketCodec(profile, KEY, nonce_builder(profile, "lan"))
    message = Message(protocol_type=profile.protocol_id(Proto.UNRELIABLE), protocol_port=0, payload=b"hello",
                      flags=profile.bitmap_flag, destination=2, source_constant_id=0x1122)  # fmt: skip
    path = tmp_path / "rec.pcap"
    with path.open("wb") as f:
        writer = PcapWriter(f)
        for i in (1, 2):
            sealed = codec.encode(Packet(PacketHeader(True, i, 3, nonce=i.to_bytes(8, "big")), (message,)), "127.0.0.1")
            writer.write_udp(sealed, "127.0.0.1:49152", "127.0.0.2:49152", time=i / 10)
    (tmp_path / "rec.session.json").write_text(json.dumps({"version": "5.18", "network": "lan", "session_key": KEY.hex()}))
    return path


# ---------------------------------------------------------------- inputs with nothing in them


@pytest.mark.parametrize("quiet", [(), ("-q",)], ids=["plain", "quiet"])
@pytest.mark.parametrize("kind", ["zero-byte file", "/dev/null", "empty standard input", "blank lines and comments"])
def test_an_input_with_nothing_in_it_is_refused(tmp_path: Path, kind: str, quiet: tuple[str, ...]) -> None:
    stdin = None
    if kind == "zero-byte file":
        name = str(tmp_path / "empty.pcap")
        Path(name).write_bytes(b"")
        why = "the input is empty (0 bytes)"
    elif kind == "/dev/null":
        name, why = "/dev/null", "the input is empty (0 bytes)"
    elif kind == "empty standard input":
        name, stdin, why = "-", "", "the input is empty (0 bytes)"
    else:
        name = str(tmp_path / "lines.txt")
        Path(name).write_text("\n# a comment\n   \n\n")
        why = "no datagram lines in it (only blank lines and comments)"
    done = _decode(name, "--format", "jsonl", *quiet, stdin=stdin)
    assert done.returncode == 2 and done.stdout == ""
    shown = "<stdin>" if name == "-" else name
    assert _one_line(done.stderr) == f"pianode decode: {shown}: nothing to decode: {why}"


def test_an_empty_input_is_refused_before_an_export_is_written(tmp_path: Path) -> None:
    out = tmp_path / "out.pcapng"
    done = _decode("/dev/null", "--decrypted-pcap", str(out))
    assert done.returncode == 2 and done.stdout == ""
    assert _one_line(done.stderr) == "pianode decode: /dev/null: nothing to decode: the input is empty (0 bytes)"
    assert not out.exists()


def test_a_pcap_with_no_records_is_an_empty_capture(tmp_path: Path) -> None:
    path = _pcap_header_only(tmp_path / "none.pcap")
    done = _decode(str(path), "--format", "jsonl")
    assert done.returncode == 0 and done.stdout == ""
    assert _one_line(done.stderr) == f"pianode decode: {path}: no UDP datagrams (a pcap file with no packet records)"
    quiet = _decode(str(path), "--format", "jsonl", "-q")  # only the result, and it is empty
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""
    table = _decode(str(path), "--format", "table", "-q")  # the table's summary is the result, on stdout
    assert table.returncode == 0 and table.stdout.startswith("-- 0 datagrams (none)")


# ---------------------------------------------------------------- session values of one meaning


@pytest.mark.parametrize(("value", "shown"), [("no", "'no'"), (5, "5"), ("false", "'false'"), ([0], "[0]")])
def test_allow_nearest_must_be_a_json_boolean(tmp_path: Path, value: object, shown: str) -> None:
    cap = _pcap_header_only(tmp_path / "none.pcap")
    session = tmp_path / "s.json"
    session.write_text(json.dumps({"version": "5.99", "allow_nearest": value}))
    done = _decode(str(cap), "--session", str(session), "--format", "jsonl")
    assert done.returncode == 2 and done.stdout == ""
    assert _one_line(done.stderr) == f"pianode decode: allow_nearest must be true or false (a JSON boolean), got {shown}"
    session.write_text(json.dumps({"version": "5.99", "allow_nearest": True}))
    assert _decode(str(cap), "--session", str(session), "--format", "jsonl").returncode == 0


@pytest.mark.parametrize("text", ["abc", "a1b2c3d4", "12ab", "1_000"])
def test_a_network_id_is_decimal_or_0x_hex_in_the_file_and_the_flag(tmp_path: Path, text: str) -> None:
    cap = _pcap_header_only(tmp_path / "none.pcap")
    flag = _decode(str(cap), "--network-id", text, "--format", "jsonl")
    assert flag.returncode == 2 and flag.stdout == ""
    rule = f"must be an integer (decimal digits, or hex digits after 0x), got {text!r}"
    assert _one_line(flag.stderr) == f"pianode decode: --network-id {rule}"
    session = tmp_path / "s.json"
    session.write_text(json.dumps({"network_id": text}))
    file = _decode(str(cap), "--session", str(session), "--format", "jsonl")
    assert file.returncode == 2 and file.stdout == ""
    assert _one_line(file.stderr) == f"pianode decode: network_id {rule}"


# ---------------------------------------------------------------- one line, in the flags' words


def test_an_unused_hmac_key_and_the_session_file_left_out_are_one_line(tmp_path: Path) -> None:
    cap = _recording(tmp_path)
    done = _decode(str(cap), "--hmac-key", "abc", "--format", "jsonl")
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 2
    line = _one_line(done.stderr)
    assert line.startswith("pianode decode: --hmac-key was not used: the capture's Pia packets were read as ")
    assert line.endswith(f"; not using {tmp_path / 'rec.session.json'} beside the capture: --hmac-key given"
                         f" (add --session {tmp_path / 'rec.session.json'} for both)")


def test_a_bad_access_key_names_the_flag(tmp_path: Path) -> None:
    cap = _pcap_header_only(tmp_path / "none.pcap")
    done = _decode(str(cap), "--access-key", "hex:zz", "--prudp-variant", "quazal-v0")
    assert done.returncode == 2 and done.stdout == ""
    assert _one_line(done.stderr) == "pianode decode: --access-key must be hex digits, got 'zz'"
