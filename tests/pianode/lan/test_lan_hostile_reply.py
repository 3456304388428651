"""A LAN joiner facing a browse reply whose host address names no station (spec §6.3, §6.6).

Anyone holding the game key can answer a browse, and the reply names the host's address itself: the joiner takes
that address (a known, accepted limit), but an address that cannot be a station's is refused at once with a clear
reason, instead of a join that waits out a silent host.
"""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from pianode.lan.discovery import FoundSession, make_network_property, make_session_info
from pianode.lan.session import LanJoinError, join_found
from pianode.mesh.config import NodeConfig
from protocols.pia.versions import profile_for


@pytest.mark.parametrize(("version", "ip", "port"), [
    ("5.18", "127.0.0.2", 0), ("5.18", "0.0.0.0", 49152), ("5.18", "255.255.255.255", 49152),
    ("5.18", "224.0.0.1", 49152), ("6.30", "127.0.0.2", 0), ("6.30", "0.0.0.0", 49152),
])  # fmt: skip
async def test_a_reply_naming_an_address_no_station_has_is_refused_at_once(
    version: str, ip: str, port: int, autojump_clock: trio.testing.MockClock
) -> None:
    """Port 0, the unspecified address, the limited broadcast address or a multicast group: no host can be there.
    Before, the joiner sent its connection request there and gave up after 5 s of silence (a JoinError that blamed
    the game key); now :func:`join_found` refuses it at once (LanJoinError naming the address)."""
    prof = profile_for(version)
    if prof.version >= (6, 0):
        info = attrs.evolve(make_network_property(prof, ip="127.0.0.2"), host_ip=ip, host_port=port)
    else:
        base = make_session_info(prof, ip="127.0.0.2")
        info = attrs.evolve(base, host=attrs.evolve(base.host, ip=ip, port=port), session_key_param=bytes(32))
    found = FoundSession(info, ("127.0.0.2", 30000 if prof.version < (6, 0) else 35000), bytes(16))
    from pianode.sim.netsim import SimulatedNetwork

    async with SimulatedNetwork() as net, trio.open_nursery() as nursery:
        net.install()
        start = trio.current_time()
        with pytest.raises(LanJoinError, match=f"{ip}:{port}"):
            await join_found(nursery, NodeConfig(version=version, network="lan", bind=("127.0.0.5", 0)), found)
        assert trio.current_time() - start < 1
        nursery.cancel_scope.cancel()
