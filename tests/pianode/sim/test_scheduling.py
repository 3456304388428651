"""The real-time class of a real-time session's station processes (pianode.sim.scheduling).

The decisions (ask, keep what ``chrt`` gave, give back when overloaded, say
why the OS refused) are checked with a recording stand-in for the OS calls;
the effect on the real process (its class while frames go out and after) in
a real session on loopback; the refusal in a real ``pianode mesh`` whose
process may not raise its class.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import trio

from loopback_addresses import loopback_block
from pianode.mesh.config import NodeConfig
from pianode.sim.mesh_run import MeshRun
from pianode.sim.scheduling import GIVE_BACK_LOAD, GIVE_BACK_SECONDS, PRIORITY, RealtimeClass, describe

linux_only = pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="the real-time class is Linux's")


class FakeOs:
    """os.sched_getscheduler/os.sched_setscheduler for one process, recording every change."""

    def __init__(self, policy: int = 0, refuse: bool = False) -> None:
        self.policy = policy
        self.refuse = refuse
        self.calls: list[tuple[int, int]] = []

    def get(self, pid: int) -> int:
        return self.policy

    def set(self, pid: int, policy: int, param: Any) -> None:
        if self.refuse:
            raise PermissionError(1, "Operation not permitted")
        self.calls.append((policy, param.sched_priority))
        self.policy = policy


def watched(fake: FakeOs, mode: str = "auto") -> RealtimeClass:
    return RealtimeClass(mode, setter=fake.set, getter=fake.get)


@linux_only
def test_auto_asks_for_round_robin_at_its_priority_and_gives_it_back_after() -> None:
    fake = FakeOs()
    rc = watched(fake)
    rc.enter(100.0, 5.0)
    assert fake.calls == [(os.SCHED_RR, PRIORITY)]
    rc.check(100.5, 5.45)  # before a second has passed: no look
    rc.check(101.0, 5.5)  # half a core: kept
    assert fake.policy == os.SCHED_RR
    rc.leave()
    assert fake.calls[-1] == (0, 0) and fake.policy == 0
    d = rc.as_dict()
    assert d["real_time"] and d["policy"] == "SCHED_RR" and d["priority"] == PRIORITY
    assert d["given_back_after_s"] is None and d["refusal"] is None


@linux_only
def test_a_process_that_needs_more_than_the_give_back_load_for_seconds_in_a_row_returns_to_its_class() -> None:
    fake = FakeOs()
    rc = watched(fake)
    rc.enter(10.0, 0.0)
    now, cpu = 10.0, 0.0
    for load in [0.6] + [GIVE_BACK_LOAD + 0.05] * (GIVE_BACK_SECONDS - 1) + [0.5]:  # a catch-up, then calm
        now, cpu = now + 1.0, cpu + load
        rc.check(now, cpu)
    assert fake.policy == os.SCHED_RR and rc.given_back_after is None
    for _ in range(GIVE_BACK_SECONDS):  # overloaded for good
        now, cpu = now + 1.0, cpu + 0.99
        assert fake.policy == os.SCHED_RR
        rc.check(now, cpu)
    assert fake.policy == 0
    assert rc.given_back_after == pytest.approx(now - 10.0)
    calls = len(fake.calls)
    rc.check(now + 5, cpu + 5)
    rc.leave()
    assert len(fake.calls) == calls  # given back once; leaving changes nothing more
    assert f"given back after {now - 10.0:.0f} s" in describe([rc.as_dict()])


@linux_only
def test_a_refusal_runs_in_the_normal_class_and_says_how_to_get_it() -> None:
    rc = watched(FakeOs(refuse=True))
    rc.enter(0.0, 0.0)
    rc.check(5.0, 5.0)
    rc.leave()
    d = rc.as_dict()
    assert not d["real_time"] and d["policy"] == "normal"
    assert "refused" in d["refusal"] and "CAP_SYS_NICE" in d["refusal"] and f"ulimit -r {PRIORITY}" in d["refusal"]
    assert describe([d]).startswith("normal class: the OS refused")


@linux_only
def test_a_class_chosen_before_the_session_is_kept_and_normal_never_asks() -> None:
    fake = FakeOs(policy=os.SCHED_FIFO)
    rc = watched(fake)
    rc.enter(0.0, 0.0)
    rc.check(2.0, 2.0)  # even fully loaded: not ours to give back
    rc.leave()
    assert fake.calls == [] and fake.policy == os.SCHED_FIFO
    assert rc.as_dict()["policy"] == "inherited"
    plain = FakeOs()
    rc = watched(plain, "normal")
    rc.enter(0.0, 0.0)
    rc.leave()
    assert plain.calls == [] and describe([rc.as_dict()]) == "normal class (--scheduling normal)"


def test_processes_that_differ_are_each_named() -> None:
    granted = {"mode": "auto", "real_time": True, "policy": "SCHED_RR", "priority": PRIORITY, "refusal": None,
               "given_back_after_s": None}  # fmt: skip
    refused = dict(granted, real_time=False, policy="normal", priority=None, refusal="the OS refused it")
    assert describe([granted, granted]).endswith("(each of 2 processes)")
    line = describe([granted, refused])
    assert line.startswith("process 1: real-time class") and "process 2: normal class: the OS refused it" in line


class _Sampling(MeshRun):
    """A run that notes the process's class while its frames go out."""

    seen: list[int]

    async def _ticks(self, *args: Any) -> None:
        self.seen = [os.sched_getscheduler(0)]
        await super()._ticks(*args)
        self.seen.append(os.sched_getscheduler(0))


@linux_only
@pytest.mark.parametrize("mode", ["auto", "normal"])
def test_a_real_session_runs_its_frames_in_the_class_it_reports_and_returns_to_normal(mode: str) -> None:
    before = os.sched_getscheduler(0)
    assert before == os.SCHED_OTHER
    run = _Sampling(NodeConfig(version="5.29", seed=3), nodes=3, base_address=loopback_block() + "81", rate=60,
                    duration=0.5, scheduling=mode)  # fmt: skip
    result = trio.run(run.run)
    assert result.ok, result.summary()
    (reported,) = result.scheduling
    if reported["real_time"]:
        assert mode == "auto" and run.seen == [os.SCHED_RR, os.SCHED_RR]
    else:
        # Normal class while frames went out: asked and refused (and it says why), or never asked.
        assert run.seen == [os.SCHED_OTHER, os.SCHED_OTHER]
        assert (mode == "auto") == (reported["refusal"] is not None)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the class the process had before


@linux_only
def test_a_mesh_whose_process_may_not_raise_its_class_says_why_and_runs() -> None:
    # Without CAP_SYS_NICE (root drops it; anyone else lacks it unless RLIMIT_RTPRIO allows).
    limits = subprocess.run(["sh", "-c", "ulimit -r"], capture_output=True, text=True).stdout.strip()
    prefix: list[str] = []
    if os.geteuid() == 0:
        prefix = ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice"]
    elif limits != "0":
        prefix = ["prlimit", "--rtprio=0"]
    out = subprocess.run([*prefix, sys.executable, "-m", "pianode", "mesh", "-n", "3", "--rate", "30",
                          "--duration", "0.5", "--bind", loopback_block() + "85", "--format", "jsonl"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "Traceback" not in out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["result"] == "OK", out.stdout[-2000:] + out.stderr
    (reported,) = summary["frames"]["scheduling"]
    assert reported["real_time"] is False and "the OS refused the real-time class" in reported["refusal"]
