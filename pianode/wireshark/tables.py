"""The dissector's tables, generated from ``protocols/`` so that the Lua never drifts from the codecs.

Theory of operation
-------------------
``pianode/wireshark/pianode.lua`` holds one block between the lines
:data:`BEGIN` and :data:`END`.  :func:`lua_block` writes that block from the
Python tables the codecs use: every documented version's profile (header and
message format, alignment, zlib flag, footer, tag length, protocol ids, the
reliable window layout), the header versions and sizes, the representative
version per header shape that ``pianode decode`` tries when a capture does not
say the version, the sub-protocol message type names, the LAN browse size rules
and the PRUDP packet types, flags, stream types and variants.

``python -m pianode.wireshark.tables`` rewrites the block in place;
``--check`` exits 1 when the file differs from what it would write (a test
runs the same comparison, so a change in ``protocols/`` without a
regenerated dissector fails the suite).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["BEGIN", "END", "LUA_PATH", "lua_block", "regenerate", "render_file"]

LUA_PATH = Path(__file__).with_name("pianode.lua")
BEGIN = "-- BEGIN GENERATED TABLES (python -m pianode.wireshark.tables; do not edit by hand)"
END = "-- END GENERATED TABLES"


def _lua(value: Any, indent: str = "") -> str:
    """A Lua literal for str, bool, int, None, list/tuple or dict (keys sorted for a stable file).

    A top-level dict has one entry a line; dicts inside it are written on one line.
    """
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if -9 <= value <= 9 else f"0x{value:X}" if value >= 0 else str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "{" + ", ".join(_lua(v, indent + "  ") for v in value) + "}"
    if isinstance(value, dict):
        items = []
        for k in sorted(value, key=lambda k: (isinstance(k, str), k)):
            key = f"[{_lua(k)}]" if not (isinstance(k, str) and k.isidentifier()) else k
            items.append(f"{key} = {_lua(value[k], indent + '  ')}")
        if indent:
            return "{" + ", ".join(items) + "}"
        return "{\n" + "".join(f"  {item},\n" for item in items) + "}"
    raise TypeError(f"no Lua literal for {type(value).__name__}")


def _tables() -> dict[str, Any]:
    from pianode.capture import decode as capture_decode
    from pianode.capture import lan_detect
    from protocols import ldn_link as ldn_frames
    from protocols.pia import session6
    from protocols.pia.header import HEADER_SIZES, HEADER_VERSIONS, MAGIC
    from protocols.pia.lan_messages import LanMessageType
    from protocols.pia.mesh import MeshMessageType
    from protocols.pia.message import MAX_INFLATED_SIZE
    from protocols.pia.reliable import WindowFlag, layout_for
    from protocols.pia.station import StationMessageType
    from protocols.pia.versions import DOCUMENTED_VERSIONS, profile_for
    from protocols.prudp.packet import FLAG_NAMES, PacketType, StreamType
    from protocols.prudp.variants import VARIANTS

    versions: dict[str, Any] = {}
    # Protocol id tables, each written once; a version names its table by number.
    protocol_ids: list[dict[int, str]] = []
    for v in DOCUMENTED_VERSIONS:
        p = profile_for(v)
        # 6.x: with the ids of pianode's own session management (the 5.45 station and mesh messages,
        # protocols.pia.session6), which the dissector then reads with the 5.27+ layouts.
        ids = {pid: proto.value for proto, pid in session6.protocol_ids(p).items()}
        if ids not in protocol_ids:
            protocol_ids.append(ids)
        versions[p.name] = {
            "hf": p.header_format.value,
            "hv": p.header_version,
            "mf": p.message_format.value,
            "align": p.align_messages,
            "zlib": p.zlib_flag if p.zlib_flag is not None else 0,
            "bitmap": p.bitmap_flag,
            "no_bundle": p.no_bundle_flag,
            "footer": p.footer,
            "tag": p.tag_length,
            "cipher": p.cipher.value,
            "window": layout_for(p).value,
            "protos": protocol_ids.index(ids) + 1,
        }
    # pianode decode's order of guesses per (layout, header version), as names.
    guesses: dict[str, list[str]] = {}
    for (fmt, hv), profiles in capture_decode._representatives().items():
        key = fmt.value if hv is None else f"{fmt.value}/{hv}"
        guesses[key] = [p.name for p in profiles]
    return {
        "magic": MAGIC.hex(),
        "protocol_ids": {n + 1: ids for n, ids in enumerate(protocol_ids)},
        "versions": versions,
        "header_versions": {hv: fmt.value for fmt, hvs in HEADER_VERSIONS.items() for hv in sorted(hvs)},
        "header_sizes": {fmt.value: size for fmt, size in HEADER_SIZES.items()},
        "guesses": guesses,
        "max_inflated": MAX_INFLATED_SIZE,
        "station_types": {int(t): t.name.lower() for t in StationMessageType},
        "mesh_types": {int(t): t.name.lower() for t in MeshMessageType},
        "lan_message_types": {int(t): t.name.lower() for t in LanMessageType},
        "window_flags": {int(f): str(f.name).lower() for f in WindowFlag},
        "lan_request_search_sizes": list(lan_detect.REQUEST_SEARCH_SIZES),
        "lan_request_tails": list(lan_detect.REQUEST_TAILS),
        "lan_reply_tails": list(lan_detect.REPLY_TAILS),
        "ldn_magic": ldn_frames._MAGIC.decode(),
        "ldn_port": ldn_frames.DISCOVERY_PORT,
        "prudp_types": {int(t): t.name for t in PacketType},
        "prudp_flags": {int(f): name for f, name in FLAG_NAMES},
        "prudp_stream_types": {int(t): t.name for t in StreamType},
        "prudp_variants": {
            name: {
                "framing": v.framing.value,
                "flags_bytes": v.flags_bytes,
                "checksum_bytes": v.checksum_bytes,
                "fragment_id_bytes": v.fragment_id_bytes,
                "connection_signature_bytes": v.connection_signature_bytes,
                "keyless_stream_types": sorted(v.keyless_stream_types),
            }
            for name, v in VARIANTS.items()
        },
    }


def lua_block() -> str:
    """The generated block, BEGIN and END lines included."""
    lines = [BEGIN, "local GEN = {}"]
    for name, value in _tables().items():
        lines.append(f"GEN.{name} = {_lua(value)}")
    lines.append(END)
    return "\n".join(lines)


def render_file(text: str) -> str:
    """*text* (the dissector's source) with its generated block replaced by :func:`lua_block`.

    Raises:
        ValueError: the markers are missing or out of order.
    """
    start = text.find(BEGIN)
    stop = text.find(END)
    if start < 0 or stop < start:
        raise ValueError(f"{LUA_PATH.name}: generated block markers not found")
    return text[:start] + lua_block() + text[stop + len(END) :]


def regenerate(path: Path = LUA_PATH) -> bool:
    """Rewrite the block in *path*; return whether the file changed."""
    old = path.read_text(encoding="utf-8")
    new = render_file(old)
    if new != old:
        path.write_text(new, encoding="utf-8")
    return new != old


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pianode.wireshark.tables", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the dissector's tables are out of date")
    args = parser.parse_args(argv)
    if args.check:
        text = LUA_PATH.read_text(encoding="utf-8")
        if render_file(text) != text:
            print(f"{LUA_PATH}: generated tables are out of date; run python -m pianode.wireshark.tables",
                  file=sys.stderr)
            return 1
        return 0
    changed = regenerate()
    print(f"{LUA_PATH}: {'updated' if changed else 'up to date'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
