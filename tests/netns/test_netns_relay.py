"""Two places that cannot reach each other play one LAN session through a relay hub in a third.

The test builds its own namespaces with ``scripts/netns/relay_sites.py`` and
removes them in a ``finally``: a hub namespace, and sites A and B each linked
only to the hub by a veth, with private addresses (A is 10.99.1.2, B is
10.99.2.2) and no route to each other.  ``pianode relay serve`` runs in the
hub; ``pianode lan host`` in A and ``pianode lan join`` in B, each with
``--relay`` and the certificates of one CA.  The joiner finds the host by LAN
discovery alone (a broadcast the hub fans out to the room), joins its mesh,
and both send reliable and unreliable data the other receives.
"""

from __future__ import annotations

import contextlib
import importlib.util
import pathlib
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from cli_processes import CliProcess, until
from peers import peer_unavailable
from relay_pki import Pki, make_pki

KEY = "ee182a63e216cdb1f51ad4bed8cf6508"  # Splatoon 2 (spec §3.6)
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"pianode_netns_{name}", ROOT / "scripts" / "netns" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


harness = _load("relay_sites")
segment_tools = _load("lan_segment")


@contextlib.contextmanager
def relay_sites(count: int = 2) -> Iterator[Any]:
    why = segment_tools.netns_unavailable()
    if why:
        peer_unavailable(f"NETNS TEST NOT RUN: {why}")
    try:
        sites = harness.build(count)
    except harness.SitesError as exc:
        peer_unavailable(f"NETNS TEST NOT RUN: namespaces work but the sites cannot be built: {exc}")
    try:
        yield sites
    finally:
        harness.remove(sites.prefix)


def relay_flags(pki: Pki, name: str, hub: str) -> list[str]:
    ca, pem, key = pki.files(name)
    return ["--relay", f"{hub}:7777", "--relay-ca", str(ca), "--relay-cert", str(pem), "--relay-key", str(key)]


def hub_process(sites: Any, pki: Pki, *extra: str) -> CliProcess:
    ca, pem, key = pki.files("hub")
    return CliProcess(sites.exec_argv(sites.hub, sys.executable, "-m", "pianode", "relay", "serve", "--listen",
                                      "0.0.0.0:7777", "--ca", str(ca), "--cert", str(pem), "--key", str(key), *extra))


def _both_kinds(p: CliProcess) -> bool:
    data = [r for r in p.records() if r["event"] == "data"]
    return {r["reliable"] for r in data} == {True, False} and len(data) >= 6


async def test_lan_host_and_join_in_places_that_cannot_reach_each_other_meet_through_the_relay(
    tmp_path: pathlib.Path,
) -> None:
    pki = make_pki(tmp_path)
    with relay_sites(2) as sites:
        a, b = sites.sites
        cut = harness.ip("-n", a, "route", "get", sites.site_addresses[1])
        assert cut.returncode != 0 and "unreachable" in cut.stderr  # A has no way to B but the hub
        py = [sys.executable, "-m", "pianode", "lan"]
        common = ["--game-key", KEY, "--format", "jsonl", "--interval", "0.2", "--alternate-unreliable", "--duration", "60"]
        hub = hub_process(sites, pki, "--report", "0")
        host = CliProcess(sites.exec_argv(a, *py, "host", *common, *relay_flags(pki, "site-a", sites.hub_addresses[0])))
        join = CliProcess(sites.exec_argv(b, *py, "join", *common, *relay_flags(pki, "site-b", sites.hub_addresses[1])))
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                await nursery.start(hub.run)
                await until(lambda: bool(hub.lines) or hub.returncode is not None)
                await nursery.start(host.run)
                await until(lambda: bool(host.lines) or host.returncode is not None)
                await nursery.start(join.run)
                await until(lambda: all(_both_kinds(p) or p.returncode is not None for p in (host, join)))
                join.stop()
                await until(lambda: join.returncode is not None)
                host.stop()
                await until(lambda: host.returncode is not None)
                await until(lambda: sum("left: site-" in line for line in hub.lines) == 2)  # both said goodbye
                hub.stop()
    assert host.returncode == 0, host.stderr.decode()
    assert join.returncode == 0, join.stderr.decode()
    hosting = host.records()[0]
    assert hosting["event"] == "hosting" and hosting["address"] == "10.77.0.1:49152"  # the virtual address
    joined = join.records()[0]
    assert joined["event"] == "joined" and joined["host"] == "10.77.0.1:49152"
    assert joined["address"] == "10.77.0.2:49152" and joined["session_key"] == hosting["session_key"]
    for p, other in ((host, 1), (join, 0)):
        data = [r for r in p.records() if r["event"] == "data"]
        assert {r["source_index"] for r in data} == {other}
        assert {r["reliable"] for r in data} == {True, False}
    assert any("joined: site-a" in line and "10.77.0.1" in line for line in hub.lines), hub.lines
    assert any("joined: site-b" in line and "10.77.0.2" in line for line in hub.lines), hub.lines
    table = {row[2]: row for row in (line.split() for line in hub.lines) if row[0] == "lan"}
    assert set(table) == {"site-a", "site-b"}, hub.lines
    assert all(int(row[4]) > 0 and int(row[5]) > 0 and row[-1] == "left" for row in table.values()), "\n".join(hub.lines)
    assert any(line.startswith("room lan (10.77.0.0/24): 0 member(s), relayed") for line in hub.lines), hub.lines


@pytest.mark.slow
def test_eight_stations_in_two_places_at_60_hz_through_the_relay() -> None:
    """``scripts/netns/relay_frames.py``: 8 stations, 4 per site, 60 Hz frames, relay then direct UDP in one run."""
    why = segment_tools.netns_unavailable()
    if why:
        peer_unavailable(f"NETNS TEST NOT RUN: {why}")
    scratch = set(pathlib.Path(tempfile.gettempdir()).glob("pianode-relay-frames-*"))
    figures = _load("relay_frames").run(duration=5.0, rounds=1)
    print(figures)
    # The run's scratch (its CA's private keys, the sites' reports) is gone once the figures are out.
    assert set(pathlib.Path(tempfile.gettempdir()).glob("pianode-relay-frames-*")) == scratch
    relay, direct = figures["relay"], figures["direct"]
    assert relay["frames_expected"] >= 8 * 7 * 60 * 5 * 0.95  # every station sent at (about) 60 Hz
    assert relay["share_within_50ms"] >= 0.99, figures
    assert direct["share_within_50ms"] >= 0.99, figures  # the baseline of the same run
    assert figures["relay_added_ms_per_hop"] is not None
