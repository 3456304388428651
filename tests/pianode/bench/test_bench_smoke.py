"""Smoke test of ``pianode bench``: every section runs on tiny budgets and reports its figures.

Structure only: the figures' values depend on the machine, so no test here
asserts a timing or a PASS.  What must hold is that each section measured
something, labelled it with its target where the issue sets one, and that the
table and the JSON agree.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from pianode.bench.figures import QUICK, SECTIONS, Budget
from pianode.bench.run import add_arguments, budget_from_args, run_benchmark
from pianode.cli.main import main

TINY = [
    "--repeats", "1", "--cell-seconds", "0.002", "--sizes", "1024",
    "--rounds", "2", "--receive-seconds", "0.05", "--datagrams", "4000",
    "--formation-sizes", "2,3", "--stations", "3", "--rtt-pings", "10",
    "--session-seconds", "0.5", "--rate", "10", "--floor-seconds", "0.1",
]  # fmt: skip


def test_every_section_reports_through_the_cli(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "bench.json"
    status = main(["bench", *TINY, "--json", str(out_json)])
    table = capsys.readouterr().out
    report = json.loads(out_json.read_text())

    assert report["errors"] == []
    figures = report["figures"]
    assert {f["section"] for f in figures} == set(SECTIONS)
    # Exit status follows the verdicts: 0 only when no targeted figure failed.
    assert status == (0 if report["summary"]["failed"] == 0 else 1)
    assert report["summary"]["passed"] + report["summary"]["failed"] + report["summary"]["informational"] == len(figures)

    # codec: both directions for each GCM profile and backend plus ECB+HMAC; seal+encode is targeted at 1024 B.
    codec = [f for f in figures if f["section"] == "codec"]
    names = {f["name"] for f in codec}
    assert "5.3 ecb+hmac 1024 B seal+encode" in names
    assert "5.18 pycryptodome 1024 B decode+open" in names
    assert "5.29 pycryptodome 1024 B seal+encode" in names
    # Every GCM ratio is against the library's own call, and the node's stream sealer and opener are measured too.
    assert "5.18 cryptography 1024 B stream seal (the node's sealer)" in names
    assert "5.29 pycryptodome 1024 B stream open (the node's opener)" in names
    for f in codec:
        assert f["unit"] == "%" and f["value"] > 0
        if "ecb+hmac" not in f["name"]:
            assert "vs library call" in f["note"]
        if f["name"].endswith("seal+encode"):
            want = "≥ 25 %" if " cryptography " in f["name"] else "≥ 50 %"
            assert f["target"] == want and isinstance(f["passed"], bool)
        else:
            assert f["target"] == "" and f["passed"] is None

    # The receive ratio against a bare drain, fed live by a sender and from a prefilled socket.
    receive = [f for f in figures if f["section"] == "receive"]
    assert [f["target"] for f in receive] == ["≥ 25 %", "≥ 25 %", "", "≥ 100k/s", ""]
    prefilled, events, stages = receive[1], receive[2], receive[4]
    assert "live sender" in receive[0]["name"] and "prefilled socket" in prefilled["name"]
    assert "data handler" in prefilled["note"] and "event channel" in events["name"]
    assert prefilled["unit"] == events["unit"] == "%" and stages["unit"] == "µs"
    assert len(prefilled["detail"]["node_us"]) == len(prefilled["detail"]["bare_us"]) == 2  # one pair per round
    assert len(events["detail"]["events_us"]) == 2 and events["value"] > 0
    assert stages["detail"]["accepted"] == stages["detail"]["datagrams"] > 0  # fresh nonces: none refused
    assert 0 < stages["detail"]["decode_us"] and 0 < stages["value"] and 0 < prefilled["value"]
    assert stages["detail"]["decode_path"] == "the station's opener"  # the node opened the stream's packets
    node_stats = receive[0]["detail"]["node_statistics"]
    assert receive[0]["value"] > 0, "the node delivered none of the forged datagrams"
    rates = receive[0]["detail"]["node_rates"]
    assert len(rates) == 2 and min(rates) > 0  # the second round's ids follow on from the first's
    assert node_stats["drops"].get("replayed", 0) == 0  # forged ids follow on from the peer's counter

    formation = [f for f in figures if f["section"] == "formation"]
    assert [f["name"].split()[0] for f in formation] == ["2", "3"]
    assert all(f["value"] is not None and f["value"] > 0 for f in formation)
    assert all(f["passed"] is None for f in formation)  # the target is set at 32 stations only

    (memory,) = [f for f in figures if f["section"] == "memory"]
    assert memory["unit"] == "KiB" and memory["value"] > 0 and memory["target"] == "< 1024 KiB"

    (rtt,) = [f for f in figures if f["section"] == "rtt"]
    assert rtt["unit"] == "µs" and rtt["target"] == "< 100 µs"
    assert len(rtt["detail"]["node_medians_us"]) == 2  # one median per round

    # Three real-time sessions (5.18 unicast, 5.29 broadcast, 5.29 unicast), each with five figures, the last
    # its CPU per delivered frame against the bare-Python loop; the target is on 5.18 unicast.
    session = [f for f in figures if f["section"] == "session"]
    assert len(session) == 15
    for run, (shape, targeted) in enumerate([("Pia 5.18, unicast", True), ("Pia 5.29, broadcast", False),
                                             ("Pia 5.29, unicast", False)]):  # fmt: skip
        figs = session[5 * run : 5 * run + 5]
        assert all(shape in f["name"] for f in figs)
        assert figs[3]["unit"] == "×" and figs[3]["value"] > 0
        assert figs[1]["passed"] is True, figs[1]["note"]  # every reliable message arrives
        assert figs[2]["value"] == 3.0
        cpu = figs[4]
        assert cpu["name"].endswith("CPU per delivered frame vs a bare-Python loop")
        assert cpu["unit"] == "×" and cpu["value"] > 0 and cpu["detail"]["floor"]["frames"] > 0
        floor = cpu["detail"]["floor"]
        assert 0 < floor["socket_us_per_frame"] and 0 < floor["cpu_us_per_frame"]
        assert floor["rate"] == 10.0 and "at 10 Hz as the session" in cpu["note"]  # paced as the session
        # Measured before the session and after it: the reference is their mean, both shown.
        assert floor["cpu_us_per_frame"] == pytest.approx((floor["before"] + floor["after"]) / 2)
        assert f"the mean of {floor['before']:.1f} µs just before the session and {floor['after']:.1f} µs just after" in cpu["note"]
        assert (cpu["target"], isinstance(cpu["passed"], bool)) == (("≤ 2.00", True) if targeted else ("", False))

    # The table shows each figure with its verdict.
    lines = table.splitlines()
    assert lines[0].split()[:5] == ["section", "measurement", "value", "target", "verdict"]
    for f in figures:
        row = next(line for line in lines if f["name"] in line)
        verdict = "-" if f["passed"] is None else ("PASS" if f["passed"] else "FAIL")
        assert f" {verdict} " in row + " "


def test_quick_budget_and_overrides() -> None:
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    budget = budget_from_args(p.parse_args(["--quick", "--sizes", "64,1400", "--backend", "pycryptodome"]))
    assert budget.repeats == QUICK.repeats and budget.sizes == (64, 1400)
    assert budget.backends == ("pycryptodome",) and budget.node_backend == "pycryptodome"
    assert budget_from_args(p.parse_args([])) == Budget()
    for bad in (["--sections", "codec,warp"], ["--stations", "40"], ["--repeats", "0"], ["--datagrams", "50"]):
        with pytest.raises(ValueError):
            budget_from_args(p.parse_args(bad))


def test_a_failing_section_is_reported_not_raised() -> None:
    budget = Budget(formation_sizes=(2,), formation_repeats=1, version="4.10")  # 4.10 has no LAN mode: refused
    report = run_benchmark(budget, ["formation"])
    assert report.figures == []
    assert len(report.errors) == 1 and report.errors[0].startswith("formation: ConfigError")
    assert not report.ok


def test_script_wrapper_rejects_bad_budgets() -> None:
    script = pathlib.Path(__file__).resolve().parents[3] / "scripts" / "bench.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--sections", "nope"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "unknown section" in proc.stderr


def test_the_session_runs_as_pianode_mesh_does_over_its_processes(tmp_path: pathlib.Path) -> None:
    # The session figures are those of the command users run: split over processes (here 2, as pianode mesh
    # --processes 2), every process's CPU counted, the frame clock's own pace, the scheduling class said.
    # (A process of its own: the split run's worker processes, and the helper process multiprocessing keeps
    # after spawning them, are its children, not the test run's.)
    out_json = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "pianode", "bench", "--sections", "session", "--session-version", "5.18", "--stations",
         "4", "--rate", "10", "--session-seconds", "0.5", "--floor-seconds", "0.1", "--session-processes", "2",
         "--scheduling", "normal", "--json", str(out_json)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    report = json.loads(out_json.read_text())
    assert report["errors"] == [] and done.returncode in (0, 1), done.stderr
    on_time, reliable, kept, pace, cpu = report["figures"]
    for f in (on_time, reliable, kept, pace, cpu):
        assert "(Pia 5.18, unicast, 2 processes)" in f["name"]
    assert reliable["passed"] is True and kept["value"] == 4.0
    assert on_time["detail"]["summary"]["processes"] == 2
    assert "the 2 processes' CPU together" in on_time["note"] and "normal class (--scheduling normal)" in on_time["note"]
    assert pace["name"].endswith("kept real time (frame clock's wall time ÷ its schedule)")
    assert 1.0 <= pace["value"] < 3.0  # 5 frames at 10 Hz: the clock ran at least its schedule
    # CPU per frame: that of both station processes while their frames went out (MeshRunResult.cpu_time).
    assert cpu["detail"]["node_us"] > 0 and cpu["target"] == "≤ 2.00"
    one = cpu["detail"]["floor"]["one_process"]  # (the split session's floor in one process: bracketed too)
    assert one["cpu_us_per_frame"] == pytest.approx((one["before"] + one["after"]) / 2)


@pytest.mark.parametrize(("rate", "backend"), [(100.0, "cryptography"), (None, "cryptography"), (100.0, "pycryptodome")])
def test_the_bare_loop_counts_its_frames_and_what_the_aead_adds(rate: float | None, backend: str) -> None:
    # Paced: round(seconds * rate) rounds, each a frame from every station to every other; flat out: as many
    # as fit.  Without the AEAD a frame costs less, the sockets' share: measured flat out, where a tick's
    # wake-up (the same with and without it, and large against 56 frames a tick) does not blur it.
    # (pycryptodome: a call per station's frame to all and per socket's batch, as the node makes them.)
    from pianode.bench.floor import bare_frame_floor

    floor = bare_frame_floor(8, backend, 0.3, rate=rate, first_address="127.0.57.1")
    assert floor["backend"] == backend
    assert floor["rate"] == rate
    if rate is not None:
        assert floor["frames"] == 30 * 8 * 7
    else:
        assert floor["frames"] > 30 * 8 * 7
    assert 0 < floor["socket_us_per_frame"] and 0 < floor["cpu_us_per_frame"]
    if rate is None:
        assert floor["socket_us_per_frame"] < floor["cpu_us_per_frame"]


@pytest.mark.parametrize("backend", ["cryptography", "pycryptodome"])
def test_the_bare_loop_split_over_processes_delivers_every_frame(backend: str) -> None:
    # As `pianode mesh --processes 2` splits a session: every frame between the workers crosses to the
    # other process and is counted there; the same rounds, the same frames as in one process.
    from pianode.bench.floor import bare_frame_floor

    one = bare_frame_floor(8, backend, 0.3, rate=100.0, first_address="127.0.57.1")
    split = bare_frame_floor(8, backend, 0.3, rate=100.0, first_address="127.0.57.1", processes=2)
    assert split["processes"] == 2 and one["processes"] == 1
    assert split["frames"] == one["frames"] == 30 * 8 * 7
    assert 0 < split["socket_us_per_frame"] and 0 < split["cpu_us_per_frame"]


def test_profile_with_no_profiled_section_is_refused_and_makes_no_folder(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --profile profiles the receive path and the session; asked for with neither among the sections it
    # would profile nothing and leave an empty folder behind, so it is refused before anything runs.
    where = tmp_path / "profiles" / "run1"
    status = main(["bench", "--sections", "codec,rtt", "--profile", str(where)])
    err = capsys.readouterr().err
    assert status == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "--profile" in lines[0] and "receive" in lines[0] and "session" in lines[0] and "codec,rtt" in lines[0]
    assert not (tmp_path / "profiles").exists()


def test_profile_writes_what_it_profiled_for_each_profiled_section(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pstats

    where = tmp_path / "profiles"
    status = main(["bench", *TINY, "--sections", "session", "--profile", str(where)])
    err = capsys.readouterr().err
    assert status in (0, 1), err
    # Only the section asked for: its cProfile data, which pstats reads, and the top of it as text.
    assert sorted(p.name for p in where.iterdir()) == ["session.pstats", "session.txt"]
    functions = {name for _, _, name in pstats.Stats(str(where / "session.pstats")).stats}
    assert "receive_batch" in functions and "_ticks" in functions  # the node's receive loop, the frame clock
    assert "tottime" in (where / "session.txt").read_text()
    assert f"profile session: {where / 'session.pstats'}" in err
