"""An echo service on a PRUDP endpoint, for the tests that drive a client against our server.

Theory of operation: :func:`serve_echo` accepts connections for as long as it
runs and starts one :func:`echo` task per connection in the caller's nursery;
each sends every payload it receives straight back until the peer ends the
stream or the connection closes.  Cancel the nursery to stop it.
"""

from __future__ import annotations

import trio

from pianode.prudp.endpoint import PrudpConnection, PrudpEndpoint


async def echo(conn: PrudpConnection) -> None:
    """Send back every payload *conn* receives, until the stream ends or the connection closes."""
    try:
        while True:
            await conn.send(await conn.receive())
    except (trio.EndOfChannel, trio.ClosedResourceError):
        pass


async def serve_echo(host: PrudpEndpoint, nursery: trio.Nursery) -> None:
    """Accept connections on *host* forever, each echoed by its own task in *nursery*."""
    while True:
        nursery.start_soon(echo, await host.accept())
