"""When a browse, join or connect finds nothing, the command says what it heard and why it was ignored.

Each case runs the real commands as processes on loopback (a random 127.a.b.0/24 block and free
ports): a wrong game key, a session of another LAN system communication version, a wrong session
key, a full session.  (A wrong PRUDP access key: ``test_prudp_cli.py``.)  The reason is one line
on stderr (exit 1) and is counted in ``--format jsonl`` output too.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from cli_processes import kill_leftovers
from loopback_addresses import free_port, loopback_block

GAME_KEY = "ee182a63e216cdb1f51ad4bed8cf6508"
OTHER_KEY = "0123456789abcdef0123456789abcdef"
PIANODE = [sys.executable, "-m", "pianode"]


def run(*argv: str, timeout: float = 40) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PIANODE, *argv], capture_output=True, text=True, timeout=timeout)


@contextmanager
def started(*argv: str, ready: str) -> Iterator[subprocess.Popen[str]]:
    """A command running in the background once its first stdout line contains *ready* (kept as
    ``proc.first_line``); killed at the end."""
    proc = subprocess.Popen([*PIANODE, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert ready in first, first + proc.communicate(timeout=10)[1]
        proc.first_line = first  # type: ignore[attr-defined]
        yield proc
    finally:
        kill_leftovers([proc])


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def lan_host(net: str, port: int, *extra: str) -> list[str]:
    return ["lan", "host", "--game-key", GAME_KEY, "--bind", net + "2", "--listen", f"0.0.0.0:{port}",
            "--broadcast", f"127.255.255.255:{port}", "--duration", "30", *extra]  # fmt: skip


def test_browse_with_the_wrong_game_key_says_hosts_ignore_it_and_the_host_says_why() -> None:
    net, port = loopback_block(), free_port()
    with started(*lan_host(net, port), ready="hosting network id") as host:
        out = run("lan", "browse", "--game-key", OTHER_KEY, "--broadcast", f"127.255.255.255:{port}",
                  "--bind", net + "5", "--timeout", "0.5")  # fmt: skip
        time.sleep(0.5)  # the host reports what it ignored within 0.25 s
        host.terminate()
        host_out, _ = host.communicate(timeout=10)
    assert out.returncode == 1
    assert out.stdout == "0 session(s) found\n"
    assert one_line(out.stderr) == (
        f"pianode lan browse: no reply to the browse request sent to 127.255.255.255:{port}: no host there, or hosts "
        "with another game key (a host ignores a request whose challenge it cannot open)"
    )
    assert (f"ignored a browse request from {net}5:" in host_out
            and "its challenge did not verify with this game key" in host_out), host_out  # fmt: skip


def test_browse_of_another_system_version_says_which() -> None:
    net, port = loopback_block(), free_port()
    with started(*lan_host(net, port, "--version", "5.27"), ready="hosting network id"):
        browse = ["lan", "browse", "--game-key", GAME_KEY, "--version", "5.18", "--broadcast",
                  f"127.255.255.255:{port}", "--bind", net + "5", "--timeout", "0.5"]  # fmt: skip
        table = run(*browse)
        jsonl = run(*browse, "--format", "jsonl")
    assert table.returncode == 1 and jsonl.returncode == 1
    assert re.fullmatch(
        rf"pianode lan browse: 1 reply from 127\.\d+\.\d+\.\d+:{port} ignored: LAN system communication "
        r"version 8, this node speaks 7 \(Pia 5\.18\)", one_line(table.stderr))  # (the listener's 0.0.0.0 answers)
    records = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert records[-1]["event"] == "summary" and records[-1]["found"] == 0
    assert records[-1]["ignored"] == {"system_version": 1}  # one reply per request (REPLY_COPIES)
    assert [r["reason"] for r in records if r["event"] == "ignored"] == ["system_version"]


def test_join_of_a_full_session_says_it_is_full() -> None:
    net, port = loopback_block(), free_port()
    bc = f"127.255.255.255:{port}"
    with started(*lan_host(net, port, "--max", "2"), ready="hosting network id"):
        with started("lan", "join", "--game-key", GAME_KEY, "--bind", net + "3", "--broadcast", bc,
                     "--duration", "30", ready="joined network id"):  # fmt: skip
            table = run("lan", "join", "--game-key", GAME_KEY, "--bind", net + "4", "--broadcast", bc, "--timeout", "1")
            jsonl = run("lan", "join", "--game-key", GAME_KEY, "--bind", net + "4", "--broadcast", bc, "--timeout", "1",
                        "--format", "jsonl")  # fmt: skip
    assert table.returncode == 1 and jsonl.returncode == 1
    line = one_line(table.stderr)
    assert line.startswith("pianode lan join: no answer from a LAN session within 1 s of browsing: LAN session 0x")
    assert line.endswith(f"(host {net}2:49152) is full (2/2 players)")
    (failed,) = [json.loads(x) for x in jsonl.stdout.splitlines()]
    assert failed["event"] == "join_failed" and failed["why"][0].endswith("is full (2/2 players)")


def test_join_of_a_full_session_says_it_is_full_with_duration_as_without() -> None:
    """A join that --duration ends gives the reason (and the exit status) a join whose --timeout ran out gives."""
    net, port = loopback_block(), free_port()
    bc = f"127.255.255.255:{port}"
    join = ["lan", "join", "--game-key", GAME_KEY, "--bind", net + "4", "--broadcast", bc]
    with started(*lan_host(net, port, "--max", "2"), ready="hosting network id"):
        with started("lan", "join", "--game-key", GAME_KEY, "--bind", net + "3", "--broadcast", bc,
                     "--duration", "30", ready="joined network id"):  # fmt: skip
            timed_out = run(*join, "--timeout", "1")
            ended = run(*join, "--duration", "1")
            ended_jsonl = run(*join, "--duration", "1", "--format", "jsonl")
    assert ended.returncode == timed_out.returncode == ended_jsonl.returncode == 1
    assert one_line(ended.stderr) == one_line(timed_out.stderr)
    assert one_line(ended.stderr).endswith(f"(host {net}2:49152) is full (2/2 players)")
    (failed,) = [json.loads(x) for x in ended_jsonl.stdout.splitlines()]
    assert failed["event"] == "join_failed" and failed["why"][0].endswith("is full (2/2 players)")
    assert failed["ignored"] == {"full": 1}


def test_join_with_the_wrong_session_key_says_so_and_the_host_counts_the_bad_tags() -> None:
    net = loopback_block()
    with started("node", "--create", "--bind", net + "2", "--format", "jsonl", "--duration", "40",
                 ready='"event": "created"') as host:  # fmt: skip
        host_address = json.loads(host.first_line)["address"]  # type: ignore[attr-defined]
        out = run("node", "--join", host_address, "--session-key", OTHER_KEY, "--bind", net + "3", "--format", "jsonl")
        time.sleep(1.2)  # the host reports drops once a second
        host.terminate()
        host_out, _ = host.communicate(timeout=10)
    assert out.returncode == 1
    assert one_line(out.stderr) == (
        f"pianode node: join failed: the host at {host_address} did not answer the join: is --session-key the "
        "creator's (and --version and --network the same)?"
    )
    (failed,) = [json.loads(x) for x in out.stdout.splitlines()]
    assert failed["event"] == "join-failed" and "did not answer the join" in failed["message"]
    drops = [json.loads(x) for x in host_out.splitlines() if '"event": "dropped"' in x]
    assert drops and {d["reason"] for d in drops} >= {"bad_tag"}
    assert sum(d["count"] for d in drops if d["reason"] == "bad_tag") >= 1


def test_join_with_the_wrong_game_key_points_at_the_game_key() -> None:
    net, port = loopback_block(), free_port()
    with started(*lan_host(net, port), ready="hosting network id"):
        out = run("lan", "join", "--game-key", OTHER_KEY, "--bind", net + "3", "--broadcast", f"127.255.255.255:{port}",
                  "--timeout", "1")  # fmt: skip
    assert out.returncode == 1
    assert one_line(out.stderr) == (
        "pianode lan join: no answer from a LAN session within 1 s of browsing: no reply at all: no host there, "
        "or hosts with another game key (a host ignores a request whose challenge it cannot open)"
    )


def test_ldn_join_with_the_wrong_game_key_points_at_the_game_key() -> None:
    port = str(free_port())
    with started("ldn", "host", "--game-key", GAME_KEY, "--discovery-port", port, "--duration", "30",
                 ready="LDN network"):  # fmt: skip
        out = run("ldn", "join", "--game-key", OTHER_KEY, "--discovery-port", port, "--duration", "20")
    assert out.returncode == 1
    line = one_line(out.stderr)
    assert line.startswith("pianode ldn join: ") and "is --game-key the host's" in line


def test_decode_access_key_without_a_variant_names_the_missing_flag(tmp_path) -> None:  # type: ignore[no-untyped-def]
    capture = tmp_path / "x.jsonl"
    capture.write_text('{"hex": "00"}\n')
    done = subprocess.run([sys.executable, "-m", "pianode", "decode", str(capture), "--access-key", "8dtRv2oj"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("pianode decode: --access-key needs --prudp-variant NAME: which PRUDP variant the capture"
                           " holds (e.g. nintendo-v1)\n")


def test_pianode_node_says_every_drop_reason_in_words() -> None:
    from pianode.cli.node import DROP_HINTS
    from pianode.mesh.stats import DropReason

    assert set(DROP_HINTS) == {reason.value for reason in DropReason}


def test_more_ldn_stations_than_a_network_holds_are_handed_the_host_by_default() -> None:
    done = subprocess.run([sys.executable, "-m", "pianode", "mesh", "-n", "10", "--network", "ldn", "--bind",
                           loopback_block() + "2", "--duration", "0.3", "--format", "jsonl"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    assert summary["nodes"] == 10 and summary["formation"] == "matchmaking hand-off" and summary["ok"]
    refused = subprocess.run([sys.executable, "-m", "pianode", "mesh", "-n", "10", "--network", "ldn", "--discovery",
                              "on"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert refused.returncode == 2
    assert refused.stderr == ("pianode mesh: an LDN network has 2..8 stations, not 10 (--discovery off: the stations"
                              " are handed the host's address)\n")


def test_minus_v_is_pianode_s_own_log_not_other_libraries() -> None:
    import logging

    from pianode.cli.main import main

    root, ours = logging.getLogger(), logging.getLogger("pianode")
    saved = root.level, ours.level, list(root.handlers)
    try:
        assert main(["-v", "wireshark", "path"]) == 0
        assert ours.getEffectiveLevel() == logging.INFO
        assert not logging.getLogger("quic").isEnabledFor(logging.INFO)  # aioquic's, under -v
    finally:
        root.setLevel(saved[0])
        ours.setLevel(saved[1])
        root.handlers[:] = saved[2]
