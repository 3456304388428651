"""``pianode mesh`` with Pia 6.x as real processes: every runnable 6.x version forms a 3-station mesh, and
recordings of LDN 6.20, LDN 6.30, LAN 6.20 (discovery on port 35000) and NPLN 6.30 are opened by tshark, decoded
completely by ``pianode decode`` and read byte for byte by an independent reader written from the spec.
"""

from __future__ import annotations

import collections
import json
import pathlib
import shutil
import subprocess
import sys
from typing import Any

import pytest
from cli_processes import pianode, summary

from pia6_reader import MAGIC, Pia6Reader, read_browse, udp_datagrams
from protocols.pia.versions import DOCUMENTED_VERSIONS

SIX = [f"{a}.{b}" for a, b in DOCUMENTED_VERSIONS if a == 6]




@pytest.mark.parametrize("version", SIX)
def test_every_documented_6x_version_forms_a_three_station_mesh(version: str) -> None:
    out = pianode("mesh", "-n", "3", "--version", version, "--duration", "0.2", "--messages", "3", "--format", "jsonl")
    assert out.returncode == 0, out.stdout + out.stderr
    s = summary(out)
    assert s["ok"] is True and s["nodes"] == 3 and s["version"] == version
    # LAN where the spec documents 6.x LAN (6.16-6.30), LDN after (spec §3.2).
    assert s["network"] == ("lan" if tuple(map(int, version.split("."))) <= (6, 30) else "ldn")
    assert s["reliable"]["delivered"] == s["reliable"]["expected"] == 3 * 2 * 3


def test_an_unrunnable_pair_is_refused_in_one_line() -> None:
    out = pianode("mesh", "--version", "6.32", "--network", "lan")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        "pianode mesh: Pia 6.32 on lan: the spec gives the 6.x LAN nonce (§3.2) and browse formats (§6.2-§6.3) "
        "for 6.16-6.30 only; use --network ldn\n"
    )


def test_npln_is_handed_over_not_discovered() -> None:
    out = pianode("mesh", "--version", "6.20", "--network", "npln", "--discovery", "on")
    assert (out.returncode, out.stderr) == (
        2, "pianode mesh: NPLN sessions are matched by a game server: --discovery applies to lan and ldn\n")


@pytest.mark.parametrize(("version", "network"), [("6.20", "ldn"), ("6.30", "ldn"), ("6.20", "lan"), ("6.30", "npln")])
def test_recording_decodes_completely_and_an_independent_reader_walks_every_datagram(
    tmp_path: pathlib.Path, version: str, network: str
) -> None:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.fail("tshark is not installed: CI installs it (scripts/setup)")
    pcap = tmp_path / "x.pcap"
    out = pianode("mesh", "--version", version, "--network", network, "--record", str(pcap),
                  "--duration", "0.3", "--messages", "5", "--format", "jsonl")  # fmt: skip
    assert out.returncode == 0, out.stderr
    recorded = summary(out)["record"]["datagrams"]
    session_path = tmp_path / "x.session.json"
    session = json.loads(session_path.read_text())
    # tshark opens it.
    fields = subprocess.run([tshark, "-r", str(pcap), "-T", "fields", "-e", "udp.length"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert fields.returncode == 0, fields.stderr
    assert len([line for line in fields.stdout.splitlines() if line]) == recorded
    # pianode decode: every datagram authenticates, every message of pianode's session management decodes.
    dec = pianode("decode", str(pcap), "--session", str(session_path), "--format", "jsonl")
    assert dec.returncode == 0, dec.stderr
    decoded = [json.loads(line) for line in dec.stdout.splitlines() if line.strip()]
    rows = [row for row in decoded if row["kind"] != "ldn-discovery"]
    assert len(decoded) - len(rows) == summary(out)["record"]["link_frames"]
    assert len(rows) == recorded
    assert all(row["authenticated"] is True and row["error"] is None for row in rows)
    protocols = collections.Counter()
    for row in rows:
        for m in row.get("messages") or []:
            protocols[m["protocol"]] += 1
            assert "decoded_error" not in m
            if m["protocol"] in ("station (pianode)", "mesh (pianode)", "rtt"):
                assert "decoded" in m
    assert None not in protocols
    assert {"station (pianode)", "mesh (pianode)", "reliable", "unreliable", "rtt"} <= set(protocols)
    # The independent reader: browse exchanges (LAN) and every Pia datagram, byte for byte.
    reader = Pia6Reader(session)
    requests: dict[tuple[str, int], bytes] = {}
    pia = browses = footers = 0
    for src, sport, dst, dport, data in udp_datagrams(pcap):
        if data[:4] == MAGIC:
            walked = reader.read(src, dst, data)
            assert walked.messages
            pia += 1
            footers += bool(walked.footer)
        elif dport == 35000:
            requests[(src, sport)] = data
        else:
            assert network == "lan" and (dst, dport) in requests
            found = read_browse((6, 20), bytes.fromhex(session["game_key"]), "127.255.255.255",
                                requests[(dst, dport)], data)  # fmt: skip
            assert found.session_key.hex() == session["session_key"]
            browses += 1
    assert footers > 0
    assert pia + len(requests) + browses == recorded
    if network == "lan":
        assert browses == len(requests) == 3  # three joiners, each found the host on port 35000
