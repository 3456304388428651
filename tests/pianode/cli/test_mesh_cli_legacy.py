"""`pianode mesh` in Pia 3.3-5.6: every documented version forms a mesh and exits 0, a recording of each
generation decodes completely with `pianode decode`, and what cannot run is refused in one line."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from cli_processes import pianode, summary

from protocols.pia.versions import DOCUMENTED_VERSIONS

LEGACY = [f"{a}.{b}" for a, b in DOCUMENTED_VERSIONS if (a, b) <= (5, 6)]




@pytest.mark.parametrize("version", LEGACY)
def test_mesh_of_three_forms_in_every_version(version: str) -> None:
    out = pianode("mesh", "-n", "3", "--version", version, "--duration", "0.2", "--messages", "3", "--format", "jsonl")
    assert out.returncode == 0, out.stdout + out.stderr
    s = summary(out)
    assert s["ok"] and s["nodes"] == 3 and s["version"] == version
    # No LAN mode before 5.2 (spec §5.1): those run on NEX unless told otherwise.
    assert s["network"] == ("nex" if version.startswith(("3.", "4.")) else "lan")
    assert s["reliable"]["delivered"] == s["reliable"]["expected"] == 3 * 2 * 3


@pytest.mark.parametrize(("version", "network"), [("3.10", "nex"), ("4.10", "ldn"), ("5.2", "lan"), ("5.6", "ldn")])
def test_record_of_each_generation_decodes_completely(tmp_path: pathlib.Path, version: str, network: str) -> None:
    pcap = tmp_path / "x.pcap"
    out = pianode(
        "mesh", "-n", "3", "--version", version, "--network", network, "--record", str(pcap), "--leave",
        "--duration", "0.5", "--messages", "3", "--format", "jsonl",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    recorded = summary(out)["record"]["datagrams"]
    dec = pianode("decode", str(pcap), "--session", str(tmp_path / "x.session.json"), "--format", "jsonl")
    assert dec.returncode == 0, dec.stderr
    decoded = [json.loads(line) for line in dec.stdout.splitlines() if line.strip()]
    rows = [row for row in decoded if row["kind"] != "ldn-discovery"]
    assert len(decoded) - len(rows) == summary(out)["record"]["link_frames"]
    assert len(rows) == recorded > 0
    for row in rows:
        assert row["kind"] == "pia" and row["profile"] == version and not row["profile_assumed"]
        assert row["authenticated"] is True and row["error"] is None, row
        assert row["header"]["format"] == "H-A"
        assert row["header"]["encrypted"] is (network != "ldn")  # local play up to 5.6 is plain and signed
        assert row["messages"], row
        for m in row["messages"]:
            assert m["protocol"] is not None, m
    protocols = {m["protocol"] for row in rows for m in row["messages"]}
    assert {"station", "mesh", "rtt", "reliable", "unreliable"} <= protocols


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--version", "4.10", "--network", "lan"), "has no LAN mode (spec §5.1"),
        (("--version", "5.6", "--discovery", "on"), "session key param only from 5.7 (spec §6.3)"),
        (("--version", "4.10", "--network", "ldn", "--discovery", "on"), "does not document (§7.2"),
    ],
)
def test_what_cannot_run_is_refused_in_one_line(argv: tuple[str, ...], needle: str) -> None:
    out = pianode("mesh", "-n", "3", *argv)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.stderr


@pytest.mark.parametrize("version", ["5.2", "5.6"])
def test_lan_host_and_join_refuse_a_version_whose_lan_discovery_gives_no_key(version: str) -> None:
    # Found by a browser, such a host could only answer without a key, and it ended on the first request.
    key = "0123456789abcdef0123456789abcdef"
    for argv in (("lan", "host", "--game-key", key, "--version", version, "--duration", "1"),
                 ("lan", "join", "--game-key", key, "--version", version, "--timeout", "1")):
        out = pianode(*argv)
        assert out.returncode == 2, argv
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "session key param only from 5.7 (spec §6.3)" in lines[0], argv
        assert out.stdout == ""


def test_node_runs_3ds_versions_on_nex_by_default() -> None:
    out = pianode("node", "--create", "--version", "4.10", "--bind", "127.0.0.1", "--duration", "0.3", "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    created = json.loads(out.stdout.splitlines()[0])
    assert created["event"] == "created" and created["network"] == "nex" and "--network nex" in created["join_with"]
