"""``pianode decode`` on captures as a console's network holds them: PRUDP to the game server and Pia between the
consoles in one file, and PRUDP whose access key the reader does not have.

The PRUDP packets are real traffic: the SoulCalibur VI SYN / SYN+ACK of spec prudp.md §8.3 (a Quazal title whose
checksums all verify with the key byte sum 0xB0), and the Ghost Recon captures of ../shared/captures/gro-prudp.
The Pia packet is the first datagram of the nDPI Splatoon 2 capture (header in its expected file).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lan_exchange import SMM2, LanHost, lan_exchange

from pianode.capture.decode import Decoder
from pianode.capture.pcap import PcapWriter, open_capture
from pianode.capture.session_file import load_session
from pianode.cli.main import main

SC6_SYN = bytes.fromhex("3f3120000000000000000000000040")
SC6_SYN_ACK = bytes.fromhex("313f48000000000000006c05dfbe000077")
SC6_KEY = "hex:b0"  # one byte whose sum is the SC6 key byte sum


def _first_pia(captures: Path) -> bytes:
    with open_capture(captures / "nDPI-nintendo.pcap") as cap:
        return next(d.data for d in cap if d.data[:4] == bytes.fromhex("32ab9864"))


def _mixed(tmp_path: Path, captures: Path) -> Path:
    path = tmp_path / "mixed.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        w.write_udp(SC6_SYN, "10.0.0.2:3074", "10.0.0.1:3074", time=1.0)
        w.write_udp(SC6_SYN_ACK, "10.0.0.1:3074", "10.0.0.2:3074", time=1.1)
        w.write_udp(_first_pia(captures), "192.168.12.114:52119", "91.8.243.35:49432", time=1.2)
    return path


def _rows(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    assert main(["decode", *argv, "--format", "jsonl"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_pia_in_a_prudp_capture_is_still_read_as_pia(
    tmp_path: Path, captures: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--prudp-variant names the game server's transport; a datagram with Pia's magic is Pia all the same (no v0
    packet starts 32 AB: its two stream types would differ, spec prudp.md §1.1), as the dissector reads it."""
    rows = _rows(capsys, str(_mixed(tmp_path, captures)), "--prudp-variant", "quazal-v0", "--access-key", SC6_KEY)
    assert [r["kind"] for r in rows] == ["prudp", "prudp", "pia"]
    assert [r["authenticated"] for r in rows[:2]] == [True, True]
    pia = rows[2]
    assert pia["error"] is None
    assert (pia["header"]["connection_id"], pia["header"]["packet_id"]) == (86, 971)
    assert (pia["header"]["source_timer"], pia["header"]["destination_timer"]) == (38401, 13280)


def _decode_all(path: Path, **session: object) -> list:
    dec = Decoder(load_session(None, session))
    with open_capture(path) as cap:
        return [dec.decode(d) for d in cap]


def test_prudp_without_the_access_key_is_not_checked_rather_than_failed(captures: Path) -> None:
    """No access key given: a checksum that needs one is neither good nor bad, and the result says why."""
    rows = _decode_all(captures / "gro-prudp" / "GRO_Backend_packetLog.jsonl", prudp={"variant": "quazal-v0"})
    assert len(rows) == 385
    assert {r.kind for r in rows} == {"prudp"}
    assert {r.authenticated for r in rows} == {None}
    assert {r.error for r in rows} == {None}
    assert all(p["checksum_ok"] is None for r in rows for p in r.prudp)
    assert {r.note for r in rows} == {"no access key given: the checksum is not checked (--access-key)"}
    # what needs no key is still read: RC4 "CD&ML" payloads (README §3: 187 DATA payloads on this file's stream 3)
    assert sum(1 for r in rows for p in r.prudp if p["type"] == "DATA" and p["plaintext"]) == 187


def test_keyless_streams_are_checked_without_the_access_key(captures: Path) -> None:
    """The DO and NAT streams' checksums use no key (S = 0, README §3): they verify with none given."""
    rows = _decode_all(captures / "gro-prudp" / "GRO_DedicatedServer_packetLog.jsonl", prudp={"variant": "quazal-v0"})
    checked = [p["checksum_ok"] for r in rows for p in r.prudp if p["source_stream_type"] in (1, 5)]
    assert checked and all(checked)


def test_summary_says_the_checksums_were_not_checked(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(captures / "gro-prudp" / "GRO_Backend_packetLog.jsonl"), "--prudp-variant", "quazal-v0"]
    assert main(["decode", *argv, "--format", "table"]) == 0
    out = capsys.readouterr().out
    assert "authenticated: 0 yes, 0 no, 385 not checked; 0 with errors" in out
    assert "-- no access key given: PRUDP checksums were not checked in 385 (--access-key)" in out
    assert "AUTH FAILED" not in out


@pytest.mark.parametrize("fmt", ["table", "jsonl"])
def test_flows_of_a_capture_without_pia_say_so(captures: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    """--flows follows Pia connection and packet ids; a capture of PRUDP alone has none, and an empty output with
    status 0 said nothing of what was read."""
    path = captures / "gro-prudp" / "GRO_Backend_packetLog.jsonl"
    assert main(["decode", str(path), "--prudp-variant", "quazal-v0", "--flows", "--format", fmt]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"pianode decode: {path}: no Pia flow (385 datagrams: 385 prudp)\n"


# --------------------------------------------------------------------------
# Two LAN sessions in one capture: a browse request is answered by every host of the game on the network (spec
# pia.md §6.2-§6.4), each with its own session key param; the browser joins one of them.



def _two_sessions(version: str) -> list[tuple[bytes, str, str]]:
    hosts = [LanHost(ip, fill, 0xB2D7C002 + fill, f"from {ip}".encode(), bytes([fill]) * 8)
             for ip, fill in (("192.168.1.20", 0x22), ("192.168.1.21", 0x33))]
    ex = lan_exchange(version, hosts)
    # The browser joined the second host; the first host's session goes on beside it.
    return [ex.request, *ex.replies, ex.data[1], ex.data[0], ex.data[1]]


@pytest.mark.parametrize("version", ["5.18", "5.45"])
def test_packets_of_either_advertised_lan_session_are_read(tmp_path: Path, version: str) -> None:
    path = tmp_path / "two.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        for i, (data, src, dst) in enumerate(_two_sessions(version)):
            w.write_udp(data, src, dst, time=float(i))
    rows = _decode_all(path, game_key=SMM2)
    assert [r.kind for r in rows] == ["lan-browse-request", "lan-browse-reply", "lan-browse-reply", "pia", "pia", "pia"]
    assert [r.authenticated for r in rows] == [True] * 6
    assert [bytes.fromhex(r.messages[0]["payload"]) for r in rows[3:]] == [
        b"from 192.168.1.21", b"from 192.168.1.20", b"from 192.168.1.21"]
    assert rows[1].note is not None and rows[1].note.startswith("session key param learned")
    assert rows[2].note is not None and rows[2].note.startswith("another session's key param learned")


def test_what_cannot_be_prudp_is_not_read_as_prudp(tmp_path: Path, captures: Path) -> None:
    """A capture's DNS and other UDP beside the game's PRUDP: a datagram of a well-known service's port, or whose
    virtual ports name two stream types (no source shows that: a server drops it, spec prudp.md §1.1), is not PRUDP
    unless its checksum says it is; the dissector leaves both to other protocols too."""
    with open_capture(captures / "nDPI-nintendo.pcap") as cap:
        dns = next(d for d in cap if d.dst is not None and d.dst.endswith(":53"))
    odd_ports = bytes.fromhex("3f5120000000000000000000000040")  # the SC6 SYN with a NAT-stream destination
    path = tmp_path / "beside.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        w.write_udp(dns.data, dns.src, dns.dst, time=1.0)
        w.write_udp(odd_ports, "10.0.0.2:3074", "10.0.0.1:3074", time=1.1)
        w.write_udp(SC6_SYN, "10.0.0.2:3074", "10.0.0.1:3074", time=1.2)
    for key in (SC6_KEY, ""):
        rows = _decode_all(path, prudp={"variant": "quazal-v0", "access_key": key})
        assert [r.kind for r in rows] == ["unknown", "unknown", "prudp"], key
        assert rows[0].note is not None and rows[0].note.endswith("UDP port 53 is DNS's")
        assert rows[1].error is not None and "two stream types" in rows[1].error
        assert rows[2].authenticated is (True if key else None)


# Spec prudp.md §8.1: the Terraria (Wii U) v1 SYN, access key "3d37fbdb".
TERRARIA_SYN = bytes.fromhex(
    "ead0011b0000afa1c0000000000047cdc13045c9fda980d5db81456feff1000404010000011000000000000000000000000000000000040100"
)


def test_a_v1_datagram_says_its_signature_is_not_checked(tmp_path: Path) -> None:
    """v1 has no checksum; what vouches for it is its HMAC-MD5 signature (spec §2.6), which the decoder checks only
    where the access key alone gives it: the rows say so, with or without the access key."""
    path = tmp_path / "v1.jsonl"
    path.write_text(json.dumps({"hex": TERRARIA_SYN.hex()}) + "\n")
    for key in ("3d37fbdb", ""):
        (r,) = _decode_all(path, prudp={"variant": "nintendo-v1", "access_key": key})
        # (a SYN's signature the access key alone gives: checked when the key is there, below)
        assert (r.kind, r.authenticated, r.error) == ("prudp", True if key else None, None)
        assert r.prudp[0]["type"] == "SYN" and r.prudp[0]["supported_functions"] == 0x104
        assert r.note == "PRUDP v1: no checksum, and a signature is checked only where the access key alone gives it (SYN)"


# --------------------------------------------------------------------------
# Packet signatures the access key alone gives (spec prudp.md §2.5, §2.6): checked; the others need the
# connection's signatures or its Kerberos session key, and are not judged.

FRIENDS_DATA = bytes.fromhex("afa162005a92f23c4a02000067e228b77cc7")  # §8.2, key "ridfebb9", sig v1
FRIENDS_EMPTY_ACK = bytes.fromhex("a1af12003c78563412020000bc")  # its ack: empty DATA signs 78 56 34 12
GAME_DATA = bytes.fromhex("afa1e2005a69c325b3020000050067e228b77ce3")  # §8.2, key "12345678", sig v0 (auth)


def _one_prudp(tmp_path: Path, data: bytes, variant: str, key: str) -> dict:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"hex": data.hex()}) + "\n")
    (r,) = _decode_all(path, prudp={"variant": variant, "access_key": key})
    return r


@pytest.mark.parametrize(("data", "variant", "key"), [
    (FRIENDS_DATA, "nintendo-v0-friends", "ridfebb9"),
    (FRIENDS_EMPTY_ACK, "nintendo-v0-friends", "ridfebb9"),
    (GAME_DATA, "nintendo-v0", "12345678"),
    (TERRARIA_SYN, "nintendo-v1", "3d37fbdb"),
    (TERRARIA_SYN, "nintendo-v0", "3d37fbdb"),  # a NEX v0 server's socket takes v1 too (§2.3)
])  # fmt: skip
def test_signatures_the_access_key_gives_are_checked(tmp_path: Path, data: bytes, variant: str, key: str) -> None:
    r = _one_prudp(tmp_path, data, variant, key)
    assert [p["signature_ok"] for p in r.prudp] == [True]
    flipped = bytearray(data)
    flipped[6] ^= 0x01  # a byte of the signature
    if data[:2] != b"\xea\xd0":  # v0: the 1-byte checksum made again (spec §2.4), so only the signature is wrong
        body = bytes(flipped[:-1])
        words = sum(int.from_bytes(body[i : i + 4], "little") for i in range(0, len(body) - len(body) % 4, 4))
        rest = body[len(body) - len(body) % 4 :]
        flipped[-1] = (sum(words.to_bytes(8, "little")[:4]) + sum(rest) + sum(key.encode())) & 0xFF
    bad = _one_prudp(tmp_path, bytes(flipped), variant, key)
    assert [p["checksum_ok"] for p in bad.prudp] == [None if data[:2] == b"\xea\xd0" else True]
    if data[:2] == b"\xea\xd0" or variant.endswith("friends"):  # the key alone gives it: a mismatch says so
        assert [p["signature_ok"] for p in bad.prudp] == [False]
        assert bad.error is not None and "signature" in bad.error
    else:  # a game's DATA on a secure connection signs with the session key too: no verdict without it
        assert [p["signature_ok"] for p in bad.prudp] == [None]


def test_signatures_that_need_the_connection_are_not_judged(tmp_path: Path, captures: Path) -> None:
    rows = _decode_all(captures / "gro-prudp" / "GRO_Backend_packetLog.jsonl",
                       prudp={"variant": "quazal-v0", "access_key": "8dtRv2oj"})
    assert {p["signature_ok"] for r in rows for p in r.prudp} == {None}  # Quazal: the peer's connection signature
    assert _one_prudp(tmp_path, FRIENDS_DATA, "nintendo-v0-friends", "").prudp[0]["signature_ok"] is None
