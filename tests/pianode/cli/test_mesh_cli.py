"""``pianode mesh`` and ``pianode node`` as real processes on loopback.

The default 4-node demo, the 32-station run checked through its JSON summary,
a run with injected faults and one with the host leaving, four ``pianode node``
processes building one mesh, a ``--record`` capture read by tshark and fully
authenticated by ``pianode decode``, and bad flags (exit 2, one line on stderr).
"""

from __future__ import annotations

import collections
import json
import pathlib
import re
import shutil
import subprocess
import sys
import time
from typing import Any

import pytest
from cli_processes import kill_leftovers, pianode, summary
from loopback_addresses import free_port

from pianode.cli.main import main


KEY = "8899aabbccddeeff0011223344556677"




# ---------------------------------------------------------------- pianode mesh


def test_mesh_without_arguments_forms_four_nodes_within_ten_seconds(tmp_path: pathlib.Path) -> None:
    started = time.monotonic()
    out = pianode("mesh", timeout=10, cwd=tmp_path)
    elapsed = time.monotonic() - started
    assert out.returncode == 0, out.stdout + out.stderr
    assert elapsed < 10
    assert out.stderr == ""
    rows = re.findall(r"^\s*(\d+) (\*| ) +(127\.0\.0\.\d+):(\d+) ", out.stdout, re.M)
    assert sorted(int(r[0]) for r in rows) == [0, 1, 2, 3]
    assert [r[0] for r in rows if r[1] == "*"] == ["0"]
    assert len({r[2] for r in rows}) == 4  # each node on its own address
    m = re.search(r"reliable: (\d+)/(\d+) delivered, 0 duplicates, 0 out of order", out.stdout)
    assert m and m[1] == m[2] and int(m[1]) > 0
    assert "result: OK" in out.stdout


def test_mesh_of_32_every_station_everything_once_in_order() -> None:
    out = pianode("mesh", "-n", "32", "--format", "jsonl", timeout=60)
    assert out.returncode == 0, out.stderr
    s = summary(out)
    assert s["nodes"] == 32 and s["ok"] is True and s["problems"] == []
    stations = s["stations"]
    assert sorted(row["index"] for row in stations) == list(range(32))
    assert len({row["address"].split(":")[0] for row in stations}) == 32
    assert len({row["constant_id"] for row in stations}) == 32
    assert [row["index"] for row in stations if row["host"]] == [s["host_index"]]
    rel = s["reliable"]
    # Each of the 32 senders addressed 31 connected stations with --messages (20) messages:
    # every node saw all the others.
    assert rel["expected"] == 32 * 31 * 20
    assert rel["delivered"] == rel["expected"]
    assert rel["duplicates"] == 0 and rel["out_of_order"] == 0
    assert s["host_changes"] == []
    assert s["drops"] == {}


def test_mesh_with_loss_duplication_and_reordering() -> None:
    out = pianode(
        "mesh", "--version", "5.29", "--loss", "0.1", "--dup", "0.1", "--reorder", "0.1", "--seed", "4",
        "--duration", "0.5", "--format", "jsonl", timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    s = summary(out)
    assert s["ok"] is True and s["nodes"] == 4
    assert s["faults"]["lost"] > 0 and s["faults"]["duplicated"] > 0 and s["faults"]["reordered"] > 0
    rel = s["reliable"]
    assert rel["expected"] == 4 * 3 * 20 and rel["delivered"] == rel["expected"]
    assert rel["duplicates"] == 0 and rel["out_of_order"] == 0
    assert sum(row["lost"] for row in s["stations"]) > 0  # data segments were retransmitted


def test_mesh_host_leaves_and_the_rest_keep_exchanging() -> None:
    out = pianode("mesh", "--leave-host", "--duration", "0.3", "--format", "jsonl", timeout=60)
    assert out.returncode == 0, out.stderr
    s = summary(out)
    assert s["ok"] is True
    # Three stations each report the change from host 0 to the lowest remaining index, 1.
    assert sorted(s["host_changes"]) == [f"station {i}: 0 -> 1" for i in (1, 2, 3)]
    assert s["host_index"] == 1
    rel = s["reliable"]
    assert rel["delivered"] == rel["expected"] == 4 * 3 * 20 + 3 * 2 * 10


def test_record_is_read_by_tshark_and_every_datagram_authenticates(tmp_path: pathlib.Path) -> None:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.fail("tshark is not installed: CI installs it (apt-get install tshark)")
    pcap = tmp_path / "out.pcap"
    out = pianode("mesh", "--record", str(pcap), "--duration", "0.3", "--messages", "5", "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    s = summary(out)
    session = tmp_path / "out.session.json"
    assert s["record"] == {"pcap": str(pcap), "session": str(session), "datagrams": s["record"]["datagrams"],
                           "link_frames": 0}
    recorded = s["record"]["datagrams"]
    assert recorded > 100
    # tshark opens it and sees UDP between the four loopback addresses.
    fields = subprocess.run(
        [tshark, "-r", str(pcap), "-T", "fields", "-e", "ip.src", "-e", "ip.dst", "-e", "udp.length"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert fields.returncode == 0, fields.stderr
    frames = [line.split("\t") for line in fields.stdout.splitlines() if line]
    assert len(frames) == recorded
    addresses = {f[0] for f in frames} | {f[1] for f in frames}
    # (127.255.255.255: the joiners' LAN browse requests; the recording includes discovery)
    assert addresses == {f"127.0.0.{i}" for i in range(1, 5)} | {"127.255.255.255"}
    assert all(int(f[2]) > 8 for f in frames)
    # pianode decode authenticates every one of them with the session file.
    assert json.loads(session.read_text())["session_key"]
    dec = pianode("decode", str(pcap), "--session", str(session), "--format", "jsonl")
    assert dec.returncode == 0, dec.stderr
    rows = [json.loads(line) for line in dec.stdout.splitlines() if line.strip()]
    assert len(rows) == recorded
    assert all(row["authenticated"] is True and row["error"] is None for row in rows)
    kinds = collections.Counter(row["kind"] for row in rows)
    assert kinds["lan-browse-request"] >= 3 and kinds["lan-browse-reply"] >= 3  # the discovery, challenge verified
    assert kinds["pia"] == recorded - kinds["lan-browse-request"] - kinds["lan-browse-reply"]
    assert all(row["header"]["encrypted"] is True for row in rows if row["kind"] == "pia")


def test_decode_of_a_recording_finds_its_session_file_beside_it(tmp_path: pathlib.Path) -> None:
    pcap = tmp_path / "rec.pcap"
    out = pianode("mesh", "-n", "3", "--record", str(pcap), "--duration", "0.3", "--messages", "3", "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    session = tmp_path / "rec.session.json"
    recorded = summary(out)["record"]["datagrams"]

    # No flags: the recording's own settings, named on stderr; every datagram authenticates.
    dec = pianode("decode", str(pcap), "--format", "jsonl")
    assert dec.returncode == 0, dec.stderr
    assert dec.stderr.splitlines() == [
        f"pianode decode: session settings from {session}, beside the capture (--session FILE for others)"
    ]
    rows = [json.loads(line) for line in dec.stdout.splitlines() if line.strip()]
    assert len(rows) == recorded and all(row["authenticated"] is True for row in rows)

    # A settings flag: only what was given; stderr says the file beside it is left out (in JSON Lines too,
    # which has no summary), and the table's summary names the file that would authenticate.
    left_out = (f"pianode decode: not using {session} beside the capture: --version given "
                f"(add --session {session} for both)")  # fmt: skip
    table = pianode("decode", str(pcap), "--version", "5.29", "--format", "table")
    assert table.returncode == 0, table.stderr
    assert table.stderr.splitlines() == [left_out]
    assert f"no key given: encrypted bodies are not shown (--session {session}, beside the capture)" in table.stdout
    lines = pianode("decode", str(pcap), "--version", "5.18", "--format", "jsonl")
    assert lines.returncode == 0 and lines.stderr.splitlines() == [left_out.replace("5.29", "5.18")]
    both = pianode("decode", str(pcap), "--version", "5.18", "--session", str(session), "--format", "jsonl")
    assert both.returncode == 0 and both.stderr == "", both.stderr
    assert all(json.loads(line)["authenticated"] is True for line in both.stdout.splitlines() if line.strip())

    # A file of that name that is not settings: said in one line, left out, and the decode goes on.
    session.write_text("{not json")
    bad = pianode("decode", str(pcap), "--format", "jsonl")
    assert bad.returncode == 0, bad.stderr
    assert len(bad.stderr.splitlines()) == 1 and bad.stderr.startswith(f"pianode decode: not using {session} beside the capture: ")
    rows = [json.loads(line) for line in bad.stdout.splitlines() if line.strip()]
    assert len(rows) == recorded and not any(row["authenticated"] is True for row in rows)


@pytest.mark.parametrize(("version", "used"), [("5.18", False), ("5.6", True)])
def test_decode_says_when_the_hmac_key_it_was_given_did_nothing(tmp_path: pathlib.Path, version: str, used: bool) -> None:
    # Only Pia 5.6 and older sign packets with HMAC-MD5: for later versions --hmac-key changes nothing,
    # which stderr says (naming the versions read), and the decode goes on with the session key.
    pcap = tmp_path / "rec.pcap"
    out = pianode("mesh", "-n", "2", "--version", version, "--record", str(pcap), "--duration", "0.2",
                  "--messages", "2", "--format", "jsonl")  # fmt: skip
    assert out.returncode == 0, out.stderr
    session = tmp_path / "rec.session.json"
    dec = pianode("decode", str(pcap), "--session", str(session), "--hmac-key", "hex:" + "ab" * 16, "--format", "jsonl")
    assert dec.returncode == 0, dec.stderr
    note = (f"pianode decode: --hmac-key was not used: the capture's Pia packets were read as {version}, which seal"
            " with AES-GCM under the session key (HMAC-MD5 signs Pia 5.6 and older)")  # fmt: skip
    assert dec.stderr.splitlines() == ([] if used else [note])
    rows = [json.loads(line) for line in dec.stdout.splitlines() if line.strip()]
    assert rows and {row["authenticated"] for row in rows} == ({False} if used else {True})


@pytest.mark.parametrize(("version", "network"), [("5.29", "nex"), ("5.18", "ldn")])
def test_record_decodes_for_other_versions_and_networks(tmp_path: pathlib.Path, version: str, network: str) -> None:
    pcap = tmp_path / "x.pcap"
    out = pianode(
        "mesh", "-n", "3", "--version", version, "--network", network, "--record", str(pcap),
        "--duration", "0.2", "--messages", "3", "--format", "jsonl",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    recorded = summary(out)["record"]["datagrams"]
    dec = pianode("decode", str(pcap), "--session", str(tmp_path / "x.session.json"), "--format", "jsonl")
    assert dec.returncode == 0, dec.stderr
    decoded = [json.loads(line) for line in dec.stdout.splitlines() if line.strip()]
    rows = [row for row in decoded if row["kind"] != "ldn-discovery"]
    assert len(rows) == recorded > 0
    assert all(row["authenticated"] is True and row["error"] is None for row in rows)
    # LDN discovery (adverts, connects, replies) is in the recording as non-IP link frames that decode reads.
    link = [row for row in decoded if row["kind"] == "ldn-discovery"]
    assert len(link) == summary(out)["record"]["link_frames"] and all(row["error"] is None for row in link)
    assert bool(link) is (network == "ldn")


@pytest.mark.parametrize("fanout", ["auto", "unicast"])
def test_group_packets_go_once_to_the_broadcast_address(tmp_path: pathlib.Path, fanout: str) -> None:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.fail("tshark is not installed: CI installs it (apt-get install tshark)")
    pcap = tmp_path / "g.pcap"
    out = pianode(
        "mesh", "-n", "4", "--version", "5.29", "--fanout", fanout, "--record", str(pcap),
        "--duration", "0.2", "--messages", "4", "--format", "jsonl",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    fields = subprocess.run(
        [tshark, "-r", str(pcap), "-T", "fields", "-e", "ip.src", "-e", "ip.dst", "-e", "udp.dstport"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert fields.returncode == 0, fields.stderr
    # Group packets to the broadcast address (not the LAN browse requests, which go to port 30000).
    rows3 = [line.split("\t") for line in fields.stdout.splitlines() if line]
    broadcasts = [src for src, dst, port in rows3 if dst == "127.255.255.255" and port != "30000"]
    if fanout == "auto":
        # Every station's unreliable broadcasts: one datagram each, to the broadcast address (spec §1.6).
        assert sorted(set(broadcasts)) == [f"127.0.0.{i}" for i in range(1, 5)]
        assert len(broadcasts) >= 4 * 4
    else:
        assert broadcasts == []
    dec = pianode("decode", str(pcap), "--session", str(tmp_path / "g.session.json"), "--format", "jsonl")
    rows = [json.loads(line) for line in dec.stdout.splitlines() if line.strip()]
    assert rows and all(row["authenticated"] is True for row in rows)


def test_realtime_session_defaults_to_group_packets() -> None:
    out = pianode("mesh", "-n", "4", "--rate", "30", "--duration", "0.5", "--format", "jsonl")
    s = summary(out)
    # On time (exit 0) or, on a machine too busy for real time, LATE (exit 1): not a timing test.
    assert (out.returncode, s["result"]) in ((0, "OK"), (1, "LATE")), out.stdout + out.stderr
    assert s["version"] == "5.29"
    assert s["frames"]["delivered"] == s["frames"]["expected"] == 4 * 3 * 15


@pytest.mark.parametrize(
    ("argv", "duration", "frames_per_station"),
    [
        (("--rate", "1", "--duration", "3"), 3.0, 3),  # a frame a second: three of them, over three seconds
        (("--rate", "2", "--duration", "1.5"), 1.5, 3),  # frames at 0, 0.5 and 1 s of the session
        (("--messages", "0", "--duration", "2"), 2.0, None),  # nothing to send still lasts the duration
        (("--messages", "1", "--duration", "1.5"), 1.5, None),
    ],
)
def test_a_run_lasts_its_duration_after_the_mesh_formed(argv: tuple[str, ...], duration: float,
                                                         frames_per_station: int | None) -> None:
    out = pianode("mesh", "-n", "2", "--discovery", "off", *argv, "--format", "jsonl", timeout=60)
    s = summary(out)
    assert out.returncode == 0, out.stdout + out.stderr
    session = s["wall_time"] - s["formation_time"]
    assert duration <= session < duration + 3.0, s
    if frames_per_station is not None:
        assert s["frames"]["delivered"] == s["frames"]["expected"] == 2 * frames_per_station


# ---------------------------------------------------------------- pianode node


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_four_node_processes_form_a_mesh_and_exchange_data() -> None:
    ips = [f"127.0.0.{i}" for i in (121, 122, 123, 124)]  # a bare --bind IP takes any free port
    common = ["--session-key", KEY, "--send-interval", "0.2", "--format", "jsonl"]
    host = subprocess.Popen(
        [sys.executable, "-m", "pianode", "node", "--create", "--bind", ips[0], "--duration", "6", *common],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    joiners: list[subprocess.Popen[str]] = []
    try:
        assert host.stdout is not None
        created = json.loads(host.stdout.readline())
        assert created["event"] == "created"
        assert created["address"].startswith(ips[0] + ":") and created["session_key"] == KEY
        host_address = created["address"]
        for ip in ips[1:]:
            joiners.append(
                subprocess.Popen(
                    [sys.executable, "-m", "pianode", "node", "--join", host_address, "--bind", ip,
                     "--duration", "3.5", *common],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                )  # fmt: skip
            )
        outs = [p.communicate(timeout=30) for p in joiners]
        host_out, host_err = host.communicate(timeout=30)
    finally:
        kill_leftovers([host, *joiners])
    assert host.returncode == 0, host_err
    assert all(p.returncode == 0 for p in joiners), [e for _, e in outs]
    logs = [[created, *jsonl(host_out)]] + [jsonl(o) for o, _ in outs]
    joined = [next(e for e in log if e["event"] == "joined") for log in logs[1:]]
    assert sorted(e["station_index"] for e in joined) == [1, 2, 3]
    assert {e["host_index"] for e in joined} == {0}
    assert [e["address"].rsplit(":", 1)[0] for e in joined] == ips[1:]
    binds = [host_address] + [e["address"] for e in joined]
    index_of = {host_address: 0} | {e["address"]: e["station_index"] for e in joined}
    for log, bind in zip(logs, binds, strict=True):
        me = index_of[bind]
        others = set(index_of.values()) - {me}
        # Every node heard numbered reliable broadcasts from the three others.
        data = [e for e in log if e["event"] == "data"]
        assert {e["source"] for e in data} == others
        for src in others:
            seqs = [int(e["data"].rsplit("#", 1)[1]) for e in data if e["source"] == src]
            # A sender broadcasts to the stations connected at the time, so a
            # receiver may start past 0; from there nothing is missing or repeated.
            assert len(seqs) >= 3 and seqs == list(range(seqs[0], seqs[0] + len(seqs)))
            assert all(e["reliable"] for e in data)
            assert all(e["data"].startswith(f"hello {src} #") for e in data if e["source"] == src)
    for log, bind in zip(logs[1:], binds[1:], strict=True):
        final = log[-1]
        assert final["event"] == "summary"
        assert final["station_index"] == index_of[bind] and final["host_index"] == 0
        rows = final["stations"]
        assert sorted(r["index"] for r in rows) == [0, 1, 2, 3]
        assert [r["index"] for r in rows if r["host"]] == [0]
        assert {r["address"] for r in rows} == set(binds)


def test_node_processes_share_group_packets_by_broadcast() -> None:
    # Three processes, each with its own listener on the group port: one
    # broadcast per group packet reaches all of them (spec §1.6).
    import socket

    from loopback_addresses import free_port

    port = free_port()
    ips = [f"127.0.0.{i}" for i in (131, 132, 133)]
    common = ["--session-key", KEY, "--version", "5.29", "--group-port", str(port), "--send-interval", "0",
              "--unreliable-interval", "0.05", "--format", "jsonl"]  # fmt: skip
    watcher = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    watcher.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    watcher.bind(("0.0.0.0", port))
    watcher.settimeout(0.2)
    host = subprocess.Popen(
        [sys.executable, "-m", "pianode", "node", "--create", "--bind", ips[0], "--duration", "4", *common],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    joiners: list[subprocess.Popen[str]] = []
    heard: set[str] = set()
    try:
        assert host.stdout is not None
        created = json.loads(host.stdout.readline())
        for ip in ips[1:]:
            joiners.append(
                subprocess.Popen(
                    [sys.executable, "-m", "pianode", "node", "--join", created["address"], "--bind", ip,
                     "--duration", "2.5", *common],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                )  # fmt: skip
            )
        deadline = time.monotonic() + 15
        while len(heard) < 3 and time.monotonic() < deadline:
            try:
                _, (src, _) = watcher.recvfrom(2048)
                heard.add(src)
            except socket.timeout:
                pass
        outs = [p.communicate(timeout=30) for p in joiners]
        host.communicate(timeout=30)
    finally:
        watcher.close()
        kill_leftovers([host, *joiners])
    assert heard == set(ips)  # every process broadcast its group packets
    for out, err in outs:
        log = jsonl(out)
        summary_row = log[-1]
        assert summary_row["event"] == "summary", err
        me = summary_row["station_index"]
        ticks = [e for e in log if e["event"] == "data" and not e["reliable"]]
        # Unreliable ticks from both other stations, delivered through the broadcast listener.
        assert {e["source"] for e in ticks} == {0, 1, 2} - {me}
        assert summary_row["group_packets_sent"] >= 10
        assert summary_row["drops"].get("not_member", 0) == 0


def test_node_binds_any_free_port() -> None:
    out = pianode("node", "--create", "--bind", "127.0.0.125", "--duration", "0.3", "--format", "jsonl", timeout=20)
    assert out.returncode == 0, out.stderr
    created = jsonl(out.stdout)[0]
    ip, port = created["address"].rsplit(":", 1)
    assert ip == "127.0.0.125" and int(port) > 0


# ---------------------------------------------------------------- bad flags


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["mesh", "--bogus"],
        ["mesh", "-n", "1"],
        ["mesh", "-n", "33"],
        ["mesh", "-n", "many"],
        ["mesh", "--version", "9.9"],
        ["mesh", "--version", "4.5", "--network", "lan"],  # no LAN mode before 5.2
        ["mesh", "--network", "wifi"],
        ["mesh", "--loss", "1.5"],
        ["mesh", "--duration", "-1"],
        ["mesh", "--format", "xml"],
        ["mesh", "--fanout", "broadcast"],
        ["mesh", "--fanout", "everywhere"],
        ["node"],
        ["node", "--create", "--join", "127.0.0.1:5000"],
        ["node", "--join", "127.0.0.1:5000"],
        ["node", "--join", "nowhere", "--session-key", KEY],
        ["node", "--create", "--session-key", "abcd"],
        ["node", "--create", "--bind", "127.0.0.1:5000", "--duration", "0"],
        ["node", "--create", "--group-port", "40000"],
        ["node", "--create", "--version", "5.29", "--group-port", "0"],
    ],
)
def test_bad_flags_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_main(argv, capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("pianode"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("join", ["127.0.0.1:{port}", "localhost:{port}"])
def test_node_joining_its_own_address_says_so(join: str, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    code, err = run_main(["node", "--join", join.format(port=port), "--bind", f"127.0.0.1:{port}",
                          "--session-key", KEY], capsys)  # fmt: skip
    assert code == 2
    assert err == (f"pianode node: --join 127.0.0.1:{port} is this node's own address (--bind): give the address "
                   "of the mesh's host\n")  # fmt: skip


def test_bad_flag_in_a_process_has_no_traceback(tmp_path: pathlib.Path) -> None:
    out = pianode("mesh", "--record", str(tmp_path / "missing" / "x.pcap"), "-n", "2", "--duration", "0.1")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    out = pianode("mesh", "--nodes", "0")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
