"""An echo service on a PRUDP endpoint: what `pianode prudp serve` runs, and what tests talk to.

:func:`echo` sends every payload a connection receives straight back (on its
substream; an unreliable one unreliably) until the peer ends the stream or the
connection closes; :func:`serve_echo` accepts
connections for as long as it runs and starts one :func:`echo` task per
connection in the caller's nursery (cancel the nursery to stop it).
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from pianode.prudp.endpoint import PrudpConnection, PrudpEndpoint

__all__ = ["echo", "serve_echo"]


async def echo(conn: PrudpConnection, on_close: Callable[[PrudpConnection], None] | None = None) -> None:
    """Send back every payload *conn* receives, until the stream ends or the connection closes."""
    try:
        while True:
            # On the substream it came on, unreliable unreliably: a peer may wait for each apart.
            message = await conn.receive_message()
            if message.reliable:
                await conn.send(message.data, message.substream)
            else:
                await conn.send_unreliable(message.data)
    except (trio.EndOfChannel, trio.ClosedResourceError):
        pass
    if on_close is not None:
        on_close(conn)


async def serve_echo(
    host: PrudpEndpoint,
    nursery: trio.Nursery,
    *,
    on_connect: Callable[[PrudpConnection], None] | None = None,
    on_close: Callable[[PrudpConnection], None] | None = None,
) -> None:
    """Accept connections on *host* forever, each echoed by its own task in *nursery*."""
    while True:
        conn = await host.accept()
        if on_connect is not None:
            on_connect(conn)
        nursery.start_soon(echo, conn, on_close)
