"""Hostile input to the capture reader: lines and session files far larger than any datagram or session needs."""

from __future__ import annotations

import json
import subprocess
import sys

from pianode.capture.pcap import MAX_LINE, CaptureError, open_capture
from pianode.capture.session_file import MAX_SESSION_FILE, load_session

import pytest

# The decoder runs under a parent of its own that reports the child's peak RSS.
_MEASURE = """
import resource, subprocess, sys
child = subprocess.Popen([sys.executable, "-m", "pianode", "decode", "-", "--format", "jsonl"],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
chunk = b"ab" * (1 << 19)  # 1 MiB of hex digits, no newline
sent = 0
try:
    while sent < 200 * (1 << 20):
        child.stdin.write(chunk)
        sent += len(chunk)
    child.stdin.write(b"\\n")
    child.stdin.close()
except BrokenPipeError:
    pass
err = child.stderr.read().decode()
code = child.wait(timeout=120)
print(json.dumps({"code": code, "stderr": err, "sent": sent,
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
""".replace("import resource", "import json, resource")


def test_a_200_mb_line_is_refused_in_one_line_with_little_memory() -> None:
    done = subprocess.run([sys.executable, "-c", _MEASURE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["code"] == 2
    lines = result["stderr"].strip().splitlines()
    assert len(lines) == 1 and "longer than" in lines[0] and "Traceback" not in result["stderr"]
    assert result["maxrss_kib"] < 300 * 1024, result["maxrss_kib"]
    assert result["sent"] < 200 * (1 << 20), "the reader stopped reading long before the end"


def test_a_long_line_after_good_ones_keeps_the_good_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "x.hex"
    path.write_bytes(b"32ab9864\n" + b"00" * (MAX_LINE // 2 + 10) + b"\n")
    seen = []
    with pytest.raises(CaptureError, match="line 2 is longer than"):
        with open_capture(str(path)) as cap:
            for d in cap:
                seen.append(d.data)
    assert seen == [bytes.fromhex("32ab9864")]


def test_a_huge_session_file_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from protocols.errors import ConfigError

    path = tmp_path / "s.json"
    path.write_text('{"version": "5.18", "pad": "' + "x" * MAX_SESSION_FILE + '"}')
    with pytest.raises(ConfigError, match="larger than"):
        load_session(str(path), {})


def test_source_macs_learned_from_a_capture_stay_bounded() -> None:
    """An LDN 5.x capture's sender MACs are learned for its nonces (spec §3.2), but a capture of datagrams from ever
    new source addresses must not grow that map without bound; a MAC from the session file is never forgotten, and
    a sender seen again is learned again."""
    from pianode.capture.decode import _FLOWS_KEPT, Decoder
    from pianode.capture.pcap import Datagram

    session = {"version": "5.26", "network": "ldn", "session_key": "00" * 16, "network_id": 0x11223344,
               "macs": {"169.254.0.1": "02:00:00:00:00:01"}}
    dec = Decoder(load_session(None, session))
    n = 3 * _FLOWS_KEPT
    for i in range(n):
        ip = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
        dec.decode(Datagram(index=i + 1, data=b"\x32\xab\x98\x64" + bytes(40), src=f"{ip}:49152",
                            dst="169.254.0.255:49152", src_mac=f"02:00:00:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}"))
    macs = dec.ctx.macs
    assert macs is not None
    assert len(macs) <= _FLOWS_KEPT + 1
    assert macs["169.254.0.1"] == bytes.fromhex("020000000001")
    first = "10.0.0.0"
    dec.decode(Datagram(index=n + 1, data=b"\x32\xab\x98\x64" + bytes(40), src=f"{first}:49152", src_mac="02:00:00:00:00:00"))
    assert macs[first] == bytes.fromhex("020000000000") and len(macs) <= _FLOWS_KEPT + 1


def test_flows_hold_what_the_ids_can_be_not_every_packet() -> None:
    """``--flows`` summarises a long capture in memory bounded by the packet ids there can be (16 bits per
    connection id), not by the packets; and many distinct connection ids in one flow cost no time per id seen."""
    import tracemalloc
    from types import SimpleNamespace

    from pianode.capture.flows import FlowTracker

    def packet(i: int, conn: int, pid: int) -> SimpleNamespace:
        header = {"encrypted": True, "connection_id": conn, "packet_id": pid}
        return SimpleNamespace(index=i, src="10.0.0.1:1", dst="10.0.0.2:1", kind="pia", frame=i, header=header)

    tracker = FlowTracker()
    packets = [packet(i, 5, 1 + i % 500) for i in range(300_000)]  # the same 500 ids over and over
    tracemalloc.start()
    for p in packets:
        tracker.add(p)
    held, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert held < 512 * 1024, f"{held} bytes held for 500 distinct ids"
    (flow,) = tracker.flows()
    assert flow["nonzero_connection_id_packet_ids"]["5"] == {"count": 300_000, "min": 1, "max": 500, "missing": []}
    assert flow["connection_ids_in_order"] == [5]


def test_flows_list_a_bounded_number_of_missing_ids_and_count_the_rest() -> None:
    """Two packets of a connection id, ids 1 and 65535, would list 65,533 missing ids: with a connection id per
    two packets (H-E's 32-bit ids allow it) a small capture would make gigabytes of output.  The list stops at
    MAX_MISSING_LISTED and ``missing_count`` says how many there are; a short list is as before."""
    from types import SimpleNamespace

    from pianode.capture.flows import MAX_MISSING_LISTED, FlowTracker
    from pianode.cli.decode import render_flow

    def packet(i: int, conn: int, pid: int) -> SimpleNamespace:
        header = {"encrypted": True, "source_variable_id": conn, "packet_id": pid}
        return SimpleNamespace(index=i, src="10.0.0.1:1", dst="10.0.0.2:1", kind="pia", frame=i, header=header)

    tracker = FlowTracker()
    for n, conn in enumerate(range(1000, 1200)):
        tracker.add(packet(2 * n, conn, 1))
        tracker.add(packet(2 * n + 1, conn, 65535))
    tracker.add(packet(999_999, 7, 1))
    tracker.add(packet(1_000_000, 7, 3))
    (flow,) = tracker.flows()
    ids = flow["nonzero_connection_id_packet_ids"]
    assert ids["1000"]["missing"] == list(range(2, 2 + MAX_MISSING_LISTED))
    assert ids["1000"]["missing_count"] == 65533
    assert ids["7"] == {"count": 2, "min": 1, "max": 3, "missing": [2]}  # (no missing_count: the list is whole)
    assert len(json.dumps(flow)) < 200 * (MAX_MISSING_LISTED * 8 + 200)
    assert f"missing {MAX_MISSING_LISTED} of 65533: [2, 3," in render_flow(flow)
