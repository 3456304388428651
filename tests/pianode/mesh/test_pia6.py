"""Pia 6.x in the node (protocols.pia.session6), sans-IO: the version gate, every runnable 6.x version
forming a mesh, data both ways, a member leaving and the host migrating, and what goes on the wire
read back by an independent reader written from the spec (tests/support/pia6_reader.py).
"""

from __future__ import annotations

import pytest
from mesh_harness import BatchHarness, MeshHarness, all_connected, events_of, form
from pia6_reader import Pia6Reader

from protocols.pia import session6
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, HostChanged, MeshDestroyed, StationLeft
from pianode.mesh.session import MeshSession
from protocols.errors import ConfigError
from protocols.pia.versions import DOCUMENTED_VERSIONS, NetworkType, profile_for

KEY = bytes(range(16))
SIX = [f"{a}.{b}" for a, b in DOCUMENTED_VERSIONS if a == 6]
#: (version, network) pairs the spec documents a nonce (and key) for (spec §3.2, §3.3).
RUNNABLE = [
    (v, n)
    for v in SIX
    for n in ("lan", "ldn", "npln")
    if (n == "ldn") or profile_for(v).version <= (6, 30)
]
GROUP = ("127.255.255.255", 40006)


def test_the_documented_6x_versions_are_the_ones_the_spec_lists() -> None:
    assert SIX == ["6.16", "6.17", "6.18", "6.19", "6.20", "6.21", "6.22", "6.23", "6.25", "6.26", "6.29", "6.30",
                   "6.32", "6.33", "6.34", "6.39", "6.40", "6.41"]  # fmt: skip


@pytest.mark.parametrize("version", SIX)
@pytest.mark.parametrize("network", ["lan", "ldn", "nex", "npln"])
def test_gate_runs_what_the_spec_documents_and_names_what_is_missing(version: str, network: str) -> None:
    if (version, network) in RUNNABLE:
        assert NodeConfig(version=version, network=network).profile.name == version
        return
    with pytest.raises(ConfigError) as err:
        NodeConfig(version=version, network=network)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"Pia {version} on {network}: the spec gives ")
    assert "§3.2" in text and "--network" in text


def test_5x_versions_refuse_npln() -> None:
    with pytest.raises(ConfigError, match="npln exists in Pia 6.x only"):
        NodeConfig(version="5.29", network="npln")


def test_default_network_is_lan_where_documented_else_ldn() -> None:
    assert session6.default_network(profile_for("6.30")) is NetworkType.LAN
    assert session6.default_network(profile_for("6.32")) is NetworkType.LDN
    assert NodeConfig(version="6.30").network is NetworkType.LAN
    assert NodeConfig(version="6.41").network is NetworkType.LDN
    assert NodeConfig(version="5.29").network is NetworkType.LAN


def test_session_management_ids_are_free_in_every_6x_version() -> None:
    for version in SIX:
        profile = profile_for(version)
        used = set(profile.protocol_ids.values())
        assert not used & set(session6.PIANODE_PROTOCOL_IDS.values()), version
        ids = session6.protocol_ids(profile)
        assert len(set(ids.values())) == len(ids)  # no two protocols share an id
        assert session6.session_profile(profile).name == "5.45"
    assert session6.session_profile(profile_for("5.29")).name == "5.29"


def _received(h: MeshHarness, i: int, *, reliable: bool) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for e in events_of(h, i, DataReceived):
        if e.reliable == reliable:
            out.setdefault(e.source_index, []).append(e.data)
    return out


def _exchange(h: MeshHarness, group: list[MeshSession], tag: bytes) -> None:
    """Every station sends every other one a reliable message and broadcasts an unreliable one: all arrive."""
    ids = [h.sessions.index(s) for s in group]
    before = {i: (_received(h, i, reliable=True), _received(h, i, reliable=False)) for i in ids}
    for s in group:
        for o in group:
            if o is not s:
                s.send(o.index, tag + b"%d>%d" % (s.index, o.index), reliable=True, now=h.now)
        s.broadcast(tag + b"u%d" % s.index, reliable=False, now=h.now)

    def arrived(i: int, reliable: bool) -> int:
        got = _received(h, i, reliable=reliable)
        old = before[i][0 if reliable else 1]
        return sum(len(v) for v in got.values()) - sum(len(v) for v in old.values())

    want = len(group) - 1
    assert h.run_until(lambda: all(arrived(i, True) == want and arrived(i, False) == want for i in ids), 20.0)
    for i, s in zip(ids, group, strict=True):
        reliable = _received(h, i, reliable=True)
        for o in group:
            if o is not s:
                assert reliable[o.index][-1] == tag + b"%d>%d" % (o.index, s.index)
                assert _received(h, i, reliable=False)[o.index][-1] == tag + b"u%d" % o.index


@pytest.mark.parametrize(("version", "network"), RUNNABLE)
def test_every_runnable_version_forms_exchanges_and_migrates(version: str, network: str) -> None:
    h = BatchHarness(4, version=version, network=network)
    group = form(h)
    assert sorted(s.index for s in group) == [0, 1, 2, 3]
    _exchange(h, group, b"a")
    # A member leaves.
    group[3].leave(h.now)
    rest = group[:3]
    assert h.run_until(lambda: group[3].closed and all(len(s.table) == 3 for s in rest), 10.0)
    assert events_of(h, 3, MeshDestroyed) == [MeshDestroyed(reason="left")]
    _exchange(h, rest, b"b")
    # The host leaves: the lowest remaining index takes over (spec-silent rule, README).
    rest[0].leave(h.now)
    last = rest[1:]
    assert h.run_until(lambda: all(s.table.host_index == 1 and len(s.table) == 2 for s in last), 10.0)
    for s in last:
        i = h.sessions.index(s)
        assert events_of(h, i, HostChanged) == [HostChanged(old_host_index=0, new_host_index=1)]
        assert [(e.station_index, e.reason) for e in events_of(h, i, StationLeft)] == [(3, "left"), (0, "left")]
    _exchange(h, last, b"c")
    assert all(s.drops == {} or set(s.drops) <= {"closed"} for s in h.sessions), [s.drops for s in h.sessions]


@pytest.mark.parametrize("version", ["6.20", "6.30", "6.32", "6.41"])
def test_what_goes_on_the_wire_authenticates_and_walks_for_an_independent_reader(version: str) -> None:
    """Every datagram of a mesh's life (handshake, tables, data, group packets with footers,
    leaving) opened and walked byte for byte by a reader built from the spec alone."""
    network = session6.default_network(profile_for(version)).value
    h = BatchHarness(3, version=version, network=network, group_broadcast=GROUP)
    seen: list[tuple[bytes, tuple[str, int], tuple[str, int]]] = []

    def tap(data: bytes, src: tuple[str, int], dst: tuple[str, int]) -> bytes:
        seen.append((data, src, dst))
        return data

    h.hook = tap
    group = form(h)
    _exchange(h, group, b"x" * 37)  # payload sizes that are not multiples of 4
    group[2].leave(h.now)
    assert h.run_until(lambda: group[2].closed and all(len(s.table) == 2 for s in group[:2]), 10.0)
    host = group[0]
    reader = Pia6Reader({"version": version, "network": network, "session_key": KEY.hex(),
                         "network_id": host.network_id})  # fmt: skip
    ids = {s.local_address: s.variable_id for s in group}
    footers = 0
    unaligned = 0
    for data, src, dst in seen:
        walked = reader.read(src[0], dst[0], data)
        assert walked.messages
        unaligned += any(len(payload) % 4 for _flags, _ptype, _port, payload in walked.messages)
        if walked.footer:
            footers += 1
            assert set(walked.footer) <= set(ids.values())
            assert ids[src] not in walked.footer
    assert footers > 0 and unaligned > 0
    assert len(seen) > 30


def test_a_quiet_632_mesh_is_held_by_rtt_requests_where_the_version_has_no_keep_alive() -> None:
    h = BatchHarness(3, version="6.32", network="ldn", rtt_interval=60.0)
    group = form(h)
    h.run_for(4 * 5.0)  # four station timeouts without data
    assert all_connected(group)
    assert all(s.counters["keepalives_received"] == 0 for s in group)
    assert all(s.counters["rtt_requests_received"] > 3 for s in group)


def test_the_readme_lists_the_refusals_the_gate_makes() -> None:
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parents[3] / "README.md").read_text()
    quoted = re.search(r"`(Pia 6\.32 on lan: [^`]*)`", readme.replace("\n", " "))
    assert quoted is not None
    with pytest.raises(ConfigError) as err:
        NodeConfig(version="6.32", network="lan")
    assert str(err.value) == quoted[1]
    rows = re.findall(r"^\| (every 6\.x|6\.32–6\.41|5\.x) \| (\w+) \|", readme, re.M)
    assert rows == [("every 6.x", "nex"), ("6.32–6.41", "lan"), ("6.32–6.41", "npln"), ("5.x", "npln")]
    for span, network in rows:
        versions = SIX if span == "every 6.x" else ["6.32", "6.41"] if span.startswith("6.32") else ["5.29"]
        for version in versions:
            with pytest.raises(ConfigError):
                NodeConfig(version=version, network=network)


@pytest.mark.parametrize(("host", "joiner"), [("6.20", "6.30"), ("6.30", "6.20"), ("5.29", "6.20"), ("6.20", "5.29"),
                                              ("6.30", "6.32")])  # fmt: skip
def test_a_joiner_of_another_version_is_told_why(host: str, joiner: str) -> None:
    network = "ldn" if "6.32" in (host, joiner) else "lan"
    h = BatchHarness(2, version=host, network=network)
    stranger = MeshSession(
        NodeConfig(version=joiner, network=network, session_key=KEY, bind=("127.0.0.2", 49152), seed=9),
        ("127.0.0.2", 49152),
        now=0.0,
    )
    h.sessions[1] = stranger
    h.by_addr[stranger.local_address] = stranger
    h.sessions[0].create(0.0)
    stranger.join(h.sessions[0].local_address, 0.0, network_id=h.sessions[0].network_id)
    assert h.run_until(lambda: stranger.closed, 30.0)
    assert not stranger.joined and len(h.sessions[0].table) == 1
    assert stranger.failure is not None and "version" in stranger.failure
    assert h.sessions[0].counters["version_denials"] >= 1
