"""The Pia node.

Sans-IO parts (no trio, no socket, no clock): :mod:`~pianode.mesh.session`
coordinates; :mod:`~pianode.mesh.wire` adapts the codecs of ``protocols.pia``;
per-peer link state lives in :mod:`~pianode.mesh.peer` with its pieces
(:mod:`~pianode.mesh.reliable`, :mod:`~pianode.mesh.rtt`,
:mod:`~pianode.mesh.replay`, :mod:`~pianode.mesh.packet_ids`); the mesh table is
:mod:`~pianode.mesh.table`.  The Trio driver is :mod:`~pianode.mesh.node` with
its sockets (:mod:`~pianode.mesh.udp`, :mod:`~pianode.mesh.group_listener`).
See ARCHITECTURE.md.
"""
