"""``pianode mesh --relay``: every station of a run a site of its own, all through one relay hub.

Theory of operation: :class:`RelayMeshRun` is a
:class:`~pianode.sim.mesh_run.MeshRun` whose stations do not share the
machine's loopback: each has its own :class:`~pianode.relay.client.RelayClient`
(its own QUIC connection to the hub, its own virtual address in the room) and
its node takes that site's network as ``NodeConfig.socket_factory``, so every
datagram between two stations, group packets included (sent to the room's
broadcast address), crosses the hub.  The mesh is formed by hand-off, as a
matchmaking server does: discovery through a hub is what ``lan`` and ``ldn
host|join --relay`` do, one site per process.

Without a hub (*hub* None) the run starts its own on loopback, with a CA made
for the run and thrown away after it, which measures the relay's cost on one
machine; with one, every station connects with the credentials given.  With
*local* (``--bind IP``), station *i*'s connection to the hub goes out from
``local + i``, as its socket would without a relay, and a hub of the run's own
listens on *local*; without, the connections go out from any address and the
hub listens on 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import tempfile
from typing import Any

import attrs
import trio

from pianode.mesh.config import NodeConfig
from pianode.relay.certificates import Credentials, init_ca, issue, load_credentials
from pianode.relay.client import RelayClient
from pianode.relay.hub import RelayHub
from pianode.sim.mesh_run import MeshRun

__all__ = ["RelayMeshRun"]


class RelayMeshRun(MeshRun):
    """A MeshRun whose stations meet through a relay hub (see the module docstring)."""

    def __init__(
        self,
        *args: Any,
        hub: tuple[str, int] | None = None,
        credentials: Credentials | None = None,
        room: str = "mesh",
        local: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if (hub is None) != (credentials is None):
            raise ValueError("a relay hub needs the credentials to reach it, and only a hub does")
        self.hub = hub
        self.credentials = credentials
        self.room = room
        self.local = None if local is None else ipaddress.IPv4Address(local)
        self.sites: list[RelayClient] = []
        #: The hub's address, once the run reached it (the run's own: where it listens).
        self.hub_address: tuple[str, int] | None = None
        self.result.formation = "matchmaking hand-off, through a relay hub"

    async def _run(self) -> None:
        with tempfile.TemporaryDirectory(prefix="pianode-relay-") as scratch:
            async with trio.open_nursery() as nursery:
                hub, credentials = self.hub, self.credentials
                if hub is None or credentials is None:
                    hub, credentials = await self._own_hub(nursery, scratch)
                self.hub_address = hub
                for i in range(self.n):
                    bind = ("0.0.0.0", 0) if self.local is None else (str(self.local + i), 0)
                    site = RelayClient(credentials, hub, room=self.room, bind=bind, log_line=lambda line: None)
                    await nursery.start(site.run)
                    self.sites.append(site)
                self.addresses = [str(site.address) for site in self.sites]
                await super()._run()
                nursery.cancel_scope.cancel()

    async def _own_hub(self, nursery: trio.Nursery, scratch: str) -> tuple[tuple[str, int], Credentials]:
        """A hub on 127.0.0.1 with a CA made for this run: one server and one client certificate."""
        init_ca(scratch)
        hub_files = issue(scratch, "hub", role="server")
        station_files = issue(scratch, "station", role="client")
        ca = f"{scratch}/ca.pem"
        hub = RelayHub(load_credentials(ca, *hub_files), (str(self.local or "127.0.0.1"), 0))
        address: tuple[str, int] = await nursery.start(hub.serve)
        return address, load_credentials(ca, *station_files)

    def _node_configs(self) -> list[NodeConfig]:
        """Each station on its site's virtual address and network; group packets to the room's broadcast."""
        out = []
        for config, site in zip(super()._node_configs(), self.sites):
            assert site.welcome is not None
            group = config.group_broadcast
            if group is not None:
                assert site.site.broadcast_address is not None
                group = (site.site.broadcast_address, group[1])
            out.append(attrs.evolve(config, socket_factory=site.site, group_broadcast=group))
        return out
