"""A connected peer's stream in and out (pianode.mesh.stream): the same bytes, payloads, counters and
drops as the outbox's and the session's general steps, and never for a peer's old identity."""

from __future__ import annotations

import pytest
from mesh_harness import BatchHarness

from pianode.mesh import stream, wire
from protocols.errors import EncodeError
from protocols.pia.versions import Proto


def _formed(version: str = "5.18", backend: str = "cryptography") -> BatchHarness:
    h = BatchHarness(3, version=version, aead_backend=backend)
    assert h.form()
    return h


def _frames(h: BatchHarness, count: int) -> list[list[tuple[bytes, tuple[str, int]]]]:
    """Station 0's frame to every member, *count* times, from packet id 65533 on (across the wrap)."""
    sender = h.sessions[0]
    for peer in sender.peers.values():
        peer.tx_ids.next_id = 0xFFFD
    out = []
    for k in range(count):
        sealed = sender.broadcast_unreliable_now(b"F" + bytes([k]) * (k * 7 % 40), h.now)
        assert sealed is not None
        out.append(sealed[1])
    return out


@pytest.mark.parametrize("backend", ["cryptography", "pycryptodome"])
@pytest.mark.parametrize("version", ["5.18", "5.10", "5.23", "5.4"])
def test_frames_sealed_inline_are_the_outboxs_bytes(version: str, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    inline, general = _formed(version, backend), _formed(version, backend)
    got = _frames(inline, 6)
    used = [p.outbound is not None for p in inline.sessions[0].peers.values()]
    monkeypatch.setattr(stream, "seal_frames", lambda *a: None)  # the outbox's own loop
    assert _frames(general, 6) == got
    assert inline.sessions[0].counters == general.sessions[0].counters
    # H-C and H-D headers (5.11-5.26) are sealed inline (one AEAD call for all of them on pycryptodome);
    # the others keep the outbox's loop.
    assert all(used) if version in ("5.18", "5.23") else not any(used)


def test_an_identity_change_forgets_the_stream_paths() -> None:
    h = _formed()
    a, b = h.sessions[0], h.sessions[1]
    got: list[tuple[int, bytes]] = []
    b.data_handler = lambda index, data, reliable: got.append((index, data))
    for k in range(3):
        sealed = a.broadcast_unreliable_now(b"F%d" % k, h.now)
        assert sealed is not None
        b.receive_datagrams([(d, a.local_address) for d, dst in sealed[1] if dst == b.local_address], h.now)
    assert [data for _, data in got] == [b"F0", b"F1", b"F2"]
    to_b = a.peers[b.local_address]
    from_a = b.peers[a.local_address]
    assert to_b.outbound is not None and from_a.inbound is not None
    for field in ("index", "constant_id", "variable_id", "peer_conn_id", "own_conn_id", "connected"):
        from_a.inbound = object()
        to_b.outbound = object()
        setattr(from_a, field, getattr(from_a, field))
        setattr(to_b, field, getattr(to_b, field))
        assert from_a.inbound is None and to_b.outbound is None, field
    # B now knows A by another constant id: A's frames under the old one are refused, as the general path refuses them.
    from_a.constant_id ^= 1
    sealed = a.broadcast_unreliable_now(b"F3", h.now)
    assert sealed is not None
    mismatches = b.drops["identity_mismatch"]
    b.receive_datagrams([(d, a.local_address) for d, dst in sealed[1] if dst == b.local_address], h.now)
    assert [data for _, data in got] == [b"F0", b"F1", b"F2"]
    assert b.drops["identity_mismatch"] == mismatches + 1


def test_a_tampered_or_replayed_frame_is_dropped_and_counted() -> None:
    h = _formed()
    a, b = h.sessions[0], h.sessions[1]
    got: list[bytes] = []
    b.data_handler = lambda index, data, reliable: got.append(data)
    frames = []
    for k in range(3):
        sealed = a.broadcast_unreliable_now(b"F%d" % k, h.now)
        assert sealed is not None
        frames += [d for d, dst in sealed[1] if dst == b.local_address]
    b.receive_datagrams([(frames[0], a.local_address), (frames[1], a.local_address)], h.now)
    assert b.peers[a.local_address].inbound is not None
    tampered = bytearray(frames[2])
    tampered[-1] ^= 1
    bad_tags, replayed = b.drops["bad_tag"], b.drops["replayed"]
    b.receive_datagrams([(bytes(tampered), a.local_address), (frames[0], a.local_address), (frames[2], a.local_address)], h.now)
    assert got == [b"F0", b"F1", b"F2"]
    assert (b.drops["bad_tag"], b.drops["replayed"]) == (bad_tags + 1, replayed + 1)


@pytest.mark.parametrize("backend", ["cryptography", "pycryptodome"])
def test_frames_of_every_size_come_through_the_batch_path(backend: str) -> None:
    # The receive loop keeps the last frame's shape (Inbound.frame); frames that change size, come back
    # to an earlier size or carry nothing must each give their own payload, as the one-by-one path does.
    one, twin = _formed("5.18", backend), _formed("5.18", backend)
    sizes = [10, 10, 30, 10, 0, 62, 62, 1, 15, 16, 17, 300, 17, 10]
    got: tuple[list[bytes], list[bytes]] = ([], [])
    batches = []
    for h, into in zip((one, twin), got):
        a, b = h.sessions[0], h.sessions[1]
        b.data_handler = lambda index, data, reliable, into=into: into.append(data)
        frames = []
        for k, n in enumerate(sizes):
            sealed = a.broadcast_unreliable_now(bytes([k]) * n, h.now)
            assert sealed is not None
            frames += [(d, a.local_address) for d, dst in sealed[1] if dst == b.local_address]
        batches.append(frames)
    assert batches[0] == batches[1]
    for data, addr in batches[0]:
        one.sessions[1].receive_datagram(data, addr, one.now)
    for k in range(0, len(batches[1]), 4):
        twin.sessions[1].receive_datagrams(batches[1][k : k + 4], twin.now)
    assert got[0] == got[1] == [bytes([k]) * n for k, n in enumerate(sizes)]


@pytest.mark.parametrize("backend", ["cryptography", "pycryptodome"])
def test_another_message_of_a_connected_peer_is_opened_once(backend: str) -> None:
    # A reliable segment, an ack or an RTT message from a peer whose frames take the batch path shares the
    # stream's header: the loop opens it, finds another message, and hands the opened body on (the opener's
    # own reading of it), rather than the general path opening the datagram a second time.
    h = _formed("5.18", backend)
    a, b = h.sessions[0], h.sessions[1]
    got: list[tuple[int, bytes, bool]] = []
    b.data_handler = lambda index, data, reliable: got.append((index, data, reliable))
    for frame in (b"F0", b"F1"):  # (the first makes the opener, the second the Inbound)
        sealed = a.broadcast_unreliable_now(frame, h.now)
        assert sealed is not None
        b.receive_datagrams([(d, a.local_address) for d, dst in sealed[1] if dst == b.local_address], h.now)
    peer = b.peers[a.local_address]
    assert peer.inbound is not None and peer.opener is not None
    made_for, opener = peer.opener
    opened: list[bytes] = []

    def counting(data: bytes) -> object:
        opened.append(data)
        return opener(data)

    counting.plan, counting.complete = opener.plan, opener.complete  # type: ignore[attr-defined]
    peer.opener = (made_for, counting)
    assert a.index is not None and b.index is not None
    a.send(b.index, b"R1", reliable=True, now=h.now)
    b.receive_datagrams([(d, a.local_address) for d, dst in a.datagrams_to_send(h.now) if dst == b.local_address], h.now)
    assert got == [(a.index, b"F0", False), (a.index, b"F1", False), (a.index, b"R1", True)]
    assert opened == []  # opened once, in the loop
    # B's ack goes back to A the same way, and A's window empties.
    sealed = b.broadcast_unreliable_now(b"F2", h.now)
    a.receive_datagrams([(d, b.local_address) for d, dst in (sealed[1] if sealed else []) if dst == a.local_address], h.now)
    a.receive_datagrams([(d, b.local_address) for d, dst in b.datagrams_to_send(h.now) if dst == a.local_address], h.now)
    window = a.peers[b.local_address].data_window
    assert window is not None and window.idle()


@pytest.mark.parametrize("backend", ["cryptography", "pycryptodome"])
def test_a_members_authentic_but_malformed_message_is_dropped_as_the_general_path_drops_it(backend: str) -> None:
    # A member holds the key: it can seal a body of the stream's header that is no message at all (a size past
    # the body's end).  The batch loop opens it, finds no frame, and hands the body on; that must be the general
    # path's verdict (dropped, counted as malformed), and the peer's next frame must still arrive.
    from protocols.crypto.aead import gcm

    one, twin = _formed("5.18", backend), _formed("5.18", backend)
    forged: list[tuple[bytes, bytes]] = []
    for h in (one, twin):
        a, b = h.sessions[0], h.sessions[1]
        frames = []
        for k in range(3):
            sealed = a.broadcast_unreliable_now(b"F%d" % k, h.now)
            assert sealed is not None
            frames += [d for d, dst in sealed[1] if dst == b.local_address]
        b.receive_datagrams([(frames[0], a.local_address)], h.now)
        b.receive_datagrams([(frames[1], a.local_address)], h.now)
        ib = b.peers[a.local_address].inbound
        assert ib is not None
        data = frames[2]
        nonce = ib.nonce_lead + data[ib.nonce_at : ib.tag_at]
        aead = gcm(bytes(range(16)), backend)
        body = bytearray(aead.open(nonce, data[ib.header_size :], data[ib.tag_at : ib.header_size]))
        body[2:4] = (0xFFF0).to_bytes(2, "big")  # the message's size, far past the body
        sealed_body, tag = aead.seal(nonce, bytes(body))
        forged.append((data[: ib.tag_at] + tag + sealed_body, frames[2]))
    assert forged[0] == forged[1]
    bad, next_frame = forged[0]
    b_one, b_twin = one.sessions[1], twin.sessions[1]
    got: tuple[list[bytes], list[bytes]] = ([], [])
    for receiver, into in zip((b_one, b_twin), got):
        receiver.data_handler = lambda index, data, reliable, into=into: into.append(data)
    a_address = one.sessions[0].local_address
    malformed = b_one.drops["malformed"], b_twin.drops["malformed"]
    inbound = b_twin.peers[a_address].inbound
    handed: list[bytes] = []
    complete = inbound.complete

    def handing(data: bytes, body: bytes) -> object:
        handed.append(data)
        return complete(data, body)

    inbound.complete = handing
    b_one.receive_datagram(bad, a_address, one.now)
    b_twin.receive_datagrams([(bad, a_address)], twin.now)
    assert handed == [bad]  # the loop opened it and handed the body on
    assert (b_one.drops["malformed"], b_twin.drops["malformed"]) == (malformed[0] + 1, malformed[1] + 1)
    assert got == ([], [])
    # (The forged packet's nonce was the third frame's: that frame is now a replay, as in the general path.)
    b_one.receive_datagram(next_frame, a_address, one.now)
    b_twin.receive_datagrams([(next_frame, a_address)], twin.now)
    assert got[0] == got[1]
    assert dict(b_one.drops) == dict(b_twin.drops) and dict(b_one.counters) == dict(b_twin.counters)


def _session_traffic(h: BatchHarness) -> list[tuple[bytes, tuple[str, int], tuple[str, int]]]:
    """Every datagram of a few seconds of a session: frames from every station (so the stream paths are
    made), reliable messages both ways and their acks, RTT probes and answers, in the order sent."""
    sent: list[tuple[bytes, tuple[str, int], tuple[str, int]]] = []
    route = h._route

    def recording(data: bytes, src: tuple[str, int], dst: tuple[str, int]) -> None:
        sent.append((data, src, dst))
        route(data, src, dst)

    h._route = recording  # type: ignore[method-assign]
    for k in range(6):
        for s in h.sessions:
            sealed = s.broadcast_unreliable_now(b"F" + bytes([k]) * (k * 13 % 50), h.now)
            for data, dst in sealed[1] if sealed else []:
                recording(data, s.local_address, dst)
            for other in h.sessions:
                if other is not s and other.index is not None and k % 2 == 0:
                    s.send(other.index, bytes([k]) * (k * 37 % 200), reliable=True, now=h.now)
        h.run_until(lambda: False, timeout=0.7)
    return sent


@pytest.mark.parametrize("backend", ["cryptography", "pycryptodome"])
@pytest.mark.parametrize("version", ["5.18", "5.23", "5.10", "5.4"])
def test_packets_of_one_other_message_sealed_by_the_stream_plan_are_the_codecs_bytes(
    version: str, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A packet of one message that is not a frame (a segment, an ack, an RTT message) to a peer with a
    # stream plan is sealed by the plan (pianode.mesh.stream.seal_lone): the same datagrams, in the same
    # order, with the same ids and nonces, as the codec seals without it, through a whole exchange.
    by_plan = 0
    seal_lone = stream.seal_lone

    def counting(*args: object) -> bytes | None:
        nonlocal by_plan
        data = seal_lone(*args)  # type: ignore[arg-type]
        by_plan += data is not None
        return data

    monkeypatch.setattr(stream, "seal_lone", counting)
    fast = _formed(version, backend)
    got = _session_traffic(fast)
    used = by_plan
    monkeypatch.setattr(stream, "seal_lone", lambda *a: None)  # the codec's packets only
    general = _formed(version, backend)
    want = _session_traffic(general)
    assert len(got) == len(want) > 100
    assert got == want
    assert [s.counters for s in fast.sessions] == [s.counters for s in general.sessions]
    # H-C and H-D headers (5.11-5.26) have stream plans; the others keep the codec's packets.
    assert used > 50 if version in ("5.18", "5.23") else used == 0


def test_a_message_of_a_shape_the_plan_does_not_seal_as_the_codec_stays_the_codecs() -> None:
    # The plan is trusted with a shape of message only once it sealed one as the codec does; a shape it
    # seals otherwise (here: as if the plan packed another destination) goes to the codec from then on.
    h = _formed("5.18")
    a, b = h.sessions[0], h.sessions[1]
    for frame in (b"F0", b"F1"):  # (the first makes the sealer, the second the Outbound)
        assert a.broadcast_unreliable_now(frame, h.now) is not None
    peer = a.peers[b.local_address]
    ob = peer.outbound
    assert ob is not None and b.index is not None
    message = a.outbox.message(peer, Proto.RTT, a.links._rtt_port, wire.encode_rtt(a.profile, False, 1234))
    fields = ob.plan.message_fields
    ob.plan = ob.plan._replace(message_fields=(fields[0], fields[1], fields[2], fields[3] ^ 0x2, *fields[4:]))
    ids, counter = peer.tx_ids.next_id, a.outbox._nonce_counter
    first = stream.seal_lone(a.outbox, peer, message, h.now)  # the codec's, and the shape not trusted
    assert first is not None and list(ob.lone.values()) == [False]
    assert (peer.tx_ids.next_id, a.outbox._nonce_counter) == (ids + 1, counter + 1)  # one packet's worth
    assert stream.seal_lone(a.outbox, peer, message, h.now) is None  # from then on: the codec's
    assert (peer.tx_ids.next_id, a.outbox._nonce_counter) == (ids + 1, counter + 1)  # (nothing taken)
    second, _ = a.outbox._packet_unsent(peer, (message,), h.now)
    # Both are the codec's packets, which B takes as A's RTT requests.
    before = b.counters["rtt_requests_received"]
    b.receive_datagrams([(first, a.local_address), (second, a.local_address)], h.now)
    assert b.counters["rtt_requests_received"] == before + 2


def test_a_message_the_codec_refuses_is_refused_as_the_codec_refuses_it() -> None:
    # A port past its width packs into the plan's type-and-port field without complaint (it would spill into
    # the type); a shape is the plan's only once the codec sealed it, so the codec's refusal comes first,
    # as without the plan, and the shape is never the plan's.
    h = _formed("5.18")
    a, b = h.sessions[0], h.sessions[1]
    for frame in (b"F0", b"F1"):
        assert a.broadcast_unreliable_now(frame, h.now) is not None
    peer = a.peers[b.local_address]
    assert peer.outbound is not None
    message = a.outbox.message(peer, Proto.RTT, 1 << 24, b"")
    for _ in range(2):
        with pytest.raises(EncodeError, match="do not fit"):
            stream.seal_lone(a.outbox, peer, message, h.now)
    assert peer.outbound.lone == {}
