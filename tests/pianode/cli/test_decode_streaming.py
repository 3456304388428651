"""``pianode decode`` streams: what it holds in memory does not grow with the capture.

A large capture is synthesized with :class:`PcapWriter` (encrypted 5.18 packets under a known key), and the
peak of Python's heap (tracemalloc) while decoding it to JSON Lines is compared with the peak for a capture a
fifth of its size (both larger than the reader's buffer).  Sizes, not timing.
"""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

from pianode.capture.decode import Decoder
from pianode.capture.pcap import _CHUNK, PcapWriter, open_capture
from pianode.capture.session_file import load_session
from pianode.cli.decode import _emit
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.nonce import nonce_builder
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.versions import Proto, profile_for

KEY = bytes.fromhex("9f1bba38de3b1df42ab5b29e7844d207")
SESSION = {"version": "5.18", "network": "lan", "session_key": KEY.hex()}


def _synthesize(path: Path, datagrams: int) -> None:
    profile = profile_for("5.18")
    codec = PacketCodec(profile, KEY, nonce_builder(profile, "lan"))
    message = Message(protocol_type=profile.protocol_id(Proto.UNRELIABLE), protocol_port=0, payload=bytes(100),
                      flags=profile.bitmap_flag, destination=2, source_constant_id=0x1122)  # fmt: skip
    sealed = [
        codec.encode(Packet(PacketHeader(True, i, 3, nonce=i.to_bytes(8, "big")), (message,)), "127.0.0.1")
        for i in range(1, 65)
    ]
    with path.open("wb") as f:
        writer = PcapWriter(f)
        for i in range(datagrams):
            writer.write_udp(sealed[i % 64], "127.0.0.1:49152", f"127.0.0.{2 + i % 7}:49152", time=i / 1000)


class _Discard(io.TextIOBase):
    """Counts what is written and keeps none of it."""

    def __init__(self) -> None:
        self.lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return len(text)


def _decode_peak(path: Path) -> tuple[int, int]:
    """(peak traced heap bytes while decoding, JSON lines written)."""
    out = _Discard()
    ctx = load_session(None, SESSION)
    tracemalloc.start()
    try:
        with open_capture(path) as cap:
            _emit(cap, Decoder(ctx), ctx, "jsonl", out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, out.lines


def test_memory_is_flat_in_the_capture_size(tmp_path: Path) -> None:
    small, large = tmp_path / "small.pcap", tmp_path / "large.pcap"
    _synthesize(small, 3_000)
    _synthesize(large, 15_000)
    assert small.stat().st_size > 2 * _CHUNK and large.stat().st_size > 2_500_000
    _decode_peak(small)  # first use: codecs, caches and lazy imports are made here, not in the measurement
    small_peak, small_lines = _decode_peak(small)
    large_peak, large_lines = _decode_peak(large)
    assert (small_lines, large_lines) == (3_000, 15_000)
    # Five times the datagrams (2.5 MB of file; both beyond the reader's buffer) may not cost more than a little slack in memory.
    assert large_peak < small_peak * 1.25 + 64 * 1024, (small_peak, large_peak)
    assert large_peak < 4 * 1024 * 1024
