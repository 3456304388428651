"""The command line's contract, checked on the real program (``python -m pianode`` as a subprocess).

* Bad input: exactly one line on stderr that names the flag or the value, exit status 2, no traceback,
  and nothing started (ports, paths and addresses are checked before the work).
* A failure at run time (nothing listens, no network): one line, exit status 1.
* Ctrl-C (SIGINT) in every long-running command: ``interrupted`` as the one line on stderr, exit
  status 130, no traceback; the commands that run a mesh leave it first (the others see the station go).
* ``pianode --version``/``-V``, and ``-v``/``-q`` before or after the subcommand.

Every address is on loopback, every wait is bounded.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from cli_processes import kill_leftovers
from loopback_addresses import free_port, loopback_block

KEY = "00112233445566778899aabbccddeeff"
GAME_KEY = "ee182a63e216cdb1f51ad4bed8cf6508"
PIANODE = [sys.executable, "-m", "pianode"]


def run(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PIANODE, *argv], capture_output=True, text=True, timeout=timeout)


def assert_one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------- bad input: one line naming the flag, exit 2

BAD_INPUT = [
    # ports out of range, in every spelling
    (("mesh", "-n", "3", "--port", "70000"), "--port"),
    (("bench", "--version", ""), "--version"),
    (("bench", "--session-version", "9.0"), "--session-version"),
    (("mesh", "--port", "-1"), "--port"),
    (("mesh", "--bind", "127.0.0.5:99999"), "port must be 0..65535, got 99999"),
    (("node", "--create", "--bind", "127.0.0.5:99999"), "port must be 0..65535, got 99999"),
    (("node", "--join", "127.0.0.1:70000", "--session-key", KEY), "--join port must be 1..65535, got 70000"),
    (("node", "--create", "--version", "5.29", "--group-port", "70000"), "--group-port"),
    (("prudp", "serve", "--variant", "nintendo-v1", "--port", "70000"), "--port"),
    (("prudp", "serve", "--variant", "nintendo-v1", "--bind", "127.0.0.1:99999"), "99999"),
    (("prudp", "connect", "--variant", "nintendo-v1", "127.0.0.1:99999"), "99999"),
    (("lan", "browse", "--game-key", GAME_KEY, "--bind", "127.0.0.5:99999"), "--bind port must be 0..65535, got 99999"),
    (("lan", "host", "--game-key", GAME_KEY, "--bind", "127.0.0.5:70000"), "70000"),
    (("ldn", "host", "--game-key", GAME_KEY, "--port", "70000"), "--port"),
    (("ldn", "scan", "--discovery-port", "70000"), "--discovery-port"),
    # addresses this machine cannot bind, or that are not addresses
    (("mesh", "--bind", "10.0.0.1"), "10.0.0.1"),
    (("mesh", "--base-address", "10.0.0.1"), "10.0.0.1"),
    (("mesh", "--bind", "127.255.255.254"), "127.255.255.254"),
    (("mesh", "--bind", "0.0.0.0"), "0.0.0.0"),
    # an IPv6 literal is named whole (not split at its last colon), where the flag takes IPv4
    (("mesh", "--bind", "::1"), "--bind takes an IPv4 address (the node speaks UDP over IPv4), got '::1'"),
    (("node", "--create", "--bind", "[::1]:5"), "--bind takes an IPv4 address (the node speaks UDP over IPv4), got '[::1]:5'"),
    (("node", "--join", "fe80::1", "--session-key", KEY), "--join takes an IPv4 address"),
    (("relay", "serve", "--listen", "[::1]:99999", "--ca", "c", "--cert", "c", "--key", "k"), "got 99999 in '[::1]:99999'"),
    (("node", "--create", "--bind", "nothost"), "nothost"),
    (("node", "--create", "--bind", "10.0.0.1"), "10.0.0.1"),
    (("prudp", "serve", "--variant", "nintendo-v1", "--host", "10.0.0.1"), "10.0.0.1"),
    (("prudp", "serve", "--variant", "nintendo-v1", "--host", "nothost"), "nothost"),
    (("prudp", "serve", "--variant", "nintendo-v1", "--bind", "10.0.0.1"), "10.0.0.1"),
    (("prudp", "connect", "--variant", "nintendo-v1", "nothost:1"), "nothost"),
    (("lan", "host", "--game-key", GAME_KEY, "--bind", "10.0.0.1"), "10.0.0.1"),
    (("lan", "join", "--game-key", GAME_KEY, "--bind", "10.0.0.1"), "10.0.0.1"),
    # durations, timeouts, rates, counts: the allowed range said as it is
    (("mesh", "--rate", "0"), "--rate must be a number > 0 and ≤ 240, got 0"),
    (("mesh", "--rate", "500"), "--rate must be a number > 0 and ≤ 240"),
    (("mesh", "--messages", "-1"), "--messages must be an integer ≥ 0"),
    (("mesh", "--duration", "-1"), "--duration"),
    (("mesh", "-n", "1"), "--nodes must be an integer ≥ 2 and ≤ 32"),
    (("mesh", "--loss", "2"), "--loss must be a number ≥ 0 and ≤ 1"),
    (("node", "--create", "--duration", "-1"), "--duration must be a number > 0"),
    (("node", "--create", "--interval", "-1"), "--interval"),
    (("node", "--create", "--send-interval", "-1"), "--send-interval"),
    (("prudp", "serve", "--variant", "nintendo-v1", "--duration", "-1"), "--duration must be a number > 0"),
    (("prudp", "connect", "--variant", "nintendo-v1", "127.0.0.1:1", "--timeout", "-1"), "--timeout must be a number > 0"),
    (("prudp", "connect", "--variant", "nintendo-v1", "127.0.0.1:1", "--count", "0"), "--count"),
    (("lan", "browse", "--game-key", GAME_KEY, "--timeout", "0"), "--timeout must be a number > 0 and ≤ 3600, got 0"),
    (("lan", "join", "--game-key", GAME_KEY, "--timeout", "-1"), "--timeout"),
    (("lan", "host", "--game-key", GAME_KEY, "--max", "1"), "--max must be an integer ≥ 2 and ≤ 16, got 1"),
    (("lan", "host", "--game-key", GAME_KEY, "--broadcast", "10.77.0.255"),
     ("--bind 127.0.0.1 is a loopback address, which browsers on the network of --broadcast 10.77.0.255 cannot"
      " reach: bind the host to an address on that network")),
    (("lan", "host", "--game-key", GAME_KEY, "--mtu", "399"), "--mtu must be an integer ≥ 400 and ≤ 1472, got 399"),
    (("lan", "join", "--game-key", GAME_KEY, "--mtu", "1473"), "--mtu must be an integer ≥ 400 and ≤ 1472, got 1473"),
    (("lan", "host", "--game-key", GAME_KEY, "--discovery-only", "--mtu", "500"), "--mtu is for a host that runs a node"),
    (("lan", "host", "--game-key", GAME_KEY, "--duration", "0"), "--duration must be a number > 0"),
    (("ldn", "scan", "--timeout", "0"), "--timeout must be a number > 0 and ≤ 3600, got 0"),
    (("ldn", "join", "--game-key", GAME_KEY, "--timeout", "0"), "--timeout"),
    (("ldn", "host", "--game-key", GAME_KEY, "--max", "9"), "--max must be an integer ≥ 2 and ≤ 8, got 9"),
    (("ldn", "host", "--game-key", GAME_KEY, "--interval", "0"), "--interval"),
    # paths checked before the work starts
    (("mesh", "--record", "/nonexistent/x.pcap"), "--record /nonexistent/x.pcap"),
    (("ldn", "host", "--game-key", GAME_KEY, "--record", "/nonexistent/x.pcap"), "--record /nonexistent/x.pcap"),
    (("ldn", "join", "--game-key", GAME_KEY, "--record", "/nonexistent/x.pcap"), "--record /nonexistent/x.pcap"),
    (("decode", "/nonexistent/capture.pcap"), "/nonexistent/capture.pcap"),
    (("decode", "/dev/null", "--version", "9.9"), "(--allow-nearest-version uses the nearest anyway)"),
    (("decode", "/dev/null", "--network", "lan", "--session-key", "zz"), "--session-key must be 16 bytes (32 hex digits or 16 characters), got 2 bytes"),
    # versions and keys
    (("mesh", "--version", ""), "--version"),
    (("node", "--create", "--version", ""), "--version"),
    (("lan", "browse", "--game-key", GAME_KEY, "--version", ""), "--version"),
    (("ldn", "scan", "--version", ""), "--version"),
    (("mesh", "--version", "5.99"), "--allow-nearest-version"),
    (("lan", "host", "--game-key", GAME_KEY, "--version", "5.99"), "--allow-nearest-version"),
    (("node", "--create", "--session-key", "abcd"), "--session-key must be 16 bytes"),
    (("lan", "browse", "--game-key", "xyz"), "--game-key"),
]


@pytest.mark.parametrize(("argv", "names"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_naming_it_and_exit_2(argv: tuple[str, ...], names: str) -> None:
    out = run(*argv)
    line = assert_one_line(out.stderr)
    assert out.returncode == 2, out.stderr
    assert line.startswith("pianode "), line
    assert names in line, line
    assert out.stdout == ""


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


@pytest.mark.parametrize(
    "argv",
    [
        ("mesh", "-n", "2", "--bind", "127.0.0.1:{port}"),
        ("mesh", "-n", "2", "--port", "{port}"),
        ("node", "--create", "--bind", "127.0.0.1:{port}"),
        ("prudp", "serve", "--variant", "nintendo-v1", "--bind", "127.0.0.1:{port}"),
        ("prudp", "serve", "--variant", "nintendo-v1", "--port", "{port}"),
        ("lan", "host", "--game-key", GAME_KEY, "--bind", "127.0.0.1:{port}"),
        ("lan", "join", "--game-key", GAME_KEY, "--bind", "127.0.0.1:{port}"),
    ],
)
def test_a_busy_port_is_one_line_naming_it_and_exit_2(argv: tuple[str, ...], busy_port: int) -> None:
    out = run(*(a.format(port=busy_port) for a in argv))
    line = assert_one_line(out.stderr)
    assert out.returncode == 2
    assert f"UDP port {busy_port} on 127.0.0.1 is already in use" in line


def test_an_old_spelling_works_with_a_one_line_note() -> None:
    out = run("mesh", "-n", "2", "--duration", "0.2", "--leave-host", "--base-address", "127.0.0.1", "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ok"] is True
    assert out.stderr.splitlines() == [
        "pianode mesh: note: --leave-host is deprecated, use --leave",
        "pianode mesh: note: --base-address is deprecated, use --bind IP",
    ]


# ---------------------------------------------------------------- failures at run time: one line, exit 1


def test_join_where_nothing_listens_says_so_and_exits_1() -> None:
    port = free_port()
    out = run("node", "--join", f"127.0.0.1:{port}", "--session-key", KEY, "--bind", loopback_block() + "3", timeout=40)
    line = assert_one_line(out.stderr)
    assert out.returncode == 1
    assert line == (f"pianode node: join failed: no answer from 127.0.0.1:{port}: nothing listens there "
                    "(is the host running, and the port right?)")  # fmt: skip


def test_prudp_connect_where_nothing_listens_exits_1() -> None:
    port = free_port()
    out = run("prudp", "connect", "--variant", "nintendo-v1", f"127.0.0.1:{port}", "--timeout", "2")
    line = assert_one_line(out.stderr)
    assert out.returncode == 1
    assert f"no answer from 127.0.0.1:{port}: nothing listens there" in line


def test_ldn_join_without_a_network_exits_1() -> None:
    out = run("ldn", "join", "--game-key", GAME_KEY, "--discovery-port", str(free_port()), "--timeout", "0.3")
    line = assert_one_line(out.stderr)
    assert out.returncode == 1
    assert line.startswith("pianode ldn join: no LDN network heard on port ")


# ---------------------------------------------------------------- Ctrl-C: "interrupted", exit 130


def _started(proc: subprocess.Popen[str], deadline: float) -> None:
    """Wait until the command runs its Trio loop (it has a socket open: Trio's wake-up pair or its own)."""
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        fds = f"/proc/{proc.pid}/fd"
        try:
            if any(os.readlink(f"{fds}/{fd}").startswith("socket:") for fd in os.listdir(fds)):
                return
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise AssertionError("the command did not start")


def _interrupt(proc: subprocess.Popen[str], *, ready: str | None, timeout: float = 20) -> tuple[str, str]:
    """Wait until *proc* is running (its first stdout line contains *ready*), SIGINT it, collect its output."""
    deadline = time.monotonic() + timeout
    first = ""
    if ready is not None:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert ready in first, first + proc.communicate()[1]
    _started(proc, deadline)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=timeout)
    return first + out, err


def _popen(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*PIANODE, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


LONG_RUNNING = [
    (("mesh", "--duration", "60"), None),
    (("node", "--create", "--bind", "{net}2"), "created the mesh"),
    (("lan", "host", "--game-key", GAME_KEY, "--bind", "{net}2", "--listen", "0.0.0.0:{port}"), "hosting network id"),
    (("lan", "browse", "--game-key", GAME_KEY, "--broadcast", "127.255.255.255:{port}", "--timeout", "60"), None),
    (("lan", "join", "--game-key", GAME_KEY, "--bind", "{net}3", "--broadcast", "127.255.255.255:{port}",
      "--timeout", "60"), None),
    (("ldn", "host", "--game-key", GAME_KEY, "--discovery-port", "{port}"), "LDN network"),
    (("ldn", "scan", "--discovery-port", "{port}", "--timeout", "60"), None),
    (("ldn", "join", "--game-key", GAME_KEY, "--discovery-port", "{port}", "--timeout", "60"), None),
    (("prudp", "serve", "--variant", "nintendo-v1", "--bind", "{net}2"), "listening on"),
    (("prudp", "connect", "--variant", "nintendo-v1", "{net}2:{port}", "--timeout", "60"), None),
    (("mesh", "--network", "ldn", "--duration", "60"), None),
    (("mesh", "-n", "4", "--processes", "2", "--bind", "{net}2", "--duration", "60"), None),
    (("relay", "serve", "--listen", "{net}2:{port}", "--ca", "{ca}/ca.pem", "--cert", "{ca}/hub.pem",
      "--key", "{ca}/hub.key"), None),
]


@pytest.fixture(scope="module")
def relay_ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    ca = tmp_path_factory.mktemp("relay") / "ca"
    assert run("relay", "ca", "init", str(ca)).returncode == 0
    assert run("relay", "ca", "issue", str(ca), "--server", "hub").returncode == 0
    return str(ca)


@pytest.mark.parametrize(("argv", "ready"), LONG_RUNNING, ids=[" ".join(a[:2]) for a, _ in LONG_RUNNING])
def test_ctrl_c_prints_interrupted_and_exits_130(argv: tuple[str, ...], ready: str | None, relay_ca: str) -> None:
    net, port = loopback_block(), free_port()
    proc = _popen(*(a.format(net=net, port=port, ca=relay_ca) for a in argv))
    try:
        _, err = _interrupt(proc, ready=ready)
    finally:
        kill_leftovers([proc])
    assert assert_one_line(err) == "interrupted"
    assert proc.returncode == 130


#: The progress line `pianode mesh` writes to stderr off a terminal every few seconds (pianode.cli.mesh.LiveView).
PROGRESS_LINE = re.compile(r"pianode mesh: \d+ s: \d+ stations running, \d+ packets sent, \d+ received, \d+ messages resent")


def _without_progress(err: str) -> str:
    """*err* without the run's progress lines: what it says beside them (a run interrupted about when a
    progress line is due may have written one first; that is output of the run, not of the interruption)."""
    return "".join(line for line in err.splitlines(keepends=True) if not PROGRESS_LINE.fullmatch(line.rstrip("\n")))


@pytest.mark.parametrize("split", [(), ("--processes", "2", "--rate", "30")], ids=["one process", "two processes"])
def test_ctrl_c_on_mesh_prints_the_summary_until_then(split: tuple[str, ...]) -> None:
    proc = _popen("mesh", "-n", "4", "--bind", loopback_block() + "2", "--duration", "60", "--format", "jsonl", *split)
    try:
        time.sleep(5)  # formed by then (4 stations form in well under a second; in 2 processes, busy, 2 s)
        out, err = _interrupt(proc, ready=None)
    finally:
        kill_leftovers([proc])
    # (The first progress line falls due about when the signal comes: it may or may not be there.)
    assert assert_one_line(_without_progress(err)) == "interrupted" and proc.returncode == 130
    summary = json.loads(out.splitlines()[-1])
    assert summary["nodes"] == 4 and summary["ok"] is False and summary["result"] != "OK"
    assert summary["problems"][-1] == "interrupted (Ctrl-C): the figures are those until then"
    assert summary["formation_time"] is not None  # it had formed: the summary says so


def test_ctrl_c_on_a_joined_node_leaves_the_mesh_first() -> None:
    net = loopback_block()
    host = _popen("node", "--create", "--bind", net + "2", "--format", "jsonl", "--duration", "30")
    joiner = None
    try:
        assert host.stdout is not None
        created = json.loads(host.stdout.readline())
        joiner = _popen("node", "--join", created["address"], "--session-key", created["session_key"],
                        "--bind", net + "3", "--format", "jsonl")  # fmt: skip
        out, err = _interrupt(joiner, ready='"event": "joined"')
        seen = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(e.get("event") == "station-left" for e in seen):
            seen.append(json.loads(host.stdout.readline()))
    finally:
        kill_leftovers([p for p in (host, joiner) if p is not None])
    assert assert_one_line(err) == "interrupted" and joiner.returncode == 130
    assert json.loads(out.splitlines()[-1])["event"] == "summary"
    left = [e for e in seen if e.get("event") == "station-left"]
    assert left and left[0]["reason"] == "left"  # it left; the host did not have to time it out


def test_ctrl_c_on_ldn_host_still_writes_the_recording(tmp_path: os.PathLike[str]) -> None:
    pcap = os.path.join(tmp_path, "host.pcap")
    proc = _popen("ldn", "host", "--game-key", GAME_KEY, "--discovery-port", str(free_port()), "--record", pcap)
    try:
        out, err = _interrupt(proc, ready="LDN network")
    finally:
        kill_leftovers([proc])
    assert assert_one_line(err) == "interrupted" and proc.returncode == 130
    assert os.path.getsize(pcap) >= 24 and os.path.exists(os.path.join(tmp_path, "host.session.json"))


# ---------------------------------------------------------------- program version and verbosity


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_program_version(flag: str) -> None:
    out = run(flag)
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.startswith("pianode ") and out.stdout.split()[1][0].isdigit()


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_is_accepted_before_and_after_the_subcommand(where: str) -> None:
    args = ["mesh", "-n", "2", "--duration", "0.2", "--format", "jsonl"]
    argv = ["-v", *args] if where == "before" else [*args, "-v"]
    out = run(*argv)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ok"] is True


def test_quiet_prints_only_the_result() -> None:
    out = run("mesh", "-n", "2", "--duration", "0.2", "-q")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [next(line for line in out.stdout.splitlines() if line.startswith("result: OK"))]


# ---------------------------------------------------------------- words that name the flag, output that explains itself


def test_decode_names_the_flags_it_needs(captures: pathlib.Path) -> None:
    pia = run("decode", str(captures / "nDPI-nintendo.pcap"), "--version", "5.18", "--session-key", KEY,
              "--format", "jsonl")  # fmt: skip
    assert pia.returncode == 2  # a key without a network type cannot open a 5.18 packet: bad input
    assert assert_one_line(pia.stderr) == (
        "pianode decode: Pia 5.18 nonces depend on the network type: give --network (lan, ldn, nex, npln)")
    prudp = run("decode", str(captures / "gro-prudp" / "GRO_Backend_packetLog.jsonl"), "--format", "table")
    assert prudp.returncode == 0
    assert prudp.stdout.splitlines()[-1] == "-- unknown datagrams: PRUDP? give --prudp-variant (and --access-key)"


def _pcap_of_tcp_only(path: pathlib.Path) -> None:
    """A classic pcap (Ethernet) of one IPv4 TCP frame: a capture with no UDP datagram in it."""
    import struct

    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40, 1, 0, 64, 6, 0, bytes([127, 0, 0, 1]), bytes([127, 0, 0, 2]))
    frame = bytes(6) + bytes(6) + b"\x08\x00" + ip + bytes(20)
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
                     + struct.pack("<IIII", 0, 0, len(frame), len(frame)) + frame)  # fmt: skip


@pytest.mark.parametrize("kind", ["empty file", "pcap of TCP only", "pcap header only"])
def test_decode_of_a_capture_without_datagrams_says_so(tmp_path: pathlib.Path, kind: str) -> None:
    """JSON Lines has no summary line: a capture that gives no datagram is said on stderr, not left silent."""
    path = tmp_path / "cap.pcap"
    if kind == "empty file":
        path.write_bytes(b"")
    elif kind == "pcap header only":
        import struct

        path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    else:
        _pcap_of_tcp_only(path)
    out = run("decode", str(path), "--format", "jsonl")
    assert out.stdout == ""
    line = assert_one_line(out.stderr)
    quiet = run("decode", str(path), "--format", "jsonl", "-q")
    if kind == "empty file":
        # Not a capture at all: bad input, said with -q too.
        assert out.returncode == 2, out.stderr
        assert line == f"pianode decode: {path}: nothing to decode: the input is empty (0 bytes)", line
        assert quiet.returncode == 2 and quiet.stderr == out.stderr and quiet.stdout == ""
        return
    assert out.returncode == 0, out.stderr
    assert line.startswith(f"pianode decode: {path}: no UDP datagrams"), line
    if kind == "pcap of TCP only":
        assert "1 frame without UDP skipped" in line
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == ""


def test_the_live_view_redraws_in_place_and_leaves_one_final_table() -> None:
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen([*PIANODE, "mesh", "-n", "2", "--duration", "1.2"], stdout=follower,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    os.close(follower)
    chunks = []
    try:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the program exited and closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=30)
    finally:
        os.close(leader)
        kill_leftovers([proc])
    text = b"".join(chunks).decode()
    assert proc.returncode == 0
    assert "\x1b[2J" not in text  # the screen is never cleared
    redraws = text.count("\x1b[4F\x1b[J")  # cursor up over the 4-line table, erase below
    assert redraws >= 2
    after = text.rsplit("\x1b[4F\x1b[J", 1)[1]  # what stays on the screen
    assert after.startswith("Pia 5.18 lan mesh: 2 stations") and after.count("rtt ms (mean to peers)") == 1


def test_off_a_terminal_a_long_run_prints_progress_to_stderr() -> None:
    out = run("mesh", "-n", "2", "--duration", "6", "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert lines and all(PROGRESS_LINE.fullmatch(line) and " 2 stations running" in line for line in lines), lines
    assert json.loads(out.stdout)["ok"] is True


def test_node_summary_is_a_table_and_the_join_command_works_as_printed() -> None:
    net = loopback_block()
    out = run("node", "--create", "--bind", net + "2", "--version", "5.29", "--group-port", str(free_port()),
              "--duration", "0.3")  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    command = lines[1].strip()
    assert command.startswith(f"pianode node --join {net}2:") and f"--bind {net}3" in command
    assert "--group-port" in command and "--version 5.29" in command
    header = next(i for i, line in enumerate(lines) if line.startswith("idx"))
    assert lines[header].split() == ["idx", "host", "self", "address", "state", "rtt", "ms", "received", "msgs"]
    assert set(lines[header + 1]) == {"-"}
    assert lines[header + 2].split()[:4] == ["0", "*", "*", f"{net}2:" + command.split()[3].split(":")[1]]


def test_v_logs_state_changes_and_vv_every_drop_with_its_reason() -> None:
    quiet = run("mesh", "-n", "3", "--duration", "0.3", "--leave", "--format", "jsonl")
    assert quiet.returncode == 0 and quiet.stderr == ""
    states = run("mesh", "-n", "3", "--duration", "0.3", "--leave", "--format", "jsonl", "-v")
    assert states.returncode == 0, states.stderr
    assert re.search(r" pianode\.mesh INFO station \d+: the host moved from station 0 to 1$", states.stderr, re.M)
    # Every join of the formation, as it happens, seen from both ends (3 stations: 6 lines).
    joins = re.findall(r" pianode\.mesh INFO station (\d): station (\d) joined from 127\.0\.0\.\d+:\d+$", states.stderr, re.M)
    assert sorted(set(joins)) == [(a, b) for a in "012" for b in "012" if a != b], states.stderr
    assert re.search(r" pianode\.mesh INFO station \d: station 0 \(127\.0\.0\.1:\d+\) left: left$", states.stderr, re.M)
    assert " DEBUG " not in states.stderr
    drops = run("-vv", "mesh", "-n", "2", "--duration", "0.5", "--corrupt", "0.3", "--seed", "3", "--format", "jsonl")
    assert json.loads(drops.stdout)["drops"]
    assert re.search(r" pianode\.mesh DEBUG dropped a datagram \((bad_tag|malformed)\): ", drops.stderr, re.M)
