"""What the command line writes is safe.  Text heard from the network or read from a capture is shown,
never acted on by the terminal: no escape sequence, carriage return, extra line or bidirectional
override reaches the table.  And an output never overwrites a file the command reads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from pianode.capture.pcap import PcapWriter
from pianode.cli.common import printable, render_table

HOSTILE = "evil\x1b[31mRED\nfake row\r\u202egnp.exe\x07\x9b2J"
# Whatever a terminal would act on: C0/C1 controls but the row breaks, separators, bidi controls.
_ACTS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    shown = printable(HOSTILE)
    assert not _ACTS.search(shown) and "\n" not in shown
    assert shown == "evil\\x1b[31mRED\\x0afake row\\x0d\\u202egnp.exe\\x07\\x9b2J"
    assert printable("Mario Kart é ü 日本") == "Mario Kart é ü 日本"


def test_a_table_cell_cannot_add_a_row() -> None:
    lines = render_table(["name", "players"], [[HOSTILE, 3], ["plain", 2]], right={1})
    assert len(lines) == 4
    assert not any(_ACTS.search(line) for line in lines)


def test_decode_table_shows_a_hostile_capture_name_escaped(tmp_path: Path) -> None:
    capture = tmp_path / "x.jsonl"
    capture.write_text(json.dumps({"hex": "00", "name": HOSTILE}) + "\n" + json.dumps({"hex": "01"}) + "\n")
    done = subprocess.run([sys.executable, "-m", "pianode", "decode", str(capture), "--format", "table"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not _ACTS.search(done.stdout)
    # A row per datagram, each followed by its note (why it is unknown), and the summary ("--").
    lines = [line for line in done.stdout.splitlines() if not line.startswith("--")]
    rows = [line for line in lines if not line.lstrip().startswith("note: ")]
    assert len(rows) == 2 and "evil\\x1b[31mRED\\x0afake row" in rows[0] and len(lines) == 4


def test_decrypted_pcap_refuses_to_overwrite_what_decode_reads(tmp_path: Path) -> None:
    capture = tmp_path / "x.jsonl"
    capture.write_text(json.dumps({"hex": "00"}) + "\n")
    session = tmp_path / "s.json"
    session.write_text('{"version": "5.18"}')
    for target, what in ((capture, "capture"), (session, "session file")):
        before = target.read_bytes()
        done = subprocess.run([sys.executable, "-m", "pianode", "decode", str(capture), "--session", str(session),
                               "--decrypted-pcap", str(target)], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr == f"pianode decode: --decrypted-pcap {target}: that is the {what} being read; writing it would destroy it\n"
        assert target.read_bytes() == before


def test_decode_says_a_hostile_capture_file_name_in_one_escaped_line(tmp_path: Path) -> None:
    """A file name may hold a line break or an escape: the line that names the file shows them escaped."""
    name = "cap\n\x1b[2Jx"
    empty = tmp_path / f"{name}.pcap"
    empty.write_bytes(b"")
    cut = tmp_path / f"{name}.cut.pcap"
    with cut.open("wb") as f:
        PcapWriter(f).write_udp(b"\x00" * 20, "127.0.0.1:1", "127.0.0.2:2", 1.0)
    cut.write_bytes(cut.read_bytes()[:-5])
    for capture, status in ((empty, 2), (cut, 2)):  # (an empty input is refused: nothing to decode)
        done = subprocess.run([sys.executable, "-m", "pianode", "decode", str(capture), "--format", "jsonl"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == status, done.stderr
        assert len(done.stderr.splitlines()) == 1 and not _ACTS.search(done.stderr), done.stderr
        assert "cap\\x0a\\x1b[2Jx" in done.stderr, done.stderr


def test_a_result_line_naming_a_path_with_a_line_break_is_one_escaped_line(tmp_path: Path) -> None:
    """The line that says where a file went (``recorded ... to``, ``installed``, ``made the relay CA``) shows a
    line break or an escape in the path escaped, so a script reading the result sees one line."""
    odd = tmp_path / "a\nb\x1b[2J"
    runs = {
        "recorded": ["mesh", "-n", "2", "--duration", "0.2", "--record", f"{odd}.pcap"],
        "installed": ["wireshark", "install", "--dir", f"{odd}-plugins"],
        "made the relay CA": ["relay", "ca", "init", f"{odd}-ca"],
    }
    for what, argv in runs.items():
        done = subprocess.run([sys.executable, "-m", "pianode", *argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        lines = [line for line in done.stdout.splitlines() if what in line]
        assert len(lines) == 1 and "a\\x0ab\\x1b[2J" in lines[0], (what, done.stdout)
        assert not _ACTS.search(done.stdout), (what, done.stdout)


def test_decrypted_pcap_refuses_to_overwrite_the_capture_read_from_standard_input(tmp_path: Path) -> None:
    """``decode - --decrypted-pcap x.pcap < x.pcap``: the capture came by standard input, and the export
    replaced it at the end (exit 0); refused as the named capture is."""
    capture = tmp_path / "x.jsonl"
    capture.write_text(json.dumps({"hex": "00"}) + "\n")
    before = capture.read_bytes()
    with capture.open("rb") as stdin:
        done = subprocess.run([sys.executable, "-m", "pianode", "decode", "-", "--decrypted-pcap", str(capture)],
                              stdin=stdin, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr == (f"pianode decode: --decrypted-pcap {capture}: that is the capture being read (standard input);"
                           " writing it would destroy it\n")
    assert capture.read_bytes() == before


def test_printable_escapes_a_byte_that_is_no_utf8() -> None:
    """A file name or an argument with a byte that is no UTF-8 reaches Python as a lone surrogate, which a
    UTF-8 stream with strict errors cannot write (the line was lost to a UnicodeEncodeError)."""
    assert printable("cap\udcff.pcap") == "cap\\udcff.pcap"
    assert printable("cap\udcff.pcap").encode("utf-8")
