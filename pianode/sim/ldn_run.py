"""``pianode mesh --network ldn`` with real LDN discovery: a :class:`~pianode.sim.mesh_run.MeshRun` whose stations scan.

Theory of operation: :class:`LdnMeshRun` replaces only how the mesh is formed.
Station 0 creates a simulated LDN network (:func:`pianode.ldn.network.open_ldn_host`:
network id, session param or SSID, advertisement on the discovery channel);
every other station scans for that network's SSID, asks the host for an
address, derives the session key and network id from the game key and the
advertisement as a console does (spec §7.3, §11), and joins the host's mesh
(:func:`pianode.ldn.network.open_ldn_station`).  Everything after formation (the data
exchange, the real-time mode, host migration, the summary) is MeshRun's.  A
recording's session file holds only the capture-side inputs (game key,
application data, MACs), not the session key.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
import trio

from pianode.ldn import network as ldn
from pianode.sim.mesh_run import MeshRun
from pianode.mesh.node import JoinError, Node

__all__ = ["LdnMeshRun"]


async def _hold(cm: AbstractAsyncContextManager[Any], *, task_status: trio.TaskStatus[Any]) -> None:
    async with cm as value:
        task_status.started(value)
        await trio.sleep_forever()


class LdnMeshRun(MeshRun):
    """A MeshRun on a simulated LDN network (at most 8 stations, spec §7.1)."""

    def __init__(
        self,
        *args: Any,
        game_key: bytes,
        game_key_text: str,
        discovery_port: int = ldn.DISCOVERY_PORT,
        scan_timeout: float = 5.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if not 2 <= self.n <= ldn.MAX_PARTICIPANTS:
            raise ValueError(f"an LDN network has 2..{ldn.MAX_PARTICIPANTS} stations, not {self.n}")
        self.game_key = game_key
        self.game_key_text = game_key_text
        self.discovery_port = discovery_port
        self.scan_timeout = scan_timeout
        self.host: ldn.LdnHost | None = None

    async def _form(self, nursery: trio.Nursery) -> list[Node]:
        self.result.formation = "LDN discovery"
        tap = self._tap if self.record else None
        # The run's session key (seeded or random): 5.7-5.8 derive none from the advertisement, the game
        # supplies it to every console (spec §3.3); the other versions derive theirs and ignore it.
        key = self._node_configs()[0].session_key
        cfg = ldn.LdnHostConfig(
            node=self.config,
            game_key=self.game_key,
            session_key=key,
            max_participants=self.n,
            pia_port=self.port or ldn.PIA_PORT,
            discovery=(ldn.DEFAULT_BROADCAST, self.discovery_port),
        )
        # The host's link tap sees every discovery frame (adverts, connects, replies, leaves): the stations' would
        # record the same frames twice.
        host: ldn.LdnHost = await nursery.start(_hold, ldn.open_ldn_host(cfg, tap=tap, link_tap=tap))
        self.host = host
        nodes: list[Node] = [host.node]
        found = await ldn.scan(self.scan_timeout, port=self.discovery_port, ssid=host.state.ssid, first=True)
        if not found:
            self.result.problems.append("no station heard the LDN advertisement")
            return nodes
        stations: list[ldn.LdnStation] = []

        async def join(i: int) -> None:
            seed = None if self.config.seed is None else self.config.seed * 1000 + i
            config = attrs.evolve(self.config, seed=seed)
            cm = ldn.open_ldn_station(found[0], config, self.game_key, name=f"station{i}", session_key=key, tap=tap)
            try:
                stations.append(await nursery.start(_hold, cm))
            except (JoinError, ldn.JoinRefused) as exc:
                self.result.problems.append(f"join failed: {exc}")

        async with trio.open_nursery() as joins:
            for i in range(1, self.n):
                joins.start_soon(join, i)
        return nodes + [s.node for s in stations]

    def _session_context(self) -> dict[str, Any]:
        if self.host is None:
            return {"version": self.result.version, "network": "ldn"}
        return self.host.session_file(self.game_key_text)

