"""Traffic classes: a saturated bulk stream does not delay control messages or relayed datagrams.

Three processes, so that no end's measurements wait for another end's CPU
time: the hub (``pianode relay serve``), site A (tests/support/relay_load_site.py)
and site B (this test).  A sends a probe datagram to B every 5 ms through the
hub, stamped with ``time.monotonic()`` (one clock for every process of the
machine), and pings the hub on the control stream every 10 ms; B pings the hub
every 10 ms too.  Thirteen phases of 1 s alternate in the same run, idle and loaded;
in a loaded phase A keeps its bulk stream to B saturated (megabytes always
waiting), so bulk competes with the probes on A's connection to the hub and
on the hub's connection to B, both ways through the scheduler.

Each loaded phase's p95 is compared with the mean p95 of the idle phases
either side; the median of that added delay over the six loaded phases may be
4 ms at most, for each class (measured: 1.5–2.6 ms; the bound leaves room for a
busy machine, where three Python processes share two cores).  Bulk must have been waiting the whole of every
loaded phase and moving (over 1 MB/s).  Alternating the phases in one run
cancels what other work on the machine does to both kinds alike, and the
median leaves out a phase spoilt by a burst of it (seen: one phase of 50 ms
among phases of 2 ms, on a machine busy with other work).  (With the scheduler off, every bulk byte
handed to aioquic at once, the same test measured 60 ms added.)
"""

from __future__ import annotations

import json
import pathlib
import socket
import statistics
import struct
import subprocess
import sys
import time
from typing import Any

import pytest
import trio
from loopback_addresses import free_port, loopback_block
from relay_pki import Pki, make_pki

from pianode.relay.client import RelayClient

LOAD_SITE = pathlib.Path(__file__).resolve().parents[2] / "support" / "relay_load_site.py"
PHASES = 13  # odd: idle, even: loaded; every loaded phase between two idle ones
PHASE_SECONDS = 1.0  # the first 0.2 s of each settle and are not counted
PROBE_PORT = 49152
ALLOWED_ADDED_DELAY = 0.004


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.95 * len(xs)))]


async def _lines(stream: trio.abc.ReceiveStream, out: trio.MemorySendChannel[str]) -> None:
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            await out.send(line.decode())


async def _start(argv: list[str], nursery: trio.Nursery) -> tuple[trio.Process, trio.MemoryReceiveChannel[str]]:
    process = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    send, receive = trio.open_memory_channel[str](100)
    assert process.stdout is not None
    nursery.start_soon(_lines, process.stdout, send)
    return process, receive


async def _drain(lines: trio.MemoryReceiveChannel[str]) -> None:
    async for _ in lines:
        pass


async def _measure(pki: Pki, prefix: str) -> dict[str, Any]:
    hub_address = (prefix + "1", free_port())
    ca, hub_pem, hub_key = pki.files("hub")
    _, a_pem, a_key = pki.files("site-a")
    hub_argv = [sys.executable, "-m", "pianode", "relay", "serve", "--listen", f"{hub_address[0]}:{hub_address[1]}",
                "--ca", str(ca), "--cert", str(hub_pem), "--key", str(hub_key), "--report", "0"]  # fmt: skip
    processes: list[trio.Process] = []
    delays: dict[int, list[float]] = {}
    b_pings: dict[int, list[float]] = {}
    bulk_bytes: dict[int, int] = {}
    phase = {"n": 0}
    try:
        async with trio.open_nursery() as nursery:
            hub, hub_out = await _start(hub_argv, nursery)
            processes.append(hub)
            async for line in hub_out:
                if "hub on" in line:
                    break
            nursery.start_soon(_drain, hub_out)  # its pipe never fills
            b = RelayClient(pki.credentials("site-b"), hub_address, bind=(prefix + "3", 0), log_line=lambda line: None)
            await nursery.start(b.run)
            assert b.address is not None
            sb = b.site.socket(socket.AF_INET, socket.SOCK_DGRAM)
            await sb.bind((b.address, PROBE_PORT))

            def on_bulk(msg) -> None:  # type: ignore[no-untyped-def]
                if phase["n"]:
                    bulk_bytes[phase["n"]] = bulk_bytes.get(phase["n"], 0) + len(msg.data)

            b.on_bulk = on_bulk
            b.on_pong = lambda token, rtt: b_pings.setdefault(n, []).append(rtt) if (n := phase["n"]) else None
            site_a, a_out = await _start(
                [sys.executable, str(LOAD_SITE), f"{hub_address[0]}:{hub_address[1]}", str(ca), str(a_pem), str(a_key),
                 b.address], nursery)  # fmt: skip
            processes.append(site_a)
            ready = await a_out.receive()
            assert ready.startswith("ready "), ready

            async def read() -> None:
                while True:
                    data, _ = await sb.recvfrom(2048)
                    now = time.monotonic()
                    sent, n = struct.unpack("!dI", data[:12])
                    if n and n == phase["n"]:
                        delays.setdefault(n, []).append(now - sent)

            async def ping() -> None:
                while True:
                    if b.conn is not None:
                        b.ping()
                    await trio.sleep(0.01)

            nursery.start_soon(read)
            nursery.start_soon(ping)
            assert site_a.stdin is not None
            for n in range(1, PHASES + 1):
                phase["n"] = 0
                await site_a.stdin.send_all(f"phase {n} {'idle' if n % 2 else 'bulk'}\n".encode())
                await trio.sleep(0.2)
                phase["n"] = n
                await trio.sleep(PHASE_SECONDS - 0.2)
            phase["n"] = 0
            await site_a.stdin.send_all(b"quit\n")
            report = json.loads(await a_out.receive())
            nursery.cancel_scope.cancel()
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
            await process.wait()
    a_pings = {int(n): rtts for n, rtts in report["pings"].items()}
    return {"datagram": delays, "control (A)": a_pings, "control (B)": b_pings, "bulk": bulk_bytes,
            "backlog_min": {int(n): v for n, v in report["backlog_min"].items()}}  # fmt: skip


def _added_delays(per_phase: dict[int, list[float]]) -> list[float]:
    """Per loaded phase: its p95 less the mean p95 of the idle phases either side."""
    p95 = {n: _p95(xs) for n, xs in per_phase.items()}
    return [p95[n] - (p95[n - 1] + p95[n + 1]) / 2 for n in range(2, PHASES, 2)]


async def test_saturated_bulk_does_not_delay_control_or_datagrams(pki: Pki) -> None:
    with trio.fail_after(60):
        m = await _measure(pki, loopback_block())
    classes = ("datagram", "control (A)", "control (B)")
    for name in classes:
        for n in range(1, PHASES + 1):
            assert len(m[name].get(n, ())) >= 50, (name, n)
    added = {name: _added_delays(m[name]) for name in classes}
    loaded_phases = range(2, PHASES, 2)
    bulk_rate = {n: m["bulk"].get(n, 0) / (PHASE_SECONDS - 0.2) for n in loaded_phases}
    figures = {
        "p95 ms per phase (odd idle, even loaded)": {
            name: " ".join(f"{_p95(m[name][n]) * 1000:.2f}" for n in range(1, PHASES + 1)) for name in classes
        },
        "added p95 ms per loaded phase": {name: " ".join(f"{x * 1000:.2f}" for x in xs) for name, xs in added.items()},
        "bulk MB/s": {n: round(r / 1e6, 1) for n, r in bulk_rate.items()},
        "least bulk waiting": m["backlog_min"],
    }
    print(figures)
    for n in loaded_phases:
        assert m["backlog_min"].get(n, 0) > 0, figures  # saturated all phase
        assert bulk_rate[n] > 1e6, figures  # and moving
    for name, xs in added.items():
        # The median over the loaded phases: a burst of other work on the machine spoils one phase, not the figure.
        assert statistics.median(xs) <= ALLOWED_ADDED_DELAY, (name, figures)
