"""A mesh run split over processes (`pianode mesh --processes`): one report, one recording, faults, exit codes.

Small station counts and low rates: these check what the split run reports and
records, never how fast it is.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from loopback_addresses import loopback_block

from pianode.cli.main import main as cli_main
from pianode.mesh.config import NodeConfig
from pianode.sim.faults import LinkFaults
from pianode.sim.mesh_procs import ProcessMeshRun, default_processes
from pianode.sim.mesh_run import MeshRunResult


def _decode(capsys: pytest.CaptureFixture[str], pcap: str, session: str) -> list[dict[str, object]]:
    capsys.readouterr()
    assert cli_main(["decode", pcap, "--session", session, "--format", "jsonl"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


async def test_split_exchange_is_one_report_of_every_station() -> None:
    nodes, messages = 5, 6
    run = ProcessMeshRun(NodeConfig(version="5.18", seed=21), processes=2, nodes=nodes,
                         base_address=loopback_block() + "10", messages=messages, duration=0.2)  # fmt: skip
    result = await run.run()
    assert result.ok, result.problems
    assert result.processes == 2
    # Every station sent to every other one, across the process boundary too, exactly once and in order.
    assert result.reliable_expected == result.reliable_delivered == nodes * (nodes - 1) * messages
    assert result.unreliable_sent == nodes * (nodes - 1) * messages
    assert result.duplicates == result.out_of_order == 0
    assert sorted(row["index"] for row in result.stations) == list(range(nodes))
    assert [row["host"] for row in result.stations].count(True) == 1
    assert result.host_index == 0


async def test_split_realtime_session_records_one_pcap_that_decodes_completely(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, rate, duration = 4, 20, 0.5
    pcap = tmp_path / "split.pcap"
    run = ProcessMeshRun(NodeConfig(version="5.18", seed=22), processes=2, nodes=nodes, rate=rate,
                         duration=duration, base_address=loopback_block() + "20", record=str(pcap))  # fmt: skip
    result = await run.run()
    assert not result.problems, result.problems
    frames = int(rate * duration)
    assert result.frames_expected == result.frames_delivered == nodes * (nodes - 1) * frames
    assert len(result.latencies) == result.frames_delivered
    # Latency on the shared clock: a frame's latency is small and never negative, whichever process sent it.
    assert all(0 <= latency < 10 for latency in result.latencies)
    assert result.session_start is not None and result.cpu_load is not None
    assert result.warm_up == (nodes * (nodes - 1), nodes * (nodes - 1))  # every stream, across the processes
    assert result.record is not None and result.record["pcap"] == str(pcap)
    rows = _decode(capsys, str(pcap), result.record["session"])
    assert len(rows) == result.record["datagrams"] > nodes * (nodes - 1) * frames
    assert all(row["authenticated"] is True and row["error"] is None for row in rows)
    # Both processes' stations are in it, merged in time order.
    sources = {str(row["src"]).rsplit(":", 1)[0] for row in rows}
    assert len(sources) == nodes
    times = [float(row["time"]) for row in rows]  # type: ignore[arg-type]
    assert times == sorted(times)


async def test_split_run_applies_faults_in_every_process_and_still_delivers() -> None:
    nodes = 4
    faults = LinkFaults(loss=0.1, duplicate=0.1, seed=5)
    run = ProcessMeshRun(NodeConfig(version="5.18", seed=23), processes=2, nodes=nodes, messages=8, duration=0.3,
                         base_address=loopback_block() + "30", faults=faults)  # fmt: skip
    result = await run.run()
    assert result.ok, result.problems
    assert result.faults["lost"] > 0 and result.faults["duplicated"] > 0
    assert result.faults["sent"] >= result.faults["delivered"] - result.faults["duplicated"]
    assert result.reliable_delivered == result.reliable_expected == nodes * (nodes - 1) * 8
    assert sum(row["lost"] for row in result.stations) > 0  # retransmitted across the processes


async def test_split_run_migrates_the_host_across_processes() -> None:
    nodes = 4
    run = ProcessMeshRun(NodeConfig(version="5.29", seed=24), processes=2, nodes=nodes, messages=4, duration=0.2,
                         base_address=loopback_block() + "40", leave_host=True, group_fanout="broadcast")  # fmt: skip
    result = await run.run()
    assert result.ok, result.problems
    assert sorted(result.host_changes) == [f"station {i}: 0 -> 1" for i in (1, 2, 3)]
    assert result.host_index == 1
    assert result.reliable_delivered == result.reliable_expected == nodes * (nodes - 1) * 4 + 3 * 2 * 2


async def test_a_mesh_that_does_not_form_is_a_failed_split_run() -> None:
    run = ProcessMeshRun(NodeConfig(version="5.18", seed=25, join_timeout=1.0), processes=2, nodes=3,
                         base_address=loopback_block() + "50", faults=LinkFaults(loss=1.0), formation_timeout=1.0)  # fmt: skip
    result = await run.run()
    assert not result.ok
    assert result.verdict == "FAILED"
    assert any("did not form" in p or "join failed" in p for p in result.problems)


async def test_workers_as_many_as_the_cores_each_keep_to_a_core_of_their_own() -> None:
    import os

    from pianode.sim.mesh_procs import _cores_for

    cores = sorted(os.sched_getaffinity(0))
    assert _cores_for(len(cores) + 1) is None  # more workers than cores: none has one of its own
    if len(cores) == 1:
        assert _cores_for(1) is None  # (one process is no split: nothing to pin)
        return
    runs = []
    for pin in (True, False):
        run = ProcessMeshRun(NodeConfig(version="5.18", seed=22), processes=len(cores), nodes=len(cores) + 1,
                             base_address=loopback_block() + "30", messages=2, duration=0.2, pin_cores=pin)  # fmt: skip
        result = await run.run()
        assert result.ok, result.problems
        runs.append(result)
    # What each worker process reported of its own affinity: one core each, all different.
    assert runs[0].cores == cores and runs[0].summary()["cores"] == cores
    assert runs[1].cores is None and runs[1].summary()["cores"] is None


def test_default_processes_split_only_a_real_time_session_that_needs_it() -> None:
    assert default_processes(32, 60, cpus=2) == 2
    assert default_processes(32, 60, cpus=1) == 1
    assert default_processes(32, None, cpus=2) == 1  # no frame clock: one process
    assert default_processes(4, 60, cpus=2) == 1  # 720 datagrams a second
    assert default_processes(3, 240, cpus=8) == 1
    assert default_processes(32, 240, cpus=64) == 12


def test_a_session_with_too_many_frames_late_is_late_not_ok() -> None:
    result = MeshRunResult(version="5.18", network="lan", nodes=2)
    result.frames_expected = result.frames_delivered = 100
    result.latencies = [0.001] * 98 + [0.2] * 2
    assert result.late and not result.ok and result.verdict == "LATE"
    summary = result.summary()
    assert summary["result"] == "LATE" and summary["ok"] is False
    assert summary["frames"]["within_threshold_pct"] == 98.0
    result.latencies = [0.001] * 99 + [0.2]
    assert not result.late and result.ok and result.summary()["result"] == "OK"
    result.problems.append("something else")
    assert result.verdict == "FAILED"


def _pianode(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pianode", *argv], capture_output=True, text=True, timeout=timeout)


def test_cli_split_run_prints_one_summary_and_exits_0() -> None:
    out = _pianode("mesh", "-n", "4", "--processes", "2", "--rate", "20", "--duration", "0.5", "--version", "5.18",
                   "--bind", loopback_block() + "60", "--seed", "3", "--format", "jsonl")  # fmt: skip
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, out.stdout
    s = json.loads(lines[0])
    assert s["processes"] == 2 and s["formation"] == "matchmaking hand-off"
    assert s["frames"]["delivered"] == s["frames"]["expected"] == 4 * 3 * 10
    if s["result"] == "OK":
        assert out.returncode == 0 and s["ok"] is True
    else:  # a machine too busy for real time: LATE, and the exit code says so
        assert s["result"] == "LATE" and out.returncode == 1


def test_cli_split_run_that_fails_exits_1() -> None:
    # Every datagram lost: nobody joins; one summary, FAILED, exit 1.
    out = _pianode("mesh", "-n", "2", "--processes", "2", "--loss", "1", "--duration", "0", "--version", "5.18",
                   "--bind", loopback_block() + "70", "--format", "jsonl", timeout=180)  # fmt: skip
    assert out.returncode == 1, out.stderr
    s = json.loads(out.stdout.strip().splitlines()[-1])
    assert s["ok"] is False and s["result"] == "FAILED" and s["processes"] == 2
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-n", "2", "--processes", "3"], "--processes 3: more processes than the 2 stations"),
        (["-n", "4", "--processes", "2", "--discovery", "on"], "--processes: a mesh split over processes"),
        (["--processes", "0"], "--processes"),
    ],
)
def test_cli_bad_processes_is_one_line_and_exit_2(argv: list[str], message: str) -> None:
    out = _pianode("mesh", *argv)
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1
