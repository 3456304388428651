"""Simulated LDN networks of Pia 6.x (6.20 and 6.30, and 6.32+ with H-G): keys and network id from the SSID,
no Local protocol (6.x replaced it), the mesh formed by scan and join, migration, and a recording that decodes
from what a capture offers (game key, SSID) and walks for an independent reader.

Runs on pianode.sim.netsim under the autojump MockClock.
"""

from __future__ import annotations

import json
import pathlib
import zlib

import pytest
import trio
import trio.testing
from Crypto.Cipher import AES

from pianode.cli.main import main as cli_main
from pianode.ldn import network as ldn
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived
from pianode.sim.netsim import SimulatedNetwork
from protocols.pia.keys import parse_game_key
from protocols.pia.versions import Proto

from pia6_reader import MAGIC, Pia6Reader, udp_datagrams

SV = "p1frXqxmeCZWFv0X"  # Pokémon Scarlet/Violet (spec §3.6: 16 characters = ASCII bytes)
GAME_KEY = parse_game_key(SV)


@pytest.mark.parametrize("version", ["6.20", "6.30", "6.32", "6.41"])
async def test_a_6x_station_joins_with_the_key_and_network_id_of_the_ssid(
    version: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with SimulatedNetwork() as net:
        net.install()
        cfg = ldn.LdnHostConfig(node=NodeConfig(version=version, network="ldn", seed=41), game_key=GAME_KEY)
        async with ldn.open_ldn_host(cfg) as host:
            ssid = host.state.ssid
            # Spec §7.3, §11: key = AES-ECB(game key, the 16 SSID bytes), network id = CRC-32(ssid[1:16]).
            assert host.state.session.session_key == AES.new(GAME_KEY, AES.MODE_ECB).encrypt(ssid)
            assert host.state.session.network_id == zlib.crc32(ssid[1:16])
            assert host.local is None  # 6.x has no Local protocol
            found = (await ldn.scan(0.5, first=True))[0]
            async with ldn.open_ldn_station(found, NodeConfig(version=version, seed=42), GAME_KEY) as station:
                assert await station.node.wait_connected(1, timeout=5)
                assert station.session.session_key == host.state.session.session_key
                assert station.session.network_id == host.state.session.network_id
                assert station.update_session is None
                await station.node.send(0, b"ping")
                with trio.fail_after(5):
                    async for event in host.node.events():
                        if isinstance(event, DataReceived):
                            assert event.data == b"ping"
                            break
                assert Proto.LOCAL not in host.node.session.protocol_ids  # type: ignore[union-attr]
                assert station.session_file(SV)["ssid"] == ssid.hex()


@pytest.mark.parametrize("version", ["6.20", "6.30"])
async def test_ldn_6x_mesh_run_forms_migrates_and_its_recording_decodes_from_the_ssid(
    version: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.testing.MockClock
) -> None:
    from pianode.sim.ldn_run import LdnMeshRun

    pcap = tmp_path / "mesh.pcap"
    run = LdnMeshRun(NodeConfig(version=version, network="ldn", seed=9), nodes=4, game_key=GAME_KEY,
                     game_key_text=SV, record=str(pcap), leave_host=True, messages=5)  # fmt: skip
    async with SimulatedNetwork() as net:
        net.install()
        result = await run.run()
    assert result.ok, result.problems
    assert result.reliable_delivered == result.reliable_expected > 0
    assert len(result.host_changes) == 3
    assert result.record is not None
    session_path = pathlib.Path(result.record["session"])
    session = json.loads(session_path.read_text())
    assert set(session) == {"version", "network", "game_key", "application_data", "macs", "ssid"}
    capsys.readouterr()
    assert cli_main(["decode", str(pcap), "--session", str(session_path), "--format", "jsonl"]) == 0
    decoded = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    rows = [row for row in decoded if row["kind"] != "ldn-discovery"]
    assert len(rows) == result.record["datagrams"]
    assert all(row["authenticated"] is True and row["error"] is None for row in rows)
    # The discovery frames are in the recording as non-IP frames, which the independent reader below skips.
    assert len(decoded) - len(rows) == result.record["link_frames"] > 0
    reader = Pia6Reader(session)
    walked = [reader.read(src, dst, data) for src, _sp, dst, _dp, data in udp_datagrams(pcap) if data[:4] == MAGIC]
    assert len(walked) == len(rows)
    assert any(w.footer for w in walked)
