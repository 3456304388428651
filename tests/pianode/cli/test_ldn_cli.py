"""``pianode ldn host | scan | join`` as separate processes on loopback (issue 4 acceptance).

Every run uses its own discovery and Pia ports so parallel test runs do not
hear each other; every process has a bounded ``--duration`` and every wait a
timeout.
"""

from __future__ import annotations

import json
import pathlib
import random
import subprocess
import sys
import time

import pytest

from pianode.cli.main import main as cli_main

from cli_processes import kill_leftovers
from pia6_reader import udp_datagrams
from wireshark_tools import dissect, tshark

SMM2 = "667c18475889faab61f93ef1da180971"
PIANODE = [sys.executable, "-m", "pianode"]


def _ports() -> tuple[str, str]:
    rng = random.Random()
    return str(rng.randrange(40000, 45000)), str(rng.randrange(45000, 50000))


def _jsonl(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _wait_for_line(proc: subprocess.Popen[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line:
            return line
        if proc.poll() is not None:
            break
    raise AssertionError(f"no output from {proc.args}")


@pytest.mark.parametrize("version", ["5.18"])  # 5.29 runs in the namespace test below
def test_host_and_three_joiners_form_a_mesh_exchange_data_and_the_host_recording_decodes(
    version: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    discovery, pia = _ports()
    common = ["--game-key", SMM2, "--version", version, "--discovery-port", discovery, "--format", "jsonl",
              "--stations", "4", "--messages", "8", "--duration", "25"]
    pcap = tmp_path / "host.pcap"
    host = subprocess.Popen(PIANODE + ["ldn", "host", *common, "--port", pia, "--record", str(pcap)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    joiners: list[subprocess.Popen[str]] = []
    try:
        network = json.loads(_wait_for_line(host, 15))
        assert network["event"] == "network" and network["pia_port"] == int(pia)
        joiners = [
            subprocess.Popen(PIANODE + ["ldn", "join", *common, "--name", f"player{i}"]
                             + (["--record", str(tmp_path / "joiner.pcap")] if i == 0 else []),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(3)
        ]
        outs = [p.communicate(timeout=40) for p in joiners]
        host_out, host_err = host.communicate(timeout=40)
    finally:
        kill_leftovers([host, *joiners])
    assert host.returncode == 0, host_err
    for p, (_out, err) in zip(joiners, outs, strict=True):
        assert p.returncode == 0, err
    summaries = [_jsonl(out)[-1] for out, _ in outs] + [_jsonl(host_out)[-1]]
    joined = [_jsonl(out)[0] for out, _ in outs]
    assert all(s["event"] == "summary" and s["ok"] is True for s in summaries)
    assert sorted(s["station_index"] for s in summaries) == [0, 1, 2, 3]
    for s in summaries:  # 8 messages from each of the three other stations
        assert sorted(s["received"].items()) == sorted((str(i), 8) for i in {0, 1, 2, 3} - {s["station_index"]})
    # Each process on its own loopback address, inside the host's 127.254.X.0/24 (= 169.254.X.0/24).
    prefix = network["socket"].rsplit(".", 1)[0]
    addresses = {s["address"].rsplit(":", 1)[0] for s in summaries}
    assert len(addresses) == 4 and all(a.startswith(prefix + ".") for a in addresses)
    assert {j["network_id"] for j in joined} == {network["network_id"]}
    assert {j["ip"] for j in joined} == {f"169.254.{prefix.split('.')[2]}.{y}" for y in (2, 3, 4)}
    # The host's recording decodes with only game key, application data and MACs.
    record = summaries[-1]["record"]
    session = json.loads(pathlib.Path(record["session"]).read_text())
    assert set(session) == {"version", "network", "game_key", "application_data", "macs"}
    assert session["application_data"] == network["application_data"]
    assert len(session["macs"]) == 4
    # So does a joiner's: it learned every MAC from the advertisements, as a console does.
    for rec in (record, summaries[0]["record"]):
        capsys.readouterr()
        assert cli_main(["decode", rec["pcap"], "--session", rec["session"], "--format", "jsonl"]) == 0
        rows = _jsonl(capsys.readouterr().out)
        pia = [r for r in rows if r["kind"] == "pia"]
        link = [r for r in rows if r["kind"] == "ldn-discovery"]
        assert len(pia) == rec["datagrams"] > 20 and len(link) == rec["link_frames"] and len(rows) == len(pia) + len(link)
        assert all(r["authenticated"] is True for r in pia)
        # The discovery frames it saw: the host's adverts and the connects and replies; a joiner's: the advert it
        # joined from, its connect request and the reply.
        types = {r["ldn"]["type"] for r in link}
        assert {"AdvertFrame", "ConnectRequest", "ConnectReply"} <= types, types
    joiner_session = json.loads(pathlib.Path(summaries[0]["record"]["session"]).read_text())
    assert joiner_session == session
    _check_ldn_frames_in_the_recording(pcap, record, capsys)


def _check_ldn_frames_in_the_recording(
    pcap: pathlib.Path, record: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    """The host's recording holds its advertisements as non-IP frames (EtherType 0x88b5) that tshark shows, decode
    lists with their fields, and a reader that walks Ethernet → IPv4 → UDP skips."""
    capsys.readouterr()
    assert cli_main(["decode", str(pcap), "--session", str(record["session"]), "--format", "jsonl"]) == 0
    rows = _jsonl(capsys.readouterr().out)
    link = [r for r in rows if r["kind"] == "ldn-discovery"]
    adverts = [r for r in link if r["ldn"]["type"] == "AdvertFrame"]  # type: ignore[index]
    assert len(adverts) >= 5 and all(r["dst"] == "ff:ff:ff:ff:ff:ff" and r["error"] is None for r in adverts)
    advert = adverts[-1]["ldn"]
    assert advert["advertisement"]["participants"][0]["name"] == "pianode"  # type: ignore[index]
    assert len(advert["advertisement"]["participants"]) == 4  # type: ignore[index]
    # Every UDP datagram an independent walker finds is one of decode's Pia rows, and nothing else.
    walked = list(udp_datagrams(pcap))
    assert len(walked) == record["datagrams"] == len(rows) - len(link)
    # tshark opens it as it is, and with pianode's dissector names every LDN frame.
    plain = subprocess.run([tshark(), "-n", "-r", str(pcap)], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and len(plain.stdout.splitlines()) == len(rows), plain.stderr
    frames = dissect(pcap, "eth.type", "pia.ldn.kind", "pia.ldn.ssid", display_filter="eth.type == 0x88b5")
    assert len(frames) == len(link) == record["link_frames"]
    assert all(f.get("pia.ldn.kind") for f in frames)
    kinds = sorted(int(f["pia.ldn.kind"][0]) for f in frames)
    assert kinds.count(1) == len(adverts) and 2 in kinds and 3 in kinds


def test_scan_lists_a_hosted_network_as_jsonl_and_table() -> None:
    discovery, pia = _ports()
    host = subprocess.Popen(
        PIANODE + ["ldn", "host", "--game-key", SMM2, "--version", "5.29", "--discovery-port", discovery, "--port", pia,
                   "--max", "3", "--name", "hoster", "--duration", "10", "--format", "jsonl"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        network = json.loads(_wait_for_line(host, 15))
        scan = [*PIANODE, "ldn", "scan", "--discovery-port", discovery, "--timeout", "0.6", "--version", "5.29"]
        res = subprocess.run([*scan, "--format", "jsonl", "--game-key", SMM2],
                             capture_output=True, text=True, timeout=30)  # fmt: skip
        table = subprocess.run(scan, capture_output=True, text=True, timeout=30)
    finally:
        host.kill()
        host.communicate(timeout=5)
    assert res.returncode == 0, res.stderr
    records = _jsonl(res.stdout)
    (found,) = [r for r in records if r["event"] == "network"]
    assert records[-1] == {"event": "summary", "found": 1, "ignored": records[-1]["ignored"]}
    assert all(isinstance(n, int) for n in records[-1]["ignored"].values())
    assert found["ssid"] == network["ssid"] and found["host"] == network["host"]
    assert found["max_participants"] == 3 and found["participants"][0]["name"] == "hoster"
    assert found["participants"][0]["mac"] == network["mac"]
    assert found["network_id"] == network["network_id"] and found["system_communication_version"] == 8
    assert len(found["session_key"]) == 32
    assert table.returncode == 0 and network["ssid"] in table.stdout and network["host"] in table.stdout


def test_join_of_a_network_of_another_version_is_a_failed_join_exit_1() -> None:
    discovery, pia = _ports()
    host = subprocess.Popen(
        PIANODE + ["ldn", "host", "--game-key", SMM2, "--version", "5.18", "--discovery-port", discovery, "--port", pia,
                   "--duration", "10", "--format", "jsonl"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        network = json.loads(_wait_for_line(host, 15))
        join = subprocess.run([*PIANODE, "ldn", "join", "--game-key", SMM2, "--version", "5.29", "--discovery-port",
                               discovery, "--timeout", "3", "--format", "jsonl"], capture_output=True, text=True,
                              timeout=30)  # fmt: skip
    finally:
        host.kill()
        host.communicate(timeout=5)
    assert join.returncode == 1, join.stderr
    (failed,) = _jsonl(join.stdout)
    assert failed["event"] == "join_failed"
    assert failed["reason"] == (f"{network['host']}'s network: the network speaks LDN system communication version 5;"
                                " Pia 5.29 uses 8")
    assert join.stderr.strip().splitlines() == [f"pianode ldn join: {failed['reason']}"]


def test_scan_without_networks_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    discovery, _ = _ports()
    assert cli_main(["ldn", "scan", "--discovery-port", discovery, "--timeout", "0.2"]) == 1
    err = capsys.readouterr().err
    assert err == f"pianode ldn scan: no LDN network heard on port {discovery} within 0.2 s\n"


@pytest.mark.parametrize(
    "argv",
    [
        ("ldn", "host", "--game-key", "short"),
        ("ldn", "host", "--game-key", SMM2, "--max", "9"),
        ("ldn", "host", "--game-key", SMM2, "--stations", "5", "--max", "4"),
        ("ldn", "host", "--game-key", SMM2, "--version", "9.99"),
        ("ldn", "host", "--game-key", SMM2, "--version", "7.0"),  # the node runs no 7.x
        ("ldn", "host", "--game-key", SMM2, "--address", "169.254.3.2"),  # a host is .1
        ("ldn", "join", "--game-key", SMM2, "--address", "10.0.0.2"),
        ("ldn", "join", "--game-key", SMM2, "--ssid", "zz"),
        ("ldn", "join", "--game-key", SMM2, "--stations", "1"),
        ("ldn", "scan", "--timeout", "-1"),
    ],
)
def test_bad_flags_are_one_line_exit_2(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"pianode ldn {argv[1]}: ") and "\n" not in err and "Traceback" not in err


# ---------------------------------------------------------------- separate hosts, for real (network namespaces)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.mark.netns
def test_four_namespaces_on_a_bridge_discover_by_real_broadcast_and_form_a_mesh(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four network namespaces joined by veth pairs to a bridge in a fifth, on 169.254.55.0/24.

    The same code path as separate machines: advertisements are real
    broadcasts to 169.254.55.255, every process binds its own LDN address.
    Nothing leaves these namespaces (the bridge lives in its own namespace).
    """
    tag = f"pnl{random.randrange(16**5):05x}"
    switch = f"{tag}sw"
    spaces = [f"{tag}n{i}" for i in range(1, 5)]
    try:
        _ip("netns", "add", switch)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"NETWORK NAMESPACES UNAVAILABLE ({exc}): the separate-hosts LDN test did not run")
    procs: list[subprocess.Popen[str]] = []
    try:
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for i, ns in enumerate(spaces, start=1):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns", switch)
            _ip("-n", switch, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", switch, "link", "set", f"p{i}", "up")
            _ip("-n", ns, "addr", "add", f"169.254.55.{i}/24", "broadcast", "169.254.55.255", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        common = ["--game-key", SMM2, "--version", "5.29", "--format", "jsonl", "--stations", "4",
                  "--messages", "5", "--duration", "25"]
        pcap = tmp_path / "netns.pcap"
        host = subprocess.Popen(
            ["ip", "netns", "exec", spaces[0], *PIANODE, "ldn", "host", *common, "--address", "169.254.55.1",
             "--broadcast", "169.254.55.255", "--record", str(pcap)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(host)
        network = json.loads(_wait_for_line(host, 15))
        assert network["socket"] == "169.254.55.1"
        for i, ns in enumerate(spaces[1:], start=2):
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, *PIANODE, "ldn", "join", *common, "--address", f"169.254.55.{i}",
                 "--timeout", "5"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ))  # fmt: skip
        outs = [p.communicate(timeout=45) for p in procs[1:]]
        host_out, host_err = host.communicate(timeout=45)
    finally:
        kill_leftovers(procs)
        for ns in [*spaces, switch]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
    assert host.returncode == 0, host_err
    for p, (_out, err) in zip(procs[1:], outs, strict=True):
        assert p.returncode == 0, err
    summaries = [_jsonl(out)[-1] for out, _ in outs] + [_jsonl(host_out)[-1]]
    assert all(s["ok"] is True for s in summaries)
    assert {s["address"] for s in summaries} == {f"169.254.55.{i}:49152" for i in range(1, 5)}
    for s in summaries:
        assert sorted(s["received"].items()) == sorted((str(i), 5) for i in {0, 1, 2, 3} - {s["station_index"]})
    record = summaries[-1]["record"]
    capsys.readouterr()
    assert cli_main(["decode", str(pcap), "--session", record["session"], "--format", "jsonl"]) == 0
    rows = [r for r in _jsonl(capsys.readouterr().out) if r["kind"] != "ldn-discovery"]
    assert len(rows) == record["datagrams"] > 20 and all(r["authenticated"] is True for r in rows)


def _host_and_scan(version: str, *scan_args: str) -> tuple[dict[str, object], subprocess.CompletedProcess[str]]:
    """A host of Pia *version* and one scan of its discovery port: the host's network record and the scan."""
    discovery, pia = _ports()
    host = subprocess.Popen(
        PIANODE + ["ldn", "host", "--game-key", SMM2, "--version", version, "--discovery-port", discovery, "--port",
                   pia, "--duration", "20", "--format", "jsonl"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        network = json.loads(_wait_for_line(host, 15))
        scan = subprocess.run([*PIANODE, "ldn", "scan", "--discovery-port", discovery, "--timeout", "0.8", *scan_args],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
    finally:
        host.kill()
        host.communicate(timeout=5)
    return network, scan


@pytest.mark.parametrize(
    ("hosted", "asked", "shown", "which"),
    [("5.18", "6.32", "5", "LDN system communication version 5 (Pia 5.18)"),
     ("6.32", "5.18", "0", "a Pia 6.x network (LDN system communication version 0)"),
     ("5.18", "5.29", "5", "LDN system communication version 5 (Pia 5.18)")],
)  # fmt: skip
def test_scan_shows_a_network_of_another_version_with_the_version_its_beacon_states(
    hosted: str, asked: str, shown: str, which: str
) -> None:
    network, scan = _host_and_scan(hosted, "--version", asked)
    assert scan.returncode == 0, scan.stderr
    (row,) = [line for line in scan.stdout.splitlines() if str(network["ssid"]) in line]
    cells = row.split()
    assert cells[4:6] == [shown, "(other)"], row  # the system version column: as read, marked as another's
    assert f"{network['network_id']:#010x}" in cells, row  # its network id as read from the beacon
    assert "Traceback" not in scan.stderr
    (note,) = scan.stderr.splitlines()
    assert note.startswith(f"pianode ldn scan: {network['host']}'s network is of another Pia version: {which}, not ")
    assert f"Pia {asked}" in note and "--version" in note
    jsonl = _host_and_scan(hosted, "--version", asked, "--format", "jsonl")[1]
    (record,) = [r for r in _jsonl(jsonl.stdout) if r["event"] == "network"]
    assert record["system_communication_version"] == int(shown) and record["other_version"]["family"] == hosted[0] + ".x"


def _advertise_and_scan(application_data: bytes, name: str, *scan_args: str) -> subprocess.CompletedProcess[str]:
    """A hostile advertiser on loopback (a beacon with *application_data* and a participant *name*, sent
    every 50 ms from a plain UDP socket) and one scan of its discovery port."""
    import socket

    from protocols.ldn_link import AdvertFrame, Advertisement, LdnParticipant, encode_frame

    discovery, _ = _ports()
    adv = Advertisement(0x0100_0000_0000_0001, bytes(range(16)), application_data, 8,
                        (LdnParticipant("169.254.7.1", b"\x02\x00\x00\x00\x00\x01", name),))  # fmt: skip
    frame = encode_frame(AdvertFrame(49152, 49160, adv))
    scan = subprocess.Popen([*PIANODE, "ldn", "scan", "--discovery-port", discovery, "--timeout", "1.5", *scan_args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        while scan.poll() is None:
            sock.sendto(frame, ("127.0.0.1", int(discovery)))
            time.sleep(0.05)
    out, err = scan.communicate(timeout=10)
    return subprocess.CompletedProcess(scan.args, scan.returncode, out, err)


@pytest.mark.parametrize("version", ["5.2", "5.7"])
@pytest.mark.parametrize("fmt", ["table", "jsonl"])
def test_scan_of_a_beacon_of_no_version_pianode_reads_says_so_in_one_line(version: str, fmt: str) -> None:
    """Application data that reads as this version's layout, but of another LDN system communication version
    and of no layout another version reads (24 bytes, header size byte 0): a row and one line, no traceback."""
    data = (0x1234_5678).to_bytes(4, "little") + bytes(4) + bytes([9]) + bytes(15)
    scan = _advertise_and_scan(data, "evil\x1b[2J\u202e", "--version", version, "--format", fmt)
    assert "Traceback" not in scan.stderr, scan.stderr
    assert scan.returncode == 0, scan.stderr
    (note,) = scan.stderr.splitlines()
    assert note.startswith("pianode ldn scan: 169.254.7.1's network") and "9" in note, note
    assert "\x1b" not in scan.stdout and "\u202e" not in scan.stdout
    if fmt == "table":
        (row,) = [line for line in scan.stdout.splitlines() if "169.254.7.1" in line]
        assert "0x12345678" in row, row
    else:
        (record,) = [r for r in _jsonl(scan.stdout) if r["event"] == "network"]
        assert record["system_communication_version"] == 9 and "error" in record


def test_every_reason_a_scan_ignores_an_advert_for_has_words() -> None:
    """``ldn scan``/``join`` say in words why they ignored what they heard, for every reason the scan counts
    (pianode.ldn.network.scan's docstring lists them), the port-0 adverts too."""
    import collections
    import re

    from pianode.cli.ldn import _IGNORED_FRAMES
    from pianode.ldn import network

    reasons = set(re.findall(r"``([a-z_]+)``", network.scan.__doc__ or ""))
    assert "bad_port" in reasons
    assert reasons <= set(_IGNORED_FRAMES)
    from pianode.cli.ldn import _ignored_text

    assert "port 0" in _ignored_text(collections.Counter(bad_port=2))
