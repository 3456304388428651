"""``MeshSession.receive_datagrams`` (a driver's batch) is ``receive_datagram`` for each datagram in order.

Two meshes formed alike from the same seeds; the same datagrams (a station's
stream of frames, replays, tampered and truncated copies, packets of other
shapes, datagrams from unknown addresses) go to one receiver one by one and to
its twin as one batch.  What the application gets, the counters and the drops
must be the same.  On pycryptodome the batch is opened in one AEAD call
(``pianode.mesh.stream._open_together``) and a frame to every station sealed in one
(``pianode.mesh.stream.seal_frames``): the same bytes and the same outcome as one by one.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from mesh_harness import BatchHarness

from pianode.mesh.session import MeshSession

VERSIONS = ("5.18", "5.29")
BACKENDS = ("cryptography", "pycryptodome")
#: A version of every header and message family the node speaks, with a network it runs on (spec §1, §2):
#: the batch path must be the one-by-one path for each, whether or not the codec has a stream opener for it.
FAMILIES = {"3.5": "nex", "5.4": "lan", "5.9": "lan", "5.18": "lan", "5.23": "lan", "5.29": "lan", "6.16": "lan",
            "6.23": "lan", "6.32": "ldn", "6.41": "ldn"}  # fmt: skip


def _formed(version: str, backend: str = "cryptography", n: int = 3) -> BatchHarness:
    h = BatchHarness(n, version=version, aead_backend=backend, network=FAMILIES.get(version, "lan"))
    assert h.form()
    return h


def _take(h: BatchHarness, sender: MeshSession) -> list[tuple[bytes, tuple[str, int]]]:
    out = sender.datagrams_to_send(h.now)
    return [(data, addr) for data, addr in out]


def _stream(h: BatchHarness, kinds: list[int]) -> list[tuple[bytes, tuple[str, int]]]:
    """Datagrams for station 1 (sent by 0 and 2, and mangled), in the order *kinds* says."""
    s0, s1, s2 = h.sessions
    to1 = s1.local_address
    out: list[tuple[bytes, tuple[str, int]]] = []
    sent: list[bytes] = []
    held: list[tuple[bytes, tuple[str, int]]] = []
    for k, kind in enumerate(kinds):
        sender = s2 if kind == 1 else s0
        frame = b"F" + bytes([kind]) + k.to_bytes(4, "big") + bytes(40)
        if kind in (0, 1):  # a frame on the stream (sealed now, or queued behind other output)
            index = s1.index
            assert index is not None
            ready = sender.send_unreliable_now(index, frame, h.now)
            if ready is None:
                sender.send(index, frame, reliable=False, now=h.now)
                datagrams = [d for d, a in _take(h, sender) if a == to1]
            else:
                datagrams = [ready[0]]
            for data in datagrams:
                out.append((data, sender.local_address))
                sent.append(data)
        elif kind == 2 and sent:  # a replay
            out.append((sent[k % len(sent)], s0.local_address))
        elif kind == 3 and sent:  # one bit flipped
            data = bytearray(sent[-1])
            data[k % len(data)] ^= 0x10
            out.append((bytes(data), s0.local_address))
        elif kind == 4 and sent:  # cut short
            out.append((sent[-1][: k % len(sent[-1])], s0.local_address))
        elif kind == 5:  # a reliable message: another shape, the general path
            index = s1.index
            assert index is not None
            sender.send(index, b"R" + k.to_bytes(4, "big"), reliable=True, now=h.now)
            out.extend((d, sender.local_address) for d, a in _take(h, sender) if a == to1)
        elif kind == 6 and sent:  # a stream datagram from an address that is no peer
            out.append((sent[-1], ("127.0.0.99", 49152)))
        elif kind == 7:  # a frame held back, to arrive after those sealed after it (reordered)
            index = s1.index
            assert index is not None
            ready = s0.send_unreliable_now(index, frame, h.now)
            if ready is not None:
                held.append((ready[0], s0.local_address))
        if held and kind in (0, 1) and k % 3 == 0:
            out.append(held.pop(0))
    return out + held


def _state(session: MeshSession, got: list[tuple[int, bytes, bool]]) -> tuple[object, ...]:
    peers = sorted((p.address, p.packets_received, p.last_heard, p.replay.span(), p.replay._recent, p.replay.advanced)
                   for p in session.peers.values())  # fmt: skip
    return (got, dict(session.counters), dict(session.drops), peers, list(session.take_events()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS), backend=st.sampled_from(BACKENDS),
       kinds=st.lists(st.integers(0, 7), min_size=1, max_size=40), cut=st.integers(0, 40))  # fmt: skip
def test_a_batch_is_received_as_its_datagrams_one_by_one(version: str, backend: str, kinds: list[int], cut: int) -> None:
    one, twin = _formed(version, backend), _formed(version, backend)
    datagrams = _stream(one, kinds)
    assert _stream(twin, kinds) == datagrams  # the twins seal the very same bytes
    receivers = one.sessions[1], twin.sessions[1]
    got: tuple[list[tuple[int, bytes, bool]], list[tuple[int, bytes, bool]]] = ([], [])
    for receiver, into in zip(receivers, got):
        receiver.data_handler = lambda index, data, reliable, into=into: into.append((index, data, reliable))
    before = [_state(r, []) for r in receivers]
    assert before[0][1:3] == before[1][1:3]
    now = one.now + 0.001
    for data, addr in datagrams:
        receivers[0].receive_datagram(data, addr, now)
    # The batch in two parts, as a driver reads it.
    receivers[1].receive_datagrams(datagrams[:cut], now)
    receivers[1].receive_datagrams(datagrams[cut:], now)
    assert _state(receivers[0], got[0]) == _state(receivers[1], got[1])
    frames = [data for _, data, reliable in got[0] if not reliable and data[:1] == b"F"]
    assert len(frames) == len({data for data in frames})  # replays dropped, each frame once


@pytest.mark.parametrize("version", sorted(FAMILIES))
def test_every_family_receives_a_batch_as_its_datagrams_one_by_one(version: str) -> None:
    """A stream of frames, replays, reliable messages and mangled copies, in batches, for each family
    (a family whose codec has no stream opener, as 6.32+, must take the general path, not fail)."""
    kinds = [0, 0, 1, 0, 2, 5, 0, 3, 0, 1, 4, 0, 6, 0, 0, 1]
    one, twin = _formed(version), _formed(version)
    datagrams = _stream(one, kinds)
    receivers = one.sessions[1], twin.sessions[1]
    got: tuple[list[tuple[int, bytes, bool]], list[tuple[int, bytes, bool]]] = ([], [])
    for receiver, into in zip(receivers, got):
        receiver.data_handler = lambda index, data, reliable, into=into: into.append((index, data, reliable))
    now = one.now + 0.001
    for data, addr in datagrams:
        receivers[0].receive_datagram(data, addr, now)
    for k in range(0, len(datagrams), 3):
        receivers[1].receive_datagrams(datagrams[k : k + 3], now)
    assert _state(receivers[0], got[0]) == _state(receivers[1], got[1])
    frames = [data for _, data, reliable in got[0] if not reliable and data[:1] == b"F"]
    assert len(frames) == len(set(frames)) == kinds.count(0) + kinds.count(1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("version", ["5.18", "5.23", "5.29", "6.20"])  # H-C, H-D, H-E (8-byte tags), H-F
def test_a_stream_of_frames_takes_the_batch_path_after_its_first_frame(version: str, backend: str) -> None:
    h = _formed(version, backend)
    datagrams = _stream(h, [0] * 10)
    receiver = h.sessions[1]
    slow: list[bytes] = []
    general = receiver.receive_datagram
    receiver.receive_datagram = lambda data, addr, now: (slow.append(data), general(data, addr, now))  # type: ignore[method-assign]
    got: list[bytes] = []
    receiver.data_handler = lambda index, data, reliable: got.append(data)
    receiver.receive_datagrams(datagrams, h.now)
    assert len(got) == 10
    assert len(slow) <= 1  # the first frame sets the peer's opener up; the rest are the stream's


@pytest.mark.parametrize("version", VERSIONS)
def test_on_pycryptodome_a_batch_is_opened_in_one_call(version: str) -> None:
    h = _formed(version, "pycryptodome")
    datagrams = _stream(h, [0, 1] * 6)
    receiver = h.sessions[1]
    got: list[bytes] = []
    receiver.data_handler = lambda index, data, reliable: got.append(data)
    receiver.receive_datagrams(datagrams[:2], h.now)  # the first of each stream sets its opener up
    calls: list[int] = []
    for peer in receiver.peers.values():
        assert peer.opener is not None and peer.opener[1] is not None
        opener = peer.opener[1]
        assert opener.plan is not None and opener.plan.open_many is not None and opener.plan.decrypt is None
        many = opener.plan.open_many
        counting = lambda nonces, cts, tags, many=many: (calls.append(len(nonces)), many(nonces, cts, tags))[1]  # noqa: E731
        opener.plan = opener.plan._replace(open_many=counting)  # (what pianode.mesh.stream opens with)
        peer.forget_streams()
    receiver.receive_datagrams(datagrams[2:], h.now)
    assert calls == [10]
    assert got == [data for data in got if data[:1] == b"F"] and len(got) == 12


@pytest.mark.parametrize("version", VERSIONS)
def test_a_frame_to_every_station_is_the_same_bytes_sealed_in_one_call(version: str) -> None:
    # Formed alike from the same seeds, the twins seal the same frames; pycryptodome's in one call.
    fast, one_by_one = _formed(version, "pycryptodome", 5), _formed(version, "cryptography", 5)
    for frame in range(3):
        data = b"F" + bytes([frame]) * 61
        sealed = [h.sessions[0].broadcast_unreliable_now(data, h.now) for h in (fast, one_by_one)]
        if version == "5.29":  # one group packet for all (no unicast fan-out): nothing to batch
            assert sealed == [None, None]
            continue
        assert sealed[0] is not None and sealed[0] == sealed[1]
        assert len(sealed[0][1]) == 4
