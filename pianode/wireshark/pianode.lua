-- pianode.lua: a Wireshark 4.x dissector for Nintendo's Pia peer-to-peer protocol and the PRUDP family.
--
-- Shipped with pianode: `pianode wireshark path` prints where this file is, `pianode wireshark install` copies it
-- into Wireshark's personal Lua plugin folder; `tshark -X lua_script:FILE` loads it for one run.
--
-- What it reads:
--   * Pia packets (magic 32 AB 98 64) on any UDP port: every header layout H-A ... H-G, the messages of plaintext
--     packets and of pianode's decrypted exports (`pianode decode CAPTURE --decrypted-pcap OUT.pcapng`), the
--     sub-protocols station, mesh, keep-alive, RTT, sync clock, the reliable sliding-window header and LAN, and the
--     footer.  Wireshark cannot decrypt Pia: the export carries the plaintext and a packet comment
--     "pianode: pia version=X.Y body=decrypted auth=ok" naming the version to read the messages with.
--   * LAN browse requests and replies (UDP 30000 up to 5.45, 35000 from 6.x) with the session info.
--   * pianode's simulated LDN discovery channel (UDP 30400, "PNLD"; recordings: EtherType 0x88B5).
--   * PRUDP: Nintendo and Quazal v0 (by structure), v1 (magic EA D0 01), Lite (magic 80).
--
-- The tables between the GENERATED markers are written by `python -m pianode.wireshark.tables` from pianode's
-- protocols/ package (the codecs themselves), and a test fails when they differ.  Everything else is hand-written
-- from the project's digests (spec/pia.md, spec/prudp.md; section numbers are cited as "§").

-- BEGIN GENERATED TABLES (python -m pianode.wireshark.tables; do not edit by hand)
local GEN = {}
GEN.magic = "32ab9864"
GEN.protocol_ids = {
  [1] = {[0x80] = "relay", [0xC0] = "keep-alive", [0x100] = "station", [0x200] = "mesh", [0x210] = "sync-clock", [0x300] = "local", [0x400] = "nat", [0x420] = "lan", [0x600] = "rtt", [0x2000] = "unreliable", [0x3000] = "reliable", [0x7000] = "reliable-broadcast", [0x7200] = "session", [0x8000] = "monitoring"},
  [2] = {[8] = "keep-alive", [0x14] = "station", [0x18] = "mesh", [0x1C] = "sync-clock", [0x24] = "local", [0x2C] = "net", [0x34] = "nat", [0x44] = "lan", [0x58] = "rtt", [0x68] = "unreliable", [0x7C] = "reliable", [0x84] = "reliable-broadcast", [0x94] = "session", [0xA4] = "monitoring", [0xA8] = "relay"},
  [3] = {[8] = "keep-alive", [0x14] = "station", [0x18] = "mesh", [0x1C] = "sync-clock", [0x24] = "local", [0x2C] = "net", [0x34] = "nat", [0x44] = "lan", [0x58] = "rtt", [0x68] = "unreliable", [0x7C] = "reliable", [0x80] = "broadcast-reliable", [0x84] = "reliable-broadcast", [0x94] = "session", [0xA4] = "monitoring", [0xA8] = "relay"},
  [4] = {[8] = "keep-alive", [0x14] = "station", [0x18] = "mesh", [0x1C] = "sync-clock", [0x24] = "local", [0x2C] = "net", [0x34] = "nat", [0x44] = "lan", [0x58] = "rtt", [0x68] = "unreliable", [0x7C] = "reliable", [0x80] = "broadcast-reliable", [0x94] = "session", [0xA4] = "monitoring", [0xA8] = "relay"},
  [5] = {[8] = "keep-alive", [0x14] = "station", [0x18] = "mesh", [0x1C] = "sync-clock", [0x24] = "local", [0x2C] = "net", [0x34] = "nat", [0x44] = "lan", [0x58] = "rtt", [0x68] = "unreliable", [0x7C] = "reliable", [0x80] = "broadcast-reliable", [0x94] = "session", [0xA4] = "monitoring"},
  [6] = {[8] = "keep-alive", [0x14] = "station", [0x18] = "mesh", [0x2C] = "net", [0x58] = "rtt", [0x68] = "unreliable", [0x7C] = "reliable", [0x80] = "broadcast-reliable", [0x98] = "session", [0xA4] = "monitoring"},
  [7] = {[1] = "net", [3] = "rtt", [5] = "unreliable", [0xA] = "reliable", [0xB] = "broadcast-reliable", [0xD] = "session", [0xF] = "monitoring", [0x14] = "station", [0x18] = "mesh"},
  [8] = {[0] = "net", [1] = "session", [3] = "rtt", [5] = "unreliable", [0xA] = "reliable", [0xB] = "broadcast-reliable", [0xE] = "monitoring"},
}
GEN.versions = {
  ["3.10"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["3.3"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["3.4"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["3.5"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["3.6"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["3.7"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["3.8"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["3.9"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["4.10"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["4.5"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["4.6"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["4.7"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["4.8"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["4.9"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["5.10"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-B", hv = nil, mf = "M-B", no_bundle = 8, protos = 2, tag = 0x10, window = "<=5.12", zlib = 0},
  ["5.11"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-C", hv = 3, mf = "M-C", no_bundle = 8, protos = 2, tag = 0x10, window = "<=5.12", zlib = 0},
  ["5.12"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-C", hv = 3, mf = "M-C", no_bundle = 8, protos = 2, tag = 0x10, window = "<=5.12", zlib = 0},
  ["5.14"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-C", hv = 3, mf = "M-D", no_bundle = 8, protos = 3, tag = 0x10, window = "5.14", zlib = 0x10},
  ["5.17"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-C", hv = 3, mf = "M-D", no_bundle = 8, protos = 3, tag = 0x10, window = "5.17-5.19", zlib = 0x10},
  ["5.18"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-C", hv = 4, mf = "M-E", no_bundle = 8, protos = 3, tag = 0x10, window = "5.17-5.19", zlib = 0x10},
  ["5.19"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-C", hv = 4, mf = "M-E", no_bundle = 8, protos = 3, tag = 0x10, window = "5.17-5.19", zlib = 0x10},
  ["5.2"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["5.20"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-C", hv = 4, mf = "M-E", no_bundle = 8, protos = 4, tag = 0x10, window = "5.17-5.19", zlib = 0x10},
  ["5.21"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-C", hv = 4, mf = "M-E", no_bundle = 8, protos = 4, tag = 0x10, window = "5.17-5.19", zlib = 0x10},
  ["5.23"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-D", hv = 5, mf = "M-E", no_bundle = 8, protos = 4, tag = 8, window = "5.17-5.19", zlib = 0x10},
  ["5.24"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-D", hv = 5, mf = "M-E", no_bundle = 8, protos = 4, tag = 8, window = "5.17-5.19", zlib = 0x10},
  ["5.25"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-D", hv = 5, mf = "M-E", no_bundle = 8, protos = 4, tag = 8, window = "5.17-5.19", zlib = 0x10},
  ["5.26"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-D", hv = 5, mf = "M-E", no_bundle = 8, protos = 5, tag = 8, window = "5.17-5.19", zlib = 0x10},
  ["5.27"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.28"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.29"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.3"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["5.30"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.31"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.32"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.33"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.34"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.35"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.36"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.37"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.38"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.39"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.4"] = {align = true, bitmap = 0, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-A", no_bundle = 8, protos = 1, tag = 0x10, window = "<=5.12", zlib = 0},
  ["5.40"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.41"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.42"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.43"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.44"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.45"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "plain", hf = "H-E", hv = 9, mf = "M-F", no_bundle = 0x10, protos = 5, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["5.6"] = {align = true, bitmap = 1, cipher = "aes-ecb+hmac-md5", footer = "none", hf = "H-A", hv = nil, mf = "M-B", no_bundle = 8, protos = 2, tag = 0x10, window = "<=5.12", zlib = 0},
  ["5.7"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-B", hv = nil, mf = "M-B", no_bundle = 8, protos = 2, tag = 0x10, window = "<=5.12", zlib = 0},
  ["5.8"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-B", hv = nil, mf = "M-B", no_bundle = 8, protos = 2, tag = 0x10, window = "<=5.12", zlib = 0},
  ["5.9"] = {align = true, bitmap = 1, cipher = "aes-gcm", footer = "none", hf = "H-B", hv = nil, mf = "M-B", no_bundle = 8, protos = 2, tag = 0x10, window = "<=5.12", zlib = 0},
  ["6.16"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xB, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.17"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xB, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.18"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xB, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.19"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xB, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.20"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xB, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.21"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xB, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.22"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xB, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.23"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xB, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.25"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xC, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.26"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xC, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.29"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xD, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.30"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "plain", hf = "H-F", hv = 0xD, mf = "M-F", no_bundle = 0x10, protos = 6, tag = 8, window = "5.29-5.43", zlib = 0x20},
  ["6.32"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "encrypted", hf = "H-G", hv = 0xF, mf = "M-G", no_bundle = 0, protos = 7, tag = 8, window = "7.0", zlib = 0},
  ["6.33"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "encrypted", hf = "H-G", hv = 0xF, mf = "M-G", no_bundle = 0, protos = 7, tag = 8, window = "7.0", zlib = 0},
  ["6.34"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "encrypted", hf = "H-G", hv = 0xF, mf = "M-G", no_bundle = 0, protos = 7, tag = 8, window = "7.0", zlib = 0},
  ["6.39"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "encrypted", hf = "H-G", hv = 0x10, mf = "M-G", no_bundle = 0, protos = 7, tag = 8, window = "7.0", zlib = 0},
  ["6.40"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "encrypted", hf = "H-G", hv = 0x10, mf = "M-G", no_bundle = 0, protos = 7, tag = 8, window = "7.0", zlib = 0},
  ["6.41"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "encrypted", hf = "H-G", hv = 0x10, mf = "M-G", no_bundle = 0, protos = 7, tag = 8, window = "7.0", zlib = 0},
  ["7.0"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "encrypted", hf = "H-G", hv = 0x10, mf = "M-G", no_bundle = 0, protos = 8, tag = 8, window = "7.0", zlib = 0},
  ["7.1"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "encrypted", hf = "H-G", hv = 0x10, mf = "M-G", no_bundle = 0, protos = 8, tag = 8, window = "7.0", zlib = 0},
  ["7.2"] = {align = false, bitmap = 0, cipher = "aes-gcm", footer = "encrypted", hf = "H-G", hv = 0x10, mf = "M-G", no_bundle = 0, protos = 8, tag = 8, window = "7.0", zlib = 0},
}
GEN.header_versions = {
  [3] = "H-C",
  [4] = "H-C",
  [5] = "H-D",
  [9] = "H-E",
  [0xB] = "H-F",
  [0xC] = "H-F",
  [0xD] = "H-F",
  [0xF] = "H-G",
  [0x10] = "H-G",
}
GEN.header_sizes = {
  ["H-A"] = 0xC,
  ["H-B"] = 0x24,
  ["H-C"] = 0x20,
  ["H-D"] = 0x18,
  ["H-E"] = 0x20,
  ["H-F"] = 0x1C,
  ["H-G"] = 0x1D,
}
GEN.guesses = {
  ["H-A"] = {"5.4", "5.6"},
  ["H-B"] = {"5.10"},
  ["H-C/3"] = {"5.12", "5.17"},
  ["H-C/4"] = {"5.21"},
  ["H-D/5"] = {"5.26"},
  ["H-E/9"] = {"5.45"},
  ["H-F/11"] = {"6.23"},
  ["H-F/12"] = {"6.26"},
  ["H-F/13"] = {"6.30"},
  ["H-G/15"] = {"6.34"},
  ["H-G/16"] = {"7.2"},
}
GEN.max_inflated = 0x100000
GEN.station_types = {
  [1] = "connection_request",
  [2] = "connection_response",
  [3] = "disconnection_request",
  [4] = "disconnection_response",
  [5] = "ack",
  [6] = "relay_connection_request",
  [7] = "relay_connection_response",
}
GEN.mesh_types = {
  [1] = "join_request",
  [2] = "join_response",
  [4] = "leave_request",
  [8] = "leave_response",
  [0x10] = "destroy_mesh",
  [0x11] = "destroy_response",
  [0x20] = "update_mesh",
  [0x21] = "kickout_notice",
  [0x22] = "dummy",
  [0x23] = "dummy_ack",
  [0x24] = "connection_failure_notice",
  [0x25] = "inconsistent_notice",
  [0x40] = "greeting",
  [0x41] = "migration_finish",
  [0x42] = "greeting_response",
  [0x44] = "migration_start",
  [0x48] = "migration_response",
  [0x49] = "multi_migration_start",
  [0x4A] = "multi_migration_rank_decision",
  [0x80] = "connection_report",
  [0x81] = "relay_route_directions",
}
GEN.lan_message_types = {
  [3] = "host_request",
  [4] = "host",
  [5] = "session_request",
  [6] = "session",
  [7] = "keep_alive",
}
GEN.window_flags = {
  [1] = "has_payload",
  [2] = "first_fragment",
  [4] = "last_fragment",
  [8] = "initialized",
  [0x10] = "zlib",
  [0x20] = "reset",
  [0x40] = "reset_ack",
}
GEN.lan_request_search_sizes = {0x23A, 0xE, 0x16, 0x20}
GEN.lan_request_tails = {0, 0x12A, 0x12B, 0x13B}
GEN.lan_reply_tails = {0, 0x3A, 0x3B}
GEN.ldn_magic = "PNLD"
GEN.ldn_port = 0x76C0
GEN.prudp_types = {
  [0] = "SYN",
  [1] = "CONNECT",
  [2] = "DATA",
  [3] = "DISCONNECT",
  [4] = "PING",
  [5] = "USER",
  [6] = "ROUTE",
  [7] = "RAW",
}
GEN.prudp_flags = {
  [1] = "ACK",
  [2] = "RELIABLE",
  [4] = "NEED_ACK",
  [8] = "HAS_SIZE",
  [0x200] = "MULTI_ACK",
}
GEN.prudp_stream_types = {
  [1] = "DO",
  [2] = "RV",
  [3] = "OLD_RV_SEC",
  [4] = "SBMGMT",
  [5] = "NAT",
  [6] = "SESSION_DISCOVERY",
  [7] = "NAT_ECHO",
  [8] = "ROUTING",
  [9] = "GAME",
  [0xA] = "RV_SECURE",
  [0xB] = "RELAY",
}
GEN.prudp_variants = {
  ["nintendo-v0"] = {checksum_bytes = 1, connection_signature_bytes = 4, flags_bytes = 2, fragment_id_bytes = 1, framing = "v0", keyless_stream_types = {}},
  ["nintendo-v0-friends"] = {checksum_bytes = 1, connection_signature_bytes = 4, flags_bytes = 2, fragment_id_bytes = 1, framing = "v0", keyless_stream_types = {}},
  ["nintendo-v1"] = {checksum_bytes = 0, connection_signature_bytes = 0x10, flags_bytes = 2, fragment_id_bytes = 1, framing = "v1", keyless_stream_types = {}},
  ["quazal-v0"] = {checksum_bytes = 1, connection_signature_bytes = 4, flags_bytes = 1, fragment_id_bytes = 1, framing = "v0", keyless_stream_types = {1, 5}},
  rendezvous = {checksum_bytes = 4, connection_signature_bytes = 4, flags_bytes = 1, fragment_id_bytes = 4, framing = "v0", keyless_stream_types = {}},
}
-- END GENERATED TABLES

-- ---------------------------------------------------------------------------------------------------------------
-- Small helpers (arithmetic instead of bit libraries: the same code runs on Lua 5.2, 5.3 and 5.4)

local function has(value, flag)
    return flag ~= 0 and math.floor(value / flag) % 2 == 1
end

local function version_key(v)
    local a, b = string.match(v or "", "^(%d+)%.(%d+)$")
    if not a then return nil end
    return tonumber(a) * 1000 + tonumber(b)
end

local function hexstr(n, width)
    return string.format("0x%0" .. (width or 2) .. "x", n)
end

local function flag_text(value, names)
    local parts = {}
    local keys = {}
    for bit, _ in pairs(names) do keys[#keys + 1] = bit end
    table.sort(keys)
    for _, bit in ipairs(keys) do
        if has(value, bit) then parts[#parts + 1] = names[bit] end
    end
    return table.concat(parts, "|")
end

local function set_of(list)
    local s = {}
    for _, v in ipairs(list) do s[v] = true end
    return s
end

-- Each version's protocol id table (the generated block names it by number).
for name, p in pairs(GEN.versions) do
    p.protos = GEN.protocol_ids[p.protos]
    p.name = name
    p.key = version_key(name)
end

local LAN_SEARCH_SIZES = set_of(GEN.lan_request_search_sizes)
local LAN_REQUEST_TAILS = set_of(GEN.lan_request_tails)
local LAN_REPLY_TAILS = set_of(GEN.lan_reply_tails)

-- ---------------------------------------------------------------------------------------------------------------
-- Protocols, fields, expert info

local pia = Proto("pia", "Nintendo Pia")
local prudp = Proto("prudp", "PRUDP (Nintendo NEX / Quazal Rendez-Vous)")

local F = {}
local function field(key, ctor, ...)
    F[key] = ctor(...)
end

-- Pia header (§1.1)
field("format", ProtoField.string, "pia.format", "Header format")
field("lib_version", ProtoField.string, "pia.lib_version", "Pia version used to read the packet")
field("lib_version_source", ProtoField.string, "pia.lib_version_source", "Pia version from")
field("magic", ProtoField.uint32, "pia.magic", "Magic", base.HEX)
field("encryption", ProtoField.uint8, "pia.encryption", "Encryption (1 plain, 2 encrypted)", base.DEC)
field("version_byte", ProtoField.uint8, "pia.version_byte", "Encryption and header version", base.HEX)
field("encrypted", ProtoField.bool, "pia.encrypted", "Encrypted")
field("version", ProtoField.uint8, "pia.version", "Header version", base.DEC)
field("connection_id", ProtoField.uint8, "pia.connection_id", "Connection id", base.DEC)
field("packet_id", ProtoField.uint16, "pia.packet_id", "Packet id", base.DEC)
field("source_timer", ProtoField.uint16, "pia.source_timer", "Source timer", base.DEC)
field("destination_timer", ProtoField.uint16, "pia.destination_timer", "Destination timer", base.DEC)
field("destination_variable_id", ProtoField.uint32, "pia.destination_variable_id", "Destination variable id", base.HEX)
field("source_variable_id", ProtoField.uint32, "pia.source_variable_id", "Source variable id", base.HEX)
field("padding_flags", ProtoField.uint8, "pia.padding_flags", "Padding size and packet flags", base.HEX)
field("padding_size", ProtoField.uint8, "pia.padding_size", "Padding size", base.DEC)
field("packet_flags", ProtoField.uint8, "pia.packet_flags", "Packet flags", base.HEX)
field("flag_zstd", ProtoField.bool, "pia.packet_flags.zstd", "Payload Zstandard-compressed")
field("flag_skip_dst", ProtoField.bool, "pia.packet_flags.skip_destination_check", "Skip destination variable id check")
field("flag_skip_net", ProtoField.bool, "pia.packet_flags.skip_network_check", "Skip network connection check")
field("zstd_payload", ProtoField.bytes, "pia.compressed_payload", "Compressed payload (Zstandard)")
field("footer_size", ProtoField.uint8, "pia.footer_size", "Footer size", base.DEC)
field("nonce", ProtoField.bytes, "pia.nonce", "Header nonce")
field("tag", ProtoField.bytes, "pia.tag", "AES-GCM tag")
field("hmac", ProtoField.bytes, "pia.hmac", "HMAC-MD5")
field("body", ProtoField.bytes, "pia.body", "Encrypted body")
field("ff_padding", ProtoField.bytes, "pia.ff_padding", "0xFF padding")
field("auth", ProtoField.string, "pia.auth", "Authentication (pianode export)")
field("body_state", ProtoField.string, "pia.body_state", "Body (pianode export)")
field("footer", ProtoField.bytes, "pia.footer", "Footer")
field("footer_vid", ProtoField.uint16, "pia.footer.variable_id", "Receiver variable id", base.HEX)
field("message_count", ProtoField.uint16, "pia.message_count", "Messages", base.DEC)

-- Pia messages (§2.1)
field("msg", ProtoField.bytes, "pia.msg", "Message")
field("msg_presence", ProtoField.uint8, "pia.msg.presence", "Presence mask", base.HEX)
field("msg_flags", ProtoField.uint8, "pia.msg.flags", "Flags", base.HEX)
field("msg_version", ProtoField.uint8, "pia.msg.version", "Message version", base.DEC)
field("msg_station_index", ProtoField.uint8, "pia.msg.source_station_index", "Source station index", base.DEC)
field("msg_payload_size", ProtoField.uint16, "pia.msg.payload_size", "Payload size", base.DEC)
field("msg_destination", ProtoField.uint64, "pia.msg.destination", "Destination", base.HEX)
field("msg_source", ProtoField.uint64, "pia.msg.source_constant_id", "Source constant id", base.HEX)
field("msg_protocol_type", ProtoField.uint16, "pia.msg.protocol_type", "Protocol type", base.HEX)
field("msg_protocol", ProtoField.string, "pia.msg.protocol", "Protocol")
field("msg_protocol_port", ProtoField.uint32, "pia.msg.protocol_port", "Protocol port", base.DEC)
field("msg_reserved", ProtoField.uint32, "pia.msg.reserved", "Reserved", base.HEX)
field("msg_extra", ProtoField.uint8, "pia.msg.protocol_specific", "Protocol-specific byte", base.HEX)
field("msg_payload", ProtoField.bytes, "pia.msg.payload", "Payload")
field("msg_length", ProtoField.uint32, "pia.msg.length", "Payload length (decompressed)", base.DEC)
field("msg_wire_payload", ProtoField.bytes, "pia.msg.compressed_payload", "Compressed payload (zlib)")
field("msg_zlib", ProtoField.bool, "pia.msg.zlib", "Payload zlib-compressed")
field("msg_align", ProtoField.bytes, "pia.msg.alignment", "Alignment padding")

-- Sub-protocols (§5)
field("station_type", ProtoField.uint8, "pia.station.type", "Station message type", base.DEC)
field("mesh_type", ProtoField.uint8, "pia.mesh.type", "Mesh message type", base.HEX)
field("station_ack_id", ProtoField.uint32, "pia.station.ack_id", "Ack id", base.DEC)
field("station_connection_id", ProtoField.uint8, "pia.station.connection_id", "Connection id", base.DEC)
field("station_version", ProtoField.uint8, "pia.station.version", "Station protocol version", base.DEC)
field("station_is_inverse", ProtoField.uint8, "pia.station.is_inverse", "Inverse request", base.DEC)
field("station_target_cid", ProtoField.uint64, "pia.station.target_constant_id", "Target constant id", base.HEX)
field("station_target_vid", ProtoField.uint32, "pia.station.target_variable_id", "Target variable id", base.HEX)
field("station_inverse_cid", ProtoField.uint8, "pia.station.inverse_connection_id", "Inverse connection id", base.DEC)
field("station_result", ProtoField.uint8, "pia.station.result", "Result", base.DEC)
field("station_platform", ProtoField.uint8, "pia.station.platform", "Platform", base.DEC,
      {[2] = "3DS", [3] = "Wii U", [4] = "Switch"})
field("station_protocols", ProtoField.uint8, "pia.station.protocol_count", "Protocols listed", base.DEC)
field("mesh_ack_id", ProtoField.uint32, "pia.mesh.ack_id", "Ack id", base.DEC)
field("mesh_station_index", ProtoField.uint8, "pia.mesh.station_index", "Station index", base.DEC)
field("mesh_station_count", ProtoField.uint8, "pia.mesh.station_count", "Stations (joiner included)", base.DEC)
field("mesh_host_index", ProtoField.uint8, "pia.mesh.host_index", "Host index", base.DEC)
field("mesh_joiner_index", ProtoField.uint8, "pia.mesh.joiner_index", "Joiner index", base.DEC)
field("rtt_kind", ProtoField.uint32, "pia.rtt.kind", "RTT kind", base.DEC, {[0] = "request", [1] = "response"})
field("rtt_reserved", ProtoField.uint32, "pia.rtt.reserved", "Reserved", base.HEX)
field("rtt_time", ProtoField.uint64, "pia.rtt.time", "Time", base.DEC)
field("clock_a", ProtoField.uint64, "pia.sync_clock.tick", "Tick", base.DEC)
field("clock_b", ProtoField.uint64, "pia.sync_clock.clock", "Clock (0 in a request)", base.DEC)
field("keep_alive", ProtoField.string, "pia.keep_alive", "Keep alive")
field("seg_flags", ProtoField.uint16, "pia.reliable.flags", "Segment flags", base.HEX)
field("seg_stream", ProtoField.uint8, "pia.reliable.stream_id", "Stream id", base.DEC)
field("seg_size", ProtoField.uint16, "pia.reliable.payload_size", "Segment payload size", base.DEC)
field("seg_seq", ProtoField.uint32, "pia.reliable.sequence_id", "Sequence id", base.DEC)
field("seg_ack", ProtoField.uint32, "pia.reliable.ack_id", "Acknowledgement id", base.DEC)
field("seg_ack_bitmap", ProtoField.uint64, "pia.reliable.ack_bitmap", "Early-arrival bitmap", base.HEX)
field("seg_lowest", ProtoField.uint16, "pia.reliable.lowest_pending", "Lowest sequence id pending ack", base.DEC)
field("seg_count", ProtoField.uint8, "pia.reliable.destination_count", "Destination count", base.DEC)
field("seg_dest", ProtoField.bytes, "pia.reliable.destinations", "Destinations")
field("seg_unknown", ProtoField.bytes, "pia.reliable.unknown", "Unknown")
field("seg_payload", ProtoField.bytes, "pia.reliable.payload", "Segment payload")
field("lanmsg_type", ProtoField.uint8, "pia.lan.message.type", "LAN message type", base.DEC)
field("lanmsg_network_id", ProtoField.uint32, "pia.lan.message.network_id", "Network id", base.HEX)
field("lanmsg_tag", ProtoField.uint32, "pia.lan.message.tag", "Random tag", base.HEX)
field("lanmsg_seq", ProtoField.uint16, "pia.lan.message.sequence_id", "Sequence id", base.DEC)
field("lanmsg_frag", ProtoField.uint8, "pia.lan.message.fragment_index", "Fragment index", base.DEC)
field("lanmsg_frags", ProtoField.uint8, "pia.lan.message.fragment_count", "Fragment count", base.DEC)
field("lanmsg_fsize", ProtoField.uint32, "pia.lan.message.fragment_size", "Fragment size", base.DEC)

-- LAN browse (§6.2, §6.3)
field("lan_type", ProtoField.uint8, "pia.lan.browse.type", "Browse packet", base.DEC, {[0] = "request", [1] = "reply"})
field("lan_size", ProtoField.uint32, "pia.lan.browse.size", "Block size", base.DEC)
field("lan_block", ProtoField.bytes, "pia.lan.browse.block", "Search criteria / session block")
field("lan_challenge", ProtoField.bytes, "pia.lan.browse.challenge", "Crypto challenge")
field("lan_chal_version", ProtoField.uint8, "pia.lan.browse.challenge.version", "Challenge version", base.DEC)
field("lan_chal_enabled", ProtoField.uint8, "pia.lan.browse.challenge.enabled", "Challenge enabled", base.DEC)
field("lan_s_min_max", ProtoField.uint16, "pia.lan.search.min_participants.max", "Min participants, up to", base.DEC)
field("lan_s_min_min", ProtoField.uint16, "pia.lan.search.min_participants.min", "Min participants, from", base.DEC)
field("lan_s_max_max", ProtoField.uint16, "pia.lan.search.max_participants.max", "Max participants, up to", base.DEC)
field("lan_s_max_min", ProtoField.uint16, "pia.lan.search.max_participants.min", "Max participants, from", base.DEC)
field("lan_s_opened", ProtoField.uint8, "pia.lan.search.opened_only", "Opened sessions only", base.DEC)
field("lan_s_vacant", ProtoField.uint8, "pia.lan.search.vacant_only", "Vacant sessions only", base.DEC)
field("lan_s_offset", ProtoField.uint32, "pia.lan.search.result_range_offset", "Result range offset", base.DEC)
field("lan_s_size", ProtoField.uint32, "pia.lan.search.result_range_size", "Result range size", base.DEC)
field("lan_s_game_mode", ProtoField.uint32, "pia.lan.search.game_mode", "Game mode", base.DEC)
field("lan_s_session_type", ProtoField.uint32, "pia.lan.search.session_type", "Session type", base.DEC)
field("lan_s_attr_values", ProtoField.bytes, "pia.lan.search.attribute.values", "Attribute list values (20 u32)")
field("lan_s_attr_size", ProtoField.uint8, "pia.lan.search.attribute.list_size", "Attribute list size", base.DEC)
field("lan_s_attr_min", ProtoField.uint32, "pia.lan.search.attribute.range_min", "Attribute range min", base.DEC)
field("lan_s_attr_max", ProtoField.uint32, "pia.lan.search.attribute.range_max", "Attribute range max", base.DEC)
field("lan_s_attr_mode", ProtoField.uint8, "pia.lan.search.attribute.range_mode", "Attribute range mode", base.DEC)
field("lan_s_flags", ProtoField.uint32, "pia.lan.search.flags", "Search flags", base.HEX)
field("lan_s_key", ProtoField.uint64, "pia.lan.search.matchmake_key", "Matchmake key", base.HEX)
field("lan_s_upper", ProtoField.uint16, "pia.lan.search.max_stations_upper", "Max stations, up to", base.DEC)
field("lan_s_lower", ProtoField.uint16, "pia.lan.search.max_stations_lower", "Max stations, from", base.DEC)
field("lan_s_title", ProtoField.uint64, "pia.lan.search.title_id", "Title id", base.HEX)
field("lan_chal_seq", ProtoField.uint8, "pia.lan.browse.challenge.sequence_id", "Sequence id", base.DEC)
field("lan_chal_counter", ProtoField.uint64, "pia.lan.browse.challenge.counter", "Nonce counter", base.DEC)
field("lan_chal_key", ProtoField.bytes, "pia.lan.browse.challenge.key", "Challenge key")
field("lan_chal_tag", ProtoField.bytes, "pia.lan.browse.challenge.tag", "AES-GCM tag")
field("lan_chal_data", ProtoField.bytes, "pia.lan.browse.challenge.data", "Encrypted challenge")
field("lan_game_mode", ProtoField.uint32, "pia.lan.session.game_mode", "Game mode", base.DEC)
field("lan_network_id", ProtoField.uint32, "pia.lan.session.network_id", "Network id", base.HEX)
field("lan_attribute", ProtoField.uint32, "pia.lan.session.attribute", "Attribute", base.DEC)
field("lan_current", ProtoField.uint16, "pia.lan.session.current_participants", "Current participants", base.DEC)
field("lan_min", ProtoField.uint16, "pia.lan.session.min_participants", "Min participants", base.DEC)
field("lan_max", ProtoField.uint16, "pia.lan.session.max_participants", "Max participants", base.DEC)
field("lan_sys_version", ProtoField.uint8, "pia.lan.session.system_version", "System communication version", base.DEC)
field("lan_app_version", ProtoField.uint8, "pia.lan.session.application_version", "Application communication version", base.DEC)
field("lan_session_type", ProtoField.uint32, "pia.lan.session.session_type", "Session type", base.DEC)
field("lan_app_data", ProtoField.bytes, "pia.lan.session.application_data", "Application data")
field("lan_opened", ProtoField.uint8, "pia.lan.session.opened", "Opened", base.DEC)
field("lan_player_limit", ProtoField.uint8, "pia.lan.session.has_player_limit", "Has a player limit", base.DEC)
field("lan_players", ProtoField.uint8, "pia.lan.session.player_limit", "Player limit", base.DEC)
field("lan_host", ProtoField.bytes, "pia.lan.session.host", "Host address")
field("lan_host_cid", ProtoField.uint64, "pia.lan.session.host_constant_id", "Host constant id", base.HEX)
field("lan_station_role", ProtoField.uint8, "pia.lan.session.station.role", "Station role", base.DEC,
      {[0] = "empty", [1] = "host", [2] = "player"})
field("lan_station_name", ProtoField.bytes, "pia.lan.session.station.name", "Station user name (raw)")
field("lan_station_cid", ProtoField.uint64, "pia.lan.session.station.constant_id", "Station constant id", base.HEX)
field("lan_key_param", ProtoField.bytes, "pia.lan.session.key_param", "Session key param")
field("lan_matchmake_key", ProtoField.uint64, "pia.lan.session.matchmake_key", "Matchmake key", base.HEX)
field("lan_network_id64", ProtoField.uint64, "pia.lan.session.network_id64", "Network id", base.HEX)

-- Simulated LDN discovery channel (pianode/ldn_frames.py)
field("ldn_magic", ProtoField.string, "pia.ldn.magic", "Magic")
field("ldn_channel", ProtoField.uint8, "pia.ldn.channel_version", "Channel version", base.DEC)
field("ldn_kind", ProtoField.uint8, "pia.ldn.kind", "Kind", base.DEC,
      {[1] = "advertisement", [2] = "connect", [3] = "reply", [4] = "leave"})
field("ldn_pia_port", ProtoField.uint16, "pia.ldn.pia_port", "Pia port", base.DEC)
field("ldn_control_port", ProtoField.uint16, "pia.ldn.control_port", "Control port", base.DEC)
field("ldn_local_id", ProtoField.uint64, "pia.ldn.local_communication_id", "Local communication id", base.HEX)
field("ldn_game_mode", ProtoField.uint16, "pia.ldn.game_mode", "Game mode", base.DEC)
field("ldn_ssid", ProtoField.bytes, "pia.ldn.ssid", "SSID")
field("ldn_version", ProtoField.uint8, "pia.ldn.version", "LDN version", base.DEC)
field("ldn_encryption", ProtoField.uint8, "pia.ldn.encryption", "Encryption", base.DEC)
field("ldn_participants", ProtoField.uint8, "pia.ldn.participants", "Participants", base.DEC)
field("ldn_participant_ip", ProtoField.ipv4, "pia.ldn.participant.ip", "Participant address")
field("ldn_participant_mac", ProtoField.ether, "pia.ldn.participant.mac", "Participant MAC")
field("ldn_app_data", ProtoField.bytes, "pia.ldn.application_data", "Pia application data")
field("ldn_rest", ProtoField.bytes, "pia.ldn.data", "Data")

-- PRUDP (prudp.md §1-§3)
field("p_version", ProtoField.string, "prudp.version", "PRUDP framing")
field("p_variant", ProtoField.string, "prudp.variant", "Variant")
field("p_magic", ProtoField.bytes, "prudp.magic", "Magic")
field("p_prudp_version", ProtoField.uint8, "prudp.prudp_version", "PRUDP version", base.DEC)
field("p_options_length", ProtoField.uint8, "prudp.options_length", "Options length", base.DEC)
field("p_src", ProtoField.uint8, "prudp.source", "Source virtual port", base.HEX)
field("p_dst", ProtoField.uint8, "prudp.destination", "Destination virtual port", base.HEX)
field("p_src_type", ProtoField.uint8, "prudp.source.stream_type", "Source stream type", base.DEC, GEN.prudp_stream_types)
field("p_src_port", ProtoField.uint8, "prudp.source.port", "Source port", base.DEC)
field("p_dst_type", ProtoField.uint8, "prudp.destination.stream_type", "Destination stream type", base.DEC, GEN.prudp_stream_types)
field("p_dst_port", ProtoField.uint8, "prudp.destination.port", "Destination port", base.DEC)
field("p_type_flags", ProtoField.uint16, "prudp.type_flags", "Type and flags", base.HEX)
field("p_type", ProtoField.uint8, "prudp.type", "Type", base.DEC, GEN.prudp_types)
field("p_flags", ProtoField.uint16, "prudp.flags", "Flags", base.HEX)
field("p_flag_ack", ProtoField.bool, "prudp.flags.ack", "ACK")
field("p_flag_reliable", ProtoField.bool, "prudp.flags.reliable", "RELIABLE")
field("p_flag_need_ack", ProtoField.bool, "prudp.flags.need_ack", "NEED_ACK")
field("p_flag_has_size", ProtoField.bool, "prudp.flags.has_size", "HAS_SIZE")
field("p_flag_multi_ack", ProtoField.bool, "prudp.flags.multi_ack", "MULTI_ACK")
field("p_session_id", ProtoField.uint8, "prudp.session_id", "Session id", base.HEX)
field("p_substream_id", ProtoField.uint8, "prudp.substream_id", "Substream id", base.DEC)
field("p_signature", ProtoField.bytes, "prudp.signature", "Packet signature")
field("p_signature_status", ProtoField.string, "prudp.signature.status", "Signature status (pianode decode's export)")
field("p_sequence_id", ProtoField.uint16, "prudp.sequence_id", "Sequence id", base.DEC)
field("p_connection_signature", ProtoField.bytes, "prudp.connection_signature", "Connection signature")
field("p_fragment_id", ProtoField.uint32, "prudp.fragment_id", "Fragment id", base.DEC)
field("p_payload_size", ProtoField.uint16, "prudp.payload_size", "Payload size", base.DEC)
field("p_payload", ProtoField.bytes, "prudp.payload", "Payload")
field("p_checksum", ProtoField.uint32, "prudp.checksum", "Checksum", base.HEX)
field("p_checksum_status", ProtoField.string, "prudp.checksum.status", "Checksum status")
field("p_option", ProtoField.bytes, "prudp.option", "Option")
field("p_option_id", ProtoField.uint8, "prudp.option.id", "Option id", base.HEX,
      {[0] = "supported functions", [1] = "connection signature", [2] = "fragment id",
       [3] = "initial unreliable sequence id", [4] = "maximum substream id", [0x80] = "Lite signature"})
field("p_option_size", ProtoField.uint8, "prudp.option.size", "Option size", base.DEC)
field("p_option_value", ProtoField.bytes, "prudp.option.value", "Option value")
field("p_supported_functions", ProtoField.uint32, "prudp.supported_functions", "Supported functions", base.HEX)
field("p_minor_version", ProtoField.uint8, "prudp.minor_version", "Minor version", base.DEC)
field("p_initial_unreliable", ProtoField.uint16, "prudp.initial_unreliable_sequence_id",
      "Initial unreliable sequence id", base.DEC)
field("p_max_substream", ProtoField.uint8, "prudp.max_substream_id", "Maximum substream id", base.DEC)
field("p_lite_signature", ProtoField.bytes, "prudp.lite_signature", "Lite signature")
field("p_stream_types", ProtoField.uint8, "prudp.stream_types", "Stream types (source << 4 | destination)", base.HEX)

local pia_fields, prudp_fields = {}, {}
for key, f in pairs(F) do
    if key:sub(1, 2) == "p_" then prudp_fields[#prudp_fields + 1] = f else pia_fields[#pia_fields + 1] = f end
end
pia.fields = pia_fields
prudp.fields = prudp_fields

local E = {
    malformed = ProtoExpert.new("pia.malformed", "Malformed Pia packet", expert.group.MALFORMED, expert.severity.ERROR),
    auth_failed = ProtoExpert.new("pia.auth_failed", "Authentication failed (pianode export: bytes as captured)",
                                  expert.group.SECURITY, expert.severity.WARN),
    encrypted = ProtoExpert.new("pia.encrypted_body", "Encrypted body: export with pianode decode --decrypted-pcap",
                                expert.group.UNDECODED, expert.severity.NOTE),
    zlib = ProtoExpert.new("pia.zlib_failed", "zlib-flagged payload does not inflate", expert.group.MALFORMED,
                           expert.severity.ERROR),
    sub = ProtoExpert.new("pia.subprotocol_malformed", "Malformed sub-protocol payload", expert.group.MALFORMED,
                          expert.severity.WARN),
    lan = ProtoExpert.new("pia.lan.malformed", "Malformed LAN browse packet", expert.group.MALFORMED,
                          expert.severity.ERROR),
    cut_short = ProtoExpert.new("pia.cut_short", "Packet cut short by the capture (snap length)", expert.group.MALFORMED,
                                expert.severity.WARN),
    guessed = ProtoExpert.new("pia.version_guessed", "Pia version guessed from the header",
                              expert.group.ASSUMPTION, expert.severity.CHAT),
    zstd = ProtoExpert.new("pia.zstd", "Payload Zstandard-compressed (packet flag 1): its messages are not dissected",
                           expert.group.UNDECODED, expert.severity.NOTE),
}
local PE = {
    malformed = ProtoExpert.new("prudp.malformed", "Malformed PRUDP packet", expert.group.MALFORMED,
                                expert.severity.ERROR),
    bad_checksum = ProtoExpert.new("prudp.bad_checksum", "PRUDP checksum mismatch", expert.group.CHECKSUM,
                                   expert.severity.WARN),
}
pia.experts = {E.malformed, E.auth_failed, E.encrypted, E.zlib, E.sub, E.lan, E.guessed, E.cut_short, E.zstd}
prudp.experts = {PE.malformed, PE.bad_checksum}

pia.prefs.version = Pref.string("Pia version", "auto",
    "Version to read packets without a pianode export comment (e.g. 5.18); auto = guess from the header")
prudp.prefs.v0_variant = Pref.enum("v0 variant", 0, "How to read PRUDP v0 packets without a pianode export comment",
    {{1, "auto", 0}, {2, "nintendo-v0", 1}, {3, "quazal-v0", 2}, {4, "rendezvous", 3}}, false)
prudp.prefs.access_key = Pref.string("Access key", "", "Access key for v0 checksums (text)")
prudp.prefs.heuristic_v0 = Pref.bool("Detect v0 by structure", true,
    "Claim UDP datagrams that parse exactly as PRUDP v0 (v0 has no magic)")

local V0_VARIANT_NAMES = {[0] = "auto", [1] = "nintendo-v0", [2] = "quazal-v0", [3] = "rendezvous"}

-- The pianode export comment(s) of the current frame.
local comment_field
do
    local ok, f = pcall(Field.new, "frame.comment")
    if ok then comment_field = f else
        ok, f = pcall(Field.new, "pkt_comment")
        if ok then comment_field = f end
    end
end

local function export_comment()
    if not comment_field then return nil end
    for _, fi in ipairs({comment_field()}) do
        local text = tostring(fi.value)
        if text:sub(1, 9) == "pianode: " then return text end
    end
    return nil
end

-- Whether pianode decode's export says this datagram was cut short by the original capture's snap length (the
-- export writes what was captured as a whole datagram, so its length no longer tells).
local function export_says_cut()
    if not comment_field then return false end
    for _, fi in ipairs({comment_field()}) do
        if tostring(fi.value):sub(1, 30) == "pianode decode: captured only " then return true end
    end
    return false
end

-- The UDP length field, when it says more payload bytes than the IP packet holds (Wireshark's "Bad length value >
-- IP payload length"): a host drops such a datagram, and pianode decode reports it with its header, not read.
local udp_length_field
do
    local ok, f = pcall(Field.new, "udp.length")
    if ok then udp_length_field = f end
end

local function udp_overrun(tvb)
    if not udp_length_field then return nil end
    local all = {udp_length_field()}
    local last = all[#all]
    if last and last.value - 8 > tvb:reported_len() then return last.value - 8 end
    return nil
end

local function comment_value(comment, key)
    if not comment then return nil end
    return string.match(comment, "[ ]" .. key .. "=([^ ]+)")
end

-- ---------------------------------------------------------------------------------------------------------------
-- Pia: header layout detection (§0.3, §1.1, §1.2) and the message walk (§2)

local MAGIC = ByteArray.new(GEN.magic)

-- Whether fixed-header messages (M-A 20 bytes / M-B 24 bytes), each padded to 4, tile [start, stop) exactly:
-- the length rule that tells a plain H-A packet from a plain H-B one (pianode.protocols.pia.header.sniff_header_format).
local function walks(tvb, start, stop)
    for _, w in ipairs({{20, 2}, {24, 1}}) do
        local hsize, off = w[1], w[2]
        local pos = start
        while pos + hsize <= stop do
            -- A packet the capture cut short (snap length): its messages fit as far as they were kept.
            if pos + off + 2 > tvb:len() then return true end
            pos = pos + hsize + tvb(pos + off, 2):uint()
            if pos == stop then return true end
            pos = pos + (-(pos - start)) % 4
            if pos == stop then return true end
        end
    end
    return false
end

-- The layout of a datagram's header ("H-A" ...) and the key of GEN.guesses, or nil.
local function sniff_format(tvb)
    -- The length rule is on the packet's length, which a capture cut short by its snap length still reports.
    local n = tvb:reported_len()
    if tvb:len() < 5 or tvb(0, 4):bytes() ~= MAGIC then return nil end
    local b4 = tvb(4, 1):uint()
    if b4 == 2 then
        if n >= 44 and (n - 28) % 16 == 0 then return "H-A", "H-A" end
        if n >= 52 and (n - 36) % 16 == 0 then return "H-B", "H-B" end
        return nil
    elseif b4 == 1 then
        if n >= 28 and walks(tvb, 12, n - 16) then return "H-A", "H-A" end
        if n >= 36 and walks(tvb, 36, n) then return "H-B", "H-B" end
        return nil
    end
    local hv = b4 % 128
    local fmt = GEN.header_versions[hv]
    if not fmt then return nil end
    return fmt, fmt .. "/" .. hv  -- a packet shorter than the header is shown as one (dissect_pia)
end

-- Messages of a plaintext body [start, stop) under version profile p: a list of records, or nil and an error.
-- Each value is {v = value, off = offset or nil when inherited (delta formats, §2.2), len = bytes}.
local function walk_messages(tvb, start, stop, p)
    local mf, align = p.mf, p.align
    local out = {}
    local pos = start
    local s = {flags = 0, size = 0, ptype = 0, port = 0, dest = UInt64(0), src = UInt64(0), extra = 0}
    local function ff_tail(at)
        for i = at, stop - 1 do
            if tvb(i, 1):uint() ~= 0xFF then return false end
        end
        return true
    end
    while pos < stop do
        if tvb(pos, 1):uint() == 0xFF and ff_tail(pos) then
            out.ff = {pos, stop - pos}
            break
        end
        local m = {start = pos}
        local function take(key, len, reader)
            if pos + len > stop then error(string.format("%s message header at offset %d runs past the body", mf, m.start - start)) end
            local r = tvb(pos, len)
            m[key] = {v = reader(r), off = pos, len = len}
            pos = pos + len
            return m[key].v
        end
        local u = function(r) return r:uint() end
        local u64 = function(r) return r:uint64() end
        local ok, err = pcall(function()
            if mf == "M-A" then
                take("flags", 1, u); take("station", 1, u); take("size", 2, u); take("dest", 4, u64)
                take("src", 4, u64); take("ptype", 2, u); take("port", 2, u); take("reserved", 4, u)
            elseif mf == "M-B" then
                take("flags", 1, u); take("size", 2, u); take("dest", 8, u64); take("src", 8, u64)
                take("ptype", 1, u); take("port", 1, u); take("reserved", 3, u)
            elseif mf == "M-C" or mf == "M-D" then
                take("flags", 1, u)
                local want = (mf == "M-C") and 1 or 2
                local mv = take("mversion", 1, u)
                if mv ~= want then error(string.format("%s message version %d (expected %d)", mf, mv, want)) end
                take("size", 2, u)
                if mf == "M-C" then
                    take("ptype", 1, u); take("port", 1, u)
                else
                    take("ptype", 1, u); take("port", 3, u)
                end
                take("dest", 8, u64); take("src", 8, u64)
            else
                local mask = take("presence", 1, u)
                local function delta(bit, key, len, reader)
                    if has(mask, bit) then
                        s[key] = take(key, len, reader)
                    else
                        m[key] = {v = s[key]}
                    end
                end
                delta(0x01, "flags", 1, u)
                delta(0x02, "size", 2, u)
                if mf == "M-G" then
                    delta(0x04, "ptype", 1, u)
                    delta(0x08, "port", 1, u)
                    delta(0x10, "extra", 1, u)
                else
                    if has(mask, 0x04) then
                        s.ptype = take("ptype", 1, u)
                        s.port = take("port", 3, u)
                    else
                        m.ptype = {v = s.ptype}
                        m.port = {v = s.port}
                    end
                    delta(0x08, "dest", 8, u64)
                    if mf == "M-E" then delta(0x10, "src", 8, u64) end
                end
            end
        end)
        if not ok then return nil, (tostring(err):gsub("^.-:%d+: ", "")) end
        local size = m.size.v
        if pos + size > stop then
            return nil, string.format("%s payload at offset %d needs %d bytes, %d left", mf, pos - start, size, stop - pos)
        end
        m.hdr_len = pos - m.start
        m.payload_off = pos
        m.payload_len = size
        pos = pos + size
        if align then
            local pad = (-(pos - start)) % 4
            if pos + pad > stop then pad = stop - pos end
            if pad > 0 then m.align = {pos, pad} end
            pos = pos + pad
        end
        m.stop = pos
        out[#out + 1] = m
    end
    return out
end

-- ---------------------------------------------------------------------------------------------------------------
-- Sub-protocols (§5.3-§5.8, §6.5).  Each takes the payload's Tvb (decompressed when it was compressed).

local function dissect_segment(tvb, tree, p, pinfo)
    -- The reliable sliding-window header (§5.8), layout per version (GEN.versions[*].window).
    local n = tvb:len()
    local layout = p.window
    local st = tree:add(pia, tvb(), "Reliable sliding-window segment (" .. layout .. ")")
    local pos, flags, size
    local function need(k)
        if pos + k > n then error("segment header runs past the payload") end
    end
    local ok, err = pcall(function()
        pos = 0
        if layout == "<=5.12" or layout == "5.14" then
            need(4)
            flags = tvb(0, 2):uint(); st:add(F.seg_flags, tvb(0, 2))
            size = tvb(2, 2):uint(); st:add(F.seg_size, tvb(2, 2))
            pos = 4
            if layout == "<=5.12" then
                need(20)
                st:add(F.seg_unknown, tvb(4, 4))
                st:add(F.seg_seq, tvb(8, 4)); st:add(F.seg_ack, tvb(12, 4)); st:add(F.seg_ack_bitmap, tvb(16, 8))
                pos = 24
            else
                need(18)
                st:add(F.seg_seq, tvb(4, 2)); st:add(F.seg_unknown, tvb(6, 8)); st:add(F.seg_unknown, tvb(14, 8))
                pos = 22
            end
        elseif layout == "7.0" then
            need(8)
            flags = tvb(0, 1):uint(); st:add(F.seg_flags, tvb(0, 1))
            size = tvb(1, 2):uint(); st:add(F.seg_size, tvb(1, 2))
            st:add(F.seg_seq, tvb(3, 2)); st:add(F.seg_lowest, tvb(5, 2))
            local count = tvb(7, 1):uint(); st:add(F.seg_count, tvb(7, 1))
            pos = 8
            need(4 * count)
            if count > 0 then st:add(F.seg_dest, tvb(8, 4 * count)) end
            pos = 8 + 4 * count
        else
            need(9)
            flags = tvb(0, 1):uint(); st:add(F.seg_flags, tvb(0, 1))
            st:add(F.seg_stream, tvb(1, 1))
            size = tvb(2, 2):uint(); st:add(F.seg_size, tvb(2, 2))
            st:add(F.seg_seq, tvb(4, 2)); st:add(F.seg_lowest, tvb(6, 2))
            local count = tvb(8, 1):uint(); st:add(F.seg_count, tvb(8, 1))
            local extra = (layout == "5.17-5.19") and 8 * count or 4 * math.floor((count + 31) / 32)
            pos = 9
            need(extra)
            if extra > 0 then st:add(F.seg_dest, tvb(9, extra)) end
            pos = 9 + extra
        end
    end)
    if not ok then
        st:add_proto_expert_info(E.sub, (tostring(err):gsub("^.-:%d+: ", "")))
        return nil
    end
    st:append_text(": " .. (flag_text(flags, GEN.window_flags) ~= "" and flag_text(flags, GEN.window_flags) or "ack"))
    if size ~= n - pos then
        st:add_proto_expert_info(E.sub, string.format("segment payload size %d, %d bytes present", size, n - pos))
    end
    if n > pos then st:add(F.seg_payload, tvb(pos)) end
    return flags, (n > pos) and tvb(pos):tvb() or nil
end

-- Mesh messages whose first bytes are the same in every version (§5.4): join request and join response.
local function dissect_mesh_message(tvb, tree)
    local n = tvb:len()
    local t = tvb(0, 1):uint()
    local it = tree:add(F.mesh_type, tvb(0, 1))
    it:append_text(" (" .. (GEN.mesh_types[t] or "unknown") .. ")")
    if t == 0x01 and n >= 6 then
        tree:add(F.mesh_station_index, tvb(1, 1))
        tree:add(F.mesh_ack_id, tvb(n - 4, 4))
    elseif t == 0x02 and n >= 12 then
        tree:add(F.mesh_station_count, tvb(1, 1)); tree:add(F.mesh_host_index, tvb(2, 1))
        tree:add(F.mesh_joiner_index, tvb(3, 1))
        tree:add(F.mesh_ack_id, tvb(n - 4, 4))
    end
    return "mesh " .. (GEN.mesh_types[t] or hexstr(t))
end

local function dissect_subprotocol(name, port, tvb, tree, p, pinfo)
    local n = tvb:len()
    if name == "station" and port == 0 and n >= 1 then
        local t = tvb(0, 1):uint()
        local it = tree:add(F.station_type, tvb(0, 1))
        it:append_text(" (" .. (GEN.station_types[t] or "unknown") .. ")")
        -- §5.3: an ack carries its id at offset 4; a connection request ends with the id it wants acked.
        if t == 5 and n == 8 then tree:add(F.station_ack_id, tvb(4, 4)) end
        if t == 1 and n >= 8 then
            -- The connection request's fixed fields, per version (§5.3).
            local k = p.key
            if k <= 5018 and n >= 8 then
                tree:add(F.station_connection_id, tvb(1, 1)); tree:add(F.station_version, tvb(2, 1))
                tree:add(F.station_is_inverse, tvb(3, 1))
                if k >= 5002 and n >= 16 then tree:add(F.station_target_cid, tvb(4, 8)) end
                if k >= 5007 and n >= 21 then
                    tree:add(F.station_target_vid, tvb(12, 4)); tree:add(F.station_inverse_cid, tvb(16, 1))
                end
            elseif k <= 5026 then
                local count = tvb(1, 1):uint()
                local q = 2 + 2 * count
                tree:add(F.station_protocols, tvb(1, 1))
                if n >= q + 19 then
                    tree:add(F.station_connection_id, tvb(q, 1)); tree:add(F.station_is_inverse, tvb(q + 1, 1))
                    tree:add(F.station_target_cid, tvb(q + 2, 8)); tree:add(F.station_target_vid, tvb(q + 10, 4))
                    tree:add(F.station_inverse_cid, tvb(q + 14, 1))
                end
            elseif n >= 20 then
                tree:add(F.station_result, tvb(1, 1)); tree:add(F.station_platform, tvb(2, 1))
                tree:add(F.station_target_cid, tvb(3, 8)); tree:add(F.station_target_vid, tvb(11, 4))
                tree:add(F.station_protocols, tvb(15, 1))
            end
            tree:add(F.station_ack_id, tvb(n - 4, 4))
        end
        return "station " .. (GEN.station_types[t] or tostring(t))
    elseif name == "mesh" and n >= 1 then
        if port == 1 then
            local flags, inner = dissect_segment(tvb, tree, p, pinfo)
            if inner and flags and has(flags, 1) and not has(flags, 16) then
                return dissect_mesh_message(inner, tree) .. " (reliable)"
            end
            return "mesh segment"
        end
        return dissect_mesh_message(tvb, tree)
    elseif name == "keep-alive" then
        local it = tree:add(F.keep_alive, n == 0 and "empty" or string.format("%d bytes", n))
        it:set_generated()
        if n ~= 0 then it:add_proto_expert_info(E.sub, "a keep-alive payload is empty") end
        return "keep-alive"
    elseif name == "rtt" then
        if n ~= 16 then
            tree:add_proto_expert_info(E.sub, string.format("RTT payload of %d bytes (16 expected)", n))
            return "rtt"
        end
        local kind = tvb(0, 4):uint()
        tree:add(F.rtt_kind, tvb(0, 4)); tree:add(F.rtt_reserved, tvb(4, 4)); tree:add(F.rtt_time, tvb(8, 8))
        return (kind == 1) and "rtt response" or "rtt request"
    elseif name == "sync-clock" and n == 16 then
        tree:add(F.clock_a, tvb(0, 8)); tree:add(F.clock_b, tvb(8, 8))
        return "sync clock"
    elseif (name == "reliable" or name == "broadcast-reliable" or name == "reliable-broadcast") and n > 0 then
        dissect_segment(tvb, tree, p, pinfo)
        return name
    elseif name == "lan" and n >= 12 then
        local t = tvb(0, 1):uint()
        local it = tree:add(F.lanmsg_type, tvb(0, 1))
        it:append_text(" (" .. (GEN.lan_message_types[t] or "unknown") .. ")")
        if (t == 3 or t == 4 or t == 5) and n >= 16 then
            tree:add(F.lanmsg_network_id, tvb(12, 4))
        elseif t == 6 and n >= 24 then
            tree:add(F.lanmsg_tag, tvb(12, 4)); tree:add(F.lanmsg_seq, tvb(16, 2))
            tree:add(F.lanmsg_frag, tvb(18, 1)); tree:add(F.lanmsg_frags, tvb(19, 1))
            tree:add(F.lanmsg_fsize, tvb(20, 4))
        end
        return "lan " .. (GEN.lan_message_types[t] or tostring(t))
    end
    return name
end

-- ---------------------------------------------------------------------------------------------------------------
-- Pia packets

local function add_value(tree, tvb, f, rec)
    if rec == nil then return nil end
    if rec.off then
        return tree:add(f, tvb(rec.off, rec.len))
    end
    local it = tree:add(f, rec.v)
    it:set_generated()
    it:append_text(" (inherited)")
    return it
end

-- The version a pianode export comment or the pia.version preference names, and which of them named it; or nil.
local function given_version()
    local comment = export_comment()
    local from_comment = comment and string.match(comment, "^pianode: pia version=([%d%.]+)")
    if from_comment and GEN.versions[from_comment] then
        return from_comment, (string.find(comment, " assumed", 1, true) and "pianode export (detected)" or "pianode export")
    end
    local pref = pia.prefs.version
    if pref and pref ~= "" and pref ~= "auto" and GEN.versions[pref] then
        return pref, "preference"
    end
    return nil
end

-- The layout of a packet whose byte 4 says H-A or H-B (1 or 2) although its length fits neither length rule (a
-- datagram cut or lengthened in transit, a body that does not tile): the first of pianode decode's candidates in
-- its order, every H-A guess and then every H-B guess, that reads cleanly, else H-A
-- (pianode.capture.decode.candidate_profiles).  An encrypted body reads cleanly once the header fits.
local function old_layout(tvb, b4)
    local n = tvb:len()
    if n < tvb:reported_len() then return "H-A" end  -- cut short by the snap length: only its header is shown
    for _, fmt in ipairs({"H-A", "H-B"}) do
        local hsize = GEN.header_sizes[fmt]
        local stop = (fmt == "H-A") and n - 16 or n
        if stop >= hsize then
            for _, name in ipairs(GEN.guesses[fmt]) do
                if b4 == 2 or walk_messages(tvb, hsize, stop, GEN.versions[name]) then return fmt end
            end
        end
    end
    return "H-A"
end

local function choose_version(tvb, fmt, guess_key, readable, body_start, body_stop_for)
    local given, source = given_version()
    -- A version of another layout does not fit this header: pianode decode then reads it as the header says.
    if given and GEN.versions[given].hf == fmt then return given, source end
    local list = GEN.guesses[guess_key] or {}
    if readable then
        for _, name in ipairs(list) do
            local p = GEN.versions[name]
            local start, stop = body_start(p), body_stop_for(p)
            if stop and stop >= start then
                local msgs = walk_messages(tvb, start, stop, p)
                if msgs then return name, "guess" end
            end
        end
    end
    return list[1], "guess"
end

-- H-G packet flags, the low nibble of byte 5 (KW Pia-Protocol.md, "Packet Flags"; spec §1.7).
local PACKET_FLAGS = {[1] = "Zstandard-compressed", [2] = "skip destination variable id check",
                      [4] = "skip network connection check"}

local HEADER_FIELDS = {
    -- layout: list of {field key, size}; "vb" = encryption|version byte, "pf" = padding/flags byte (§1.1)
    ["H-A"] = {{"magic", 4}, {"encryption", 1}, {"connection_id", 1}, {"packet_id", 2}, {"source_timer", 2},
               {"destination_timer", 2}},
    ["H-B"] = {{"magic", 4}, {"encryption", 1}, {"connection_id", 1}, {"packet_id", 2}, {"source_timer", 2},
               {"destination_timer", 2}, {"nonce", 8}, {"tag", 16}},
    ["H-C"] = {{"magic", 4}, {"vb", 1}, {"connection_id", 1}, {"packet_id", 2}, {"nonce", 8}, {"tag", 16}},
    ["H-D"] = {{"magic", 4}, {"vb", 1}, {"connection_id", 1}, {"packet_id", 2}, {"nonce", 8}, {"tag", 8}},
    ["H-E"] = {{"magic", 4}, {"vb", 1}, {"destination_variable_id", 4}, {"source_variable_id", 4}, {"packet_id", 2},
               {"footer_size", 1}, {"nonce", 8}, {"tag", 8}},
    ["H-F"] = {{"magic", 4}, {"vb", 1}, {"destination_variable_id", 2}, {"source_variable_id", 2}, {"packet_id", 2},
               {"footer_size", 1}, {"nonce", 8}, {"tag", 8}},
    ["H-G"] = {{"magic", 4}, {"vb", 1}, {"pf", 1}, {"destination_variable_id", 2}, {"source_variable_id", 2},
               {"packet_id", 2}, {"footer_size", 1}, {"nonce", 8}, {"tag", 8}},
}

-- Whether Wireshark inflated a zlib-flagged payload as pianode decode does (protocols.pia.message.inflate_payload):
-- a zlib stream (RFC 1950 §2.2: method 8, window at most 32 KiB, no preset dictionary, header check), whose Adler-32
-- of the output is the stream's last four bytes (so it is complete and nothing follows it), of at most
-- GEN.max_inflated bytes.  Wireshark also takes raw deflate, and hands back what a cut or damaged stream gave.
local function zlib_complete(payload, inflated)
    local n = payload:len()
    if n < 6 then return false end
    local cmf, flg = payload:range(0, 1):uint(), payload:range(1, 1):uint()
    if cmf % 16 ~= 8 or cmf >= 0x80 or has(flg, 0x20) or (cmf * 256 + flg) % 31 ~= 0 then return false end
    local size = inflated:len()
    if size > GEN.max_inflated then return false end
    local a, b = 1, 0
    if size > 0 then
        local bytes = inflated:range(0, size):bytes()
        for i = 0, size - 1 do
            a = (a + bytes:get_index(i)) % 65521
            b = (b + a) % 65521
        end
    end
    return b * 65536 + a == payload:range(n - 4, 4):uint()
end

local function render_message(tvb, tree, m, index, p, start, pinfo)
    local ptype = m.ptype.v
    local port = m.port.v
    local name = p.protos[ptype]
    local mt = tree:add(pia, tvb(m.start, m.stop - m.start),
        string.format("Message %d: %s (0x%x) port %d, %d bytes", index, name or "unknown protocol", ptype, port,
                      m.payload_len))
    add_value(mt, tvb, F.msg_presence, m.presence)
    local fl = add_value(mt, tvb, F.msg_flags, m.flags)
    local flags = m.flags.v
    local names = {}
    if p.bitmap ~= 0 and has(flags, p.bitmap) then names[#names + 1] = "destination is a bitmap" end
    if has(flags, p.no_bundle) then names[#names + 1] = "no bundle" end
    local zlib = p.zlib ~= 0 and has(flags, p.zlib)
    if zlib then names[#names + 1] = "zlib" end
    if fl and #names > 0 then fl:append_text(" (" .. table.concat(names, ", ") .. ")") end
    add_value(mt, tvb, F.msg_version, m.mversion)
    add_value(mt, tvb, F.msg_station_index, m.station)
    add_value(mt, tvb, F.msg_payload_size, m.size)
    add_value(mt, tvb, F.msg_destination, m.dest)
    add_value(mt, tvb, F.msg_source, m.src)
    local pt = add_value(mt, tvb, F.msg_protocol_type, m.ptype)
    if pt then pt:append_text(" (" .. (name or "unknown") .. ")") end
    local pn = mt:add(F.msg_protocol, name or "unknown")
    pn:set_generated()
    add_value(mt, tvb, F.msg_protocol_port, m.port)
    add_value(mt, tvb, F.msg_reserved, m.reserved)
    add_value(mt, tvb, F.msg_extra, m.extra)
    local payload = (m.payload_len > 0) and tvb(m.payload_off, m.payload_len) or nil
    local app_tvb = payload and payload:tvb() or nil
    if zlib then
        mt:add(F.msg_zlib, true):set_generated()
        if payload then mt:add(F.msg_wire_payload, payload) end
        local inflated = nil
        if payload then
            -- uncompress_zlib from Wireshark 4.4 on, uncompress before (kept there as a deprecated alias).
            for _, method in ipairs({"uncompress_zlib", "uncompress"}) do
                local ok, res = pcall(function() return payload[method](payload, "Inflated Pia payload") end)
                if ok and res then inflated = res; break end
            end
        end
        if inflated and not zlib_complete(payload, inflated) then inflated = nil end
        if inflated then
            app_tvb = inflated
            mt:add(F.msg_length, inflated:len()):set_generated()
            if inflated:len() > 0 then mt:add(F.msg_payload, inflated()) end
        else
            mt:add_proto_expert_info(E.zlib)
            app_tvb = nil
            -- The bytes as sent are all there is, and what pianode decode reports as the payload: length and payload
            -- stay there for every message.
            local it = mt:add(F.msg_length, m.payload_len)
            it:set_generated()
            it:append_text(" (not inflated: the bytes as sent)")
            if payload then mt:add(F.msg_payload, payload) end
        end
    else
        -- pia.msg.length is there for every message; pia.msg.payload only when it has bytes.
        mt:add(F.msg_length, m.payload_len):set_generated()
        if payload then mt:add(F.msg_payload, payload) end
    end
    if m.align then mt:add(F.msg_align, tvb(m.align[1], m.align[2])) end
    local summary = name or string.format("0x%x", ptype)
    if name and (app_tvb or m.payload_len == 0) then
        local sub_tvb = app_tvb or ByteArray.new(""):tvb("empty payload")
        local ok, res = pcall(dissect_subprotocol, name, port, sub_tvb, mt, p, pinfo)
        if ok then summary = res or summary else mt:add_proto_expert_info(E.sub, tostring(res)) end
    end
    return summary
end

local function dissect_pia(tvb, pinfo, tree)
    local fmt, guess_key = sniff_format(tvb)
    local n = tvb:len()
    local cut = n < tvb:reported_len()  -- cut short by the capture's snap length: the header is all there is
    local overrun = udp_overrun(tvb)  -- a UDP length past the IP packet: the header is all that is read
    local b4 = n > 4 and tvb(4, 1):uint() or nil
    if b4 == 1 or b4 == 2 then
        -- A version an export or the preference gives picks H-A or H-B, as pianode decode's --version does.
        local given = given_version()
        local hf = given and GEN.versions[given].hf
        if hf == "H-A" or hf == "H-B" then
            fmt, guess_key = hf, hf
        elseif not fmt then
            fmt = old_layout(tvb, b4)
            guess_key = fmt
        end
    end
    pinfo.cols.protocol = "Pia"
    local root = tree:add(pia, tvb())
    if fmt and n < GEN.header_sizes[fmt] then
        local version, source = choose_version(tvb, fmt, guess_key, false)
        root:append_text(string.format(", %s, Pia %s", fmt, version or "?"))
        root:add(F.format, fmt):set_generated()
        root:add(F.lib_version, version or "?"):set_generated()
        root:add(F.lib_version_source, source):set_generated()
        root:add(F.magic, tvb(0, 4))
        if cut then
            root:add_proto_expert_info(E.cut_short, string.format("the capture kept %d of the packet's %d bytes: less than a %s header",
                n, tvb:reported_len(), fmt))
            pinfo.cols.info = "Pia " .. fmt .. " [cut short]"
        else
            root:add_proto_expert_info(E.malformed, string.format("a Pia %s header needs %d bytes; the packet has %d",
                fmt, GEN.header_sizes[fmt], n))
            pinfo.cols.info = "Pia " .. fmt .. " (malformed: shorter than its header)"
        end
        return n
    end
    if not fmt then
        -- The version an export or the preference gives is still the one the packet was judged by (pianode decode
        -- --version reports it with the same reason).
        local given, source = given_version()
        if given then
            root:append_text(", Pia " .. given)
            root:add(F.lib_version, given):set_generated()
            root:add(F.lib_version_source, source):set_generated()
        end
        root:add(F.magic, tvb(0, 4))
        root:add_proto_expert_info(E.malformed, b4 and string.format("byte 4 = 0x%02x names no documented header", b4)
            or "too short for a Pia header")
        pinfo.cols.info = "Pia (unknown header)"
        return n
    end
    local hsize = GEN.header_sizes[fmt]
    local b4 = tvb(4, 1):uint()
    local encrypted = (fmt == "H-A" or fmt == "H-B") and b4 == 2 or (fmt ~= "H-A" and fmt ~= "H-B" and b4 >= 0x80)
    local comment = export_comment()
    local body_state = comment_value(comment, "body")
    local auth = comment_value(comment, "auth")
    local readable = not cut and ((not encrypted) or body_state == "decrypted")
    local footer_size = 0
    local padding = 0
    if fmt == "H-E" or fmt == "H-F" or fmt == "H-G" then footer_size = tvb(hsize - 17, 1):uint() end
    if fmt == "H-G" then padding = math.floor(tvb(5, 1):uint() / 16) end
    local function body_start(p) return hsize end
    local function body_stop(p)
        if fmt == "H-A" then return n - 16 end
        if fmt == "H-G" then
            if not readable then return n end
            return n - padding - footer_size
        end
        if (fmt == "H-E" or fmt == "H-F") then return n - footer_size end
        return n
    end
    local version, source = choose_version(tvb, fmt, guess_key, readable, body_start, body_stop)
    local p = GEN.versions[version]

    root:append_text(string.format(", %s, Pia %s", fmt, version or "?"))
    local it = root:add(F.format, fmt); it:set_generated()
    it = root:add(F.lib_version, version or "?"); it:set_generated()
    it = root:add(F.lib_version_source, source); it:set_generated()
    if source == "guess" then it:add_proto_expert_info(E.guessed) end
    local pos = 0
    local info = {}
    for _, f in ipairs(HEADER_FIELDS[fmt]) do
        local key, size = f[1], f[2]
        local r = tvb(pos, size)
        if key == "vb" then
            local vb = root:add(F.version_byte, r)
            vb:add(F.encrypted, r, r:uint() >= 0x80)
            vb:add(F.version, r, r:uint() % 128)
        elseif key == "pf" then
            local pf = root:add(F.padding_flags, r)
            pf:add(F.padding_size, r, math.floor(r:uint() / 16))
            local flags = r:uint() % 16
            local fl = pf:add(F.packet_flags, r, flags)
            local named = flag_text(flags, PACKET_FLAGS)
            if named ~= "" then fl:append_text(" (" .. named .. ")") end
            fl:add(F.flag_zstd, r, has(flags, 1))
            fl:add(F.flag_skip_dst, r, has(flags, 2))
            fl:add(F.flag_skip_net, r, has(flags, 4))
        elseif key == "encryption" then
            local e = root:add(F.encryption, r)
            e:add(F.encrypted, r, r:uint() == 2)
        else
            root:add(F[key], r)
        end
        if key == "connection_id" then info[#info + 1] = "conn=" .. r:uint() end
        if key == "source_variable_id" then info[#info + 1] = string.format("var=0x%x", r:uint()) end
        if key == "packet_id" then info[#info + 1] = "id=" .. r:uint() end
        pos = pos + size
    end
    if body_state then root:add(F.body_state, body_state):set_generated() end
    if auth then
        local a = root:add(F.auth, auth)
        a:set_generated()
        if auth == "failed" then a:add_proto_expert_info(E.auth_failed) end
    end
    if cut then
        root:add_proto_expert_info(E.cut_short, string.format("the capture kept %d of the packet's %d bytes (snap length)",
            n, tvb:reported_len()))
        pinfo.cols.info = string.format("Pia %s %s [cut short] %s", version or "?", fmt, table.concat(info, " "))
        return n
    end
    if overrun then
        root:add_proto_expert_info(E.malformed, string.format("UDP length field says %d payload bytes but its IP packet"
            .. " holds %d: a host drops the datagram, so its body is not read", overrun, n))
        pinfo.cols.info = string.format("Pia %s %s [bad UDP length] %s", version or "?", fmt, table.concat(info, " "))
        return n
    end
    local stop = body_stop(p)
    if stop < hsize then
        root:add_proto_expert_info(E.malformed, fmt == "H-A"
            and string.format("a Pia H-A packet of %d bytes has no room for its 16-byte HMAC trailer", n)
            or string.format("footer size %d and padding size %d exceed the packet's %d bytes after its header",
                             footer_size, padding, n - hsize))
        pinfo.cols.info = "Pia " .. fmt .. " (malformed)"
        return n
    end
    local summaries = {}
    -- Packet flag 1 (H-G): the body is a Zstandard frame, not messages (§1.7, §2.8); Wireshark's Lua has no inflater.
    local zstd = fmt == "H-G" and has(tvb(5, 1):uint() % 16, 1)
    if zstd and readable then
        if stop > hsize then root:add(F.zstd_payload, tvb(hsize, stop - hsize)) end
        root:add_proto_expert_info(E.zstd)
    elseif readable and p then
        local msgs, err = walk_messages(tvb, hsize, stop, p)
        if msgs then
            root:add(F.message_count, #msgs):set_generated()
            for i, m in ipairs(msgs) do
                summaries[#summaries + 1] = render_message(tvb, root, m, i - 1, p, hsize, pinfo)
            end
            if msgs.ff then root:add(F.ff_padding, tvb(msgs.ff[1], msgs.ff[2])) end
        else
            root:add(F.body, tvb(hsize, stop - hsize)):set_text("Body (not readable as " .. p.mf .. ")")
            root:add_proto_expert_info(E.malformed, err)
        end
    else
        if stop > hsize then root:add(F.body, tvb(hsize, stop - hsize)) end
        root:add_proto_expert_info(E.encrypted)
    end
    -- The footer: after the ciphertext (H-E, H-F), or inside the plaintext (H-G) when it is readable (§1.6).
    if footer_size > 0 then
        local fstart = nil
        if fmt == "H-E" or fmt == "H-F" then fstart = n - footer_size end
        if fmt == "H-G" and readable then fstart = n - padding - footer_size end
        if fstart and fstart >= hsize then
            local ft = root:add(F.footer, tvb(fstart, footer_size))
            for i = fstart, fstart + footer_size - 2, 2 do ft:add(F.footer_vid, tvb(i, 2)) end
            if footer_size % 2 == 1 then ft:add_proto_expert_info(E.malformed, "footer is not a list of u16 variable ids") end
        end
    end
    if fmt == "H-G" and readable and padding > 0 then root:add(F.ff_padding, tvb(n - padding, padding)) end
    if fmt == "H-A" then root:add(F.hmac, tvb(n - 16, 16)) end
    local state = encrypted and (readable and "decrypted" or "encrypted") or "plain"
    if zstd then info[#info + 1] = "[Zstandard-compressed]" end
    local text = string.format("Pia %s %s %s %s", version or "?", fmt, state, table.concat(info, " "))
    if #summaries > 0 then text = text .. ": " .. table.concat(summaries, ", ") end
    pinfo.cols.info = text
    return n
end

-- ---------------------------------------------------------------------------------------------------------------
-- LAN browse request and reply (§6.2-§6.4): raw UDP, not Pia packets

local function lan_kind(tvb)
    local n = tvb:len()
    if n < 5 then return nil end
    local b0 = tvb(0, 1):uint()
    if b0 ~= 0 and b0 ~= 1 then return nil end
    local size = tvb(1, 4):uint()
    local rest = n - 5 - size
    if b0 == 0 and LAN_SEARCH_SIZES[size] and LAN_REQUEST_TAILS[rest] then return "request", size end
    if b0 == 1 and size >= 0x100 and LAN_REPLY_TAILS[rest] then return "reply", size end
    return nil
end

-- A boolean byte of a LAN browse packet, flagged as pianode decode words it when it is neither 0 nor 1.
local function lan_bool(tree, f, range, what)
    local it = tree:add(f, range)
    if range:uint() > 1 then it:add_proto_expert_info(E.lan, string.format("%s: boolean byte %d", what, range:uint())) end
    return it
end

-- A zero-padded field's used size (a u32 after it), flagged when it passes the field (lan.py _read_padded).
local function lan_used_size(tree, range, field_size, what)
    local size = range:uint()
    if size > field_size then
        tree:add_proto_expert_info(E.lan, string.format("%s: size %d exceeds its %d-byte field", what, size, field_size))
    end
    return math.min(size, field_size)
end

local function dissect_session_info(tvb, tree, version)
    -- LanSessionInfo, 5.2-5.45 (1266, 1297 or 1298 bytes), or LanNetworkProperty (6.x, 0x22D bytes, §6.3).
    local n = tvb:len()
    if n >= 0x22D and n < 1266 then
        local st = tree:add(pia, tvb(), "LanNetworkProperty")
        st:add(F.lan_network_id64, tvb(0, 8))
        local psize = lan_used_size(st, tvb(0x208, 4), 0x200, "property data")
        if psize >= 0x7C then
            st:add(F.lan_sys_version, tvb(0x8 + 2, 1))
            st:add(F.lan_key_param, tvb(0x8 + 0x5C, 32))
            if psize > 0x7C then st:add(F.lan_app_data, tvb(0x8 + 0x7C, psize - 0x7C)) end
        end
        st:add(F.lan_matchmake_key, tvb(0x20C, 8))
        st:add(F.lan_current, tvb(0x214, 2)); st:add(F.lan_max, tvb(0x216, 2))
        lan_bool(st, F.lan_opened, tvb(0x218, 1), "opened")
        lan_bool(st, F.lan_player_limit, tvb(0x219, 1), "has player limit")
        st:add(F.lan_players, tvb(0x21A, 1))
        st:add(F.lan_host, tvb(0x21B, math.min(0x12, n - 0x21B)))
        return string.format("network id 0x%s", tostring(tvb(0, 8):uint64():tohex()))
    end
    if n < 0x1D1 + 16 * 50 then
        tree:add_proto_expert_info(E.lan, string.format("session info of %d bytes is too short", n))
        return nil
    end
    local st = tree:add(pia, tvb(), "LanSessionInfo")
    st:add(F.lan_game_mode, tvb(0, 4)); st:add(F.lan_network_id, tvb(4, 4))
    for i = 0, 5 do st:add(F.lan_attribute, tvb(8 + 4 * i, 4)) end
    st:add(F.lan_current, tvb(0x20, 2)); st:add(F.lan_min, tvb(0x22, 2)); st:add(F.lan_max, tvb(0x24, 2))
    local vk = version_key(version)
    if vk and vk <= 5002 then
        st:add(F.lan_session_type, tvb(0x26, 4))  -- up to 5.2: a u32 session type
    else
        st:add(F.lan_sys_version, tvb(0x26, 1)); st:add(F.lan_app_version, tvb(0x27, 1))
        st:add(F.lan_session_type, tvb(0x28, 2))
    end
    local app_size = lan_used_size(st, tvb(0x1AA, 4), 384, "application data")
    st:add(F.lan_app_data, tvb(0x2A, app_size))
    lan_bool(st, F.lan_opened, tvb(0x1AE, 1), "is opened")
    local stations
    if n == 1297 then
        st:add(F.lan_host, tvb(0x1AF, 18))
        st:add(F.lan_host_cid, tvb(0x1C1, 8))
        stations = 0x1D1
    else
        st:add(F.lan_host, tvb(0x1AF, 35))
        stations = 0x1D2
    end
    for i = 0, 15 do
        local off = stations + 50 * i
        local role = tvb(off, 1):uint()
        if role ~= 0 then
            local s = st:add(pia, tvb(off, 50), "Station " .. i)
            s:add(F.lan_station_role, tvb(off, 1))
            s:add(F.lan_station_name, tvb(off + 2, 40))
            s:add(F.lan_station_cid, tvb(off + 42, 8))
        end
    end
    if n >= stations + 800 + 32 then st:add(F.lan_key_param, tvb(stations + 800, 32)) end
    return string.format("network id 0x%08x, %d/%d participants", tvb(4, 4):uint(), tvb(0x20, 2):uint(),
                         tvb(0x24, 2):uint())
end

-- The search block of a browse request (§6.2): LanSessionSearchCriteria (5.2-5.45, 570 bytes) or
-- LanSearchNetworkSetting (6.16-6.20: 14 bytes, 6.23-6.30: 22 with the title id); 7.2's encrypted 32 bytes stay a
-- block.  A boolean byte other than 0 or 1 is malformed, as pianode decode says (protocols.pia.lan_criteria).
local function dissect_search(tvb, item)
    local n = tvb:len()
    local function flag(f, at, what)
        local it = item:add(f, tvb(at, 1))
        local v = tvb(at, 1):uint()
        if v > 1 then it:add_proto_expert_info(E.lan, string.format("%s: boolean byte %d", what, v)) end
    end
    if n == 0x23A then
        item:add(F.lan_s_min_max, tvb(0, 2)); item:add(F.lan_s_min_min, tvb(2, 2))
        item:add(F.lan_s_max_max, tvb(4, 2)); item:add(F.lan_s_max_min, tvb(6, 2))
        flag(F.lan_s_opened, 8, "opened only"); flag(F.lan_s_vacant, 9, "vacant only")
        item:add(F.lan_s_offset, tvb(10, 4)); item:add(F.lan_s_size, tvb(14, 4))
        item:add(F.lan_s_game_mode, tvb(18, 4)); item:add(F.lan_s_session_type, tvb(22, 4))
        -- Six attribute criteria, field by field: 20 u32 list values each, then the list sizes, range minimums,
        -- range maximums and range modes of all six.
        for i = 0, 5 do
            local a = item:add(pia, tvb(26 + 80 * i, 80), "Attribute " .. i)
            a:add(F.lan_s_attr_values, tvb(26 + 80 * i, 80))
        end
        for i = 0, 5 do item:add(F.lan_s_attr_size, tvb(506 + i, 1)) end
        for i = 0, 5 do item:add(F.lan_s_attr_min, tvb(512 + 4 * i, 4)) end
        for i = 0, 5 do item:add(F.lan_s_attr_max, tvb(536 + 4 * i, 4)) end
        for i = 0, 5 do flag(F.lan_s_attr_mode, 560 + i, "attribute range mode") end
        item:add(F.lan_s_flags, tvb(566, 4))
    elseif n == 0x0E or n == 0x16 then
        item:add(F.lan_s_key, tvb(0, 8)); item:add(F.lan_s_upper, tvb(8, 2)); item:add(F.lan_s_lower, tvb(10, 2))
        item:add(F.lan_s_flags, tvb(12, 2))
        if n == 0x16 then item:add(F.lan_s_title, tvb(14, 8)) end
    end
end

local function dissect_lan(tvb, pinfo, tree, kind, size)
    pinfo.cols.protocol = "Pia LAN"
    local root = tree:add(pia, tvb(), "Pia LAN browse " .. kind)
    root:add(F.lan_type, tvb(0, 1))
    root:add(F.lan_size, tvb(1, 4))
    local block = tvb(5, size)
    local block_item = root:add(F.lan_block, block)
    local text = "LAN browse " .. kind
    if kind == "request" then dissect_search(block:tvb(), block_item) end
    if kind == "reply" then
        local version = comment_value(export_comment(), "version") or pia.prefs.version
        local ok, res = pcall(dissect_session_info, block:tvb(), root, version)
        if ok and res then text = text .. ", " .. res end
        if not ok then root:add_proto_expert_info(E.lan, tostring(res)) end
    end
    local rest = tvb:len() - 5 - size
    if rest > 0 then
        -- The crypto challenge (§6.4): version, enabled, [sequence id: version 4], u64 nonce counter, 16-byte key,
        -- 16-byte tag, then the encrypted challenge (request) or response (reply); lan_kind checked its size.
        local at = 5 + size
        local c = root:add(F.lan_challenge, tvb(at, rest))
        local version = tvb(at, 1):uint()
        c:add(F.lan_chal_version, tvb(at, 1))
        if version < 1 or version > 4 then
            c:add_proto_expert_info(E.lan, string.format("challenge version %d has no documented layout", version))
        else
            lan_bool(c, F.lan_chal_enabled, tvb(at + 1, 1), "crypto enabled")
            local pos = at + 2
            if version == 4 then c:add(F.lan_chal_seq, tvb(pos, 1)); pos = pos + 1 end
            c:add(F.lan_chal_counter, tvb(pos, 8))
            c:add(F.lan_chal_key, tvb(pos + 8, 16))
            c:add(F.lan_chal_tag, tvb(pos + 24, 16))
            c:add(F.lan_chal_data, tvb(pos + 40, tvb:len() - pos - 40))
        end
    end
    local comment = export_comment()
    local chal = comment_value(comment, "challenge")
    if chal then root:add(F.auth, chal):set_generated() end
    pinfo.cols.info = text
    return tvb:len()
end

-- ---------------------------------------------------------------------------------------------------------------
-- pianode's simulated LDN discovery channel (UDP 30400; in recordings Ethernet frames of EtherType 0x88B5):
-- "PNLD" · u8 version · u8 kind · body

local function dissect_ldn(tvb, pinfo, tree)
    pinfo.cols.protocol = "Pia LDN"
    local n = tvb:len()
    local root = tree:add(pia, tvb(), "LDN discovery (pianode simulation)")
    root:add(F.ldn_magic, tvb(0, 4)); root:add(F.ldn_channel, tvb(4, 1)); root:add(F.ldn_kind, tvb(5, 1))
    local kind = tvb(5, 1):uint()
    local names = {[1] = "advertisement", [2] = "connect", [3] = "reply", [4] = "leave"}
    pinfo.cols.info = "LDN " .. (names[kind] or "unknown")
    if kind == 1 and n >= 10 + 64 then
        root:add(F.ldn_pia_port, tvb(6, 2)); root:add(F.ldn_control_port, tvb(8, 2))
        local a = 10
        root:add(F.ldn_local_id, tvb(a, 8)); root:add(F.ldn_game_mode, tvb(a + 10, 2))
        root:add(F.ldn_ssid, tvb(a + 16, 16)); root:add(F.ldn_version, tvb(a + 32, 1))
        root:add(F.ldn_encryption, tvb(a + 33, 1))
        local d = a + 72  -- advertisement data after size, nonce and SHA-256
        if n >= d + 24 + 8 * 56 + 4 + 384 then
            local count = tvb(d + 23, 1):uint()
            root:add(F.ldn_participants, tvb(d + 23, 1))
            for i = 0, math.min(count, 8) - 1 do
                local off = d + 24 + 56 * i
                local pt = root:add(pia, tvb(off, 56), "Participant " .. i)
                pt:add(F.ldn_participant_ip, tvb(off, 4)); pt:add(F.ldn_participant_mac, tvb(off + 4, 6))
            end
            local app = d + 24 + 8 * 56 + 2
            local app_size = tvb(app, 2):uint()
            root:add(F.ldn_app_data, tvb(app + 2, math.min(app_size, 384)))
        end
    elseif n > 6 then
        root:add(F.ldn_rest, tvb(6))
    end
    return n
end

-- ---------------------------------------------------------------------------------------------------------------
-- PRUDP (prudp.md §1-§3)

local function u16le(tvb, off) return tvb(off, 2):le_uint() end

-- 1-byte checksum (prudp.md §2.4): full LE words summed mod 2^32, then the key byte sum, leftover bytes and the
-- four bytes of that sum, mod 256.  4-byte form: zero-padded words plus the key sum, mod 2^32.
local function v0_checksum(tvb, stop, key_sum, width)
    local words = math.floor(stop / 4)
    local total = 0
    for i = 0, words - 1 do total = (total + tvb(4 * i, 4):le_uint()) % 4294967296 end
    if width == 4 then
        local rest = stop - 4 * words
        if rest > 0 then
            local w = 0
            for j = rest - 1, 0, -1 do w = w * 256 + tvb(4 * words + j, 1):uint() end
            total = (total + w) % 4294967296
        end
        return (total + key_sum) % 4294967296
    end
    local c = key_sum
    for i = 4 * words, stop - 1 do c = c + tvb(i, 1):uint() end
    local t = total
    for _ = 1, 4 do c = c + t % 256; t = math.floor(t / 256) end
    return c % 256
end

local function key_sum()
    local key = prudp.prefs.access_key or ""
    local s = 0
    for i = 1, #key do s = s + key:byte(i) end
    return s % 256
end

-- One v0 packet at pos under variant v: a record, or nil and why.
local function parse_v0(tvb, pos, v)
    local n = tvb:len()
    local fb = v.flags_bytes
    local fixed = 2 + fb + 1 + 4 + 2
    if pos + fixed + v.checksum_bytes > n then return nil, "shorter than a v0 header" end
    local r = {pos = pos, variant = v}
    local tf = (fb == 2) and u16le(tvb, pos + 2) or tvb(pos + 2, 1):uint()
    local type_bits = (fb == 2) and 16 or 8
    r.type = tf % type_bits
    r.flags = math.floor(tf / type_bits)
    if fb == 1 then
        -- 1-byte form: flag bits 0x08 ACK, 0x10 RELIABLE, 0x20 NEED_ACK, 0x40 HAS_SIZE (prudp.md §3.1)
        r.flags = math.floor(tf / 8)
    end
    r.tf_len = fb
    local p = pos + 2 + fb
    r.session = p; p = p + 1
    r.signature = p; p = p + 4
    r.seq = p; p = p + 2
    if r.type == 0 or r.type == 1 then
        if p + v.connection_signature_bytes > n then return nil, "connection signature runs past the datagram" end
        r.conn_sig = {p, v.connection_signature_bytes}; p = p + v.connection_signature_bytes
    end
    if r.type == 2 then
        if p + v.fragment_id_bytes > n then return nil, "fragment id runs past the datagram" end
        r.frag = {p, v.fragment_id_bytes}; p = p + v.fragment_id_bytes
    end
    local size
    if has(r.flags, 8) then
        if p + 2 > n then return nil, "payload size runs past the datagram" end
        r.size_at = p
        size = u16le(tvb, p); p = p + 2
    else
        size = n - p - v.checksum_bytes
        if size < 0 then return nil, "no room for the checksum" end
    end
    if p + size + v.checksum_bytes > n then return nil, "payload runs past the datagram" end
    r.payload = {p, size}
    p = p + size
    r.checksum = {p, v.checksum_bytes}
    r.stop = p + v.checksum_bytes
    return r
end

local function parse_v0_all(tvb, v)
    local out = {}
    local pos = 0
    local n = tvb:len()
    while pos < n do
        local r, err = parse_v0(tvb, pos, v)
        if not r then return nil, err end
        if r.type > 7 then return nil, "type out of range" end
        out[#out + 1] = r
        pos = r.stop
    end
    return out
end

-- Whether every packet's checksum verifies with the access key preference (or without a key, on a stream type
-- the variant sums without one): false when nothing can be judged.
local function v0_all_verify(tvb, packets, v)
    local key = prudp.prefs.access_key or ""
    local keyless = set_of(v.keyless_stream_types)
    for _, r in ipairs(packets) do
        local free = keyless[math.floor(tvb(r.pos, 1):uint() / 16)]
        if key == "" and not free then return false end
        local ks = free and 0 or key_sum()
        local want = v0_checksum(tvb(r.pos, r.checksum[1] - r.pos):tvb(), r.checksum[1] - r.pos, ks, r.checksum[2])
        if want ~= tvb(r.checksum[1], r.checksum[2]):le_uint() then return false end
    end
    return true
end

local function with_fields(v, changes)
    local out = {}
    for k, x in pairs(v) do out[k] = x end
    for k, x in pairs(changes) do out[k] = x end
    return out
end

-- The packets of a v0 datagram as pianode decode reads them (protocols/prudp/codec.py): the variant's own framing,
-- unless it does not frame the datagram or its checksums do not verify while the 4-byte checksum's do (titles of
-- the Rendez-Vous era, and the reference client's checksum_version 0, prudp.md §2.4; with the 1-byte type/flags
-- form too where the variant has the 2-byte one, §1.3).  Of two readings that verify, the one using only known flag
-- bits; with nothing verifying, the variant's framing, else (not for the heuristic, which has only its guess of the
-- variant: unverified, the looser framing would claim more datagrams that are no PRUDP) the first alternative
-- that frames.
local KNOWN_FLAGS = {[1] = true, [2] = true, [4] = true, [8] = true, [0x200] = true}
local function only_known_flags(packets)
    for _, r in ipairs(packets) do
        local f, bit = r.flags, 1
        while f > 0 do
            if f % 2 == 1 and not KNOWN_FLAGS[bit] then return false end
            f, bit = math.floor(f / 2), bit * 2
        end
    end
    return true
end

local function parse_v0_any(tvb, v, guessed)
    local packets, err = parse_v0_all(tvb, v)
    if v.checksum_bytes ~= 1 or (packets and v0_all_verify(tvb, packets, v)) then return packets, err end
    local alternatives = {with_fields(v, {checksum_bytes = 4})}
    if v.flags_bytes == 2 then alternatives[2] = with_fields(v, {checksum_bytes = 4, flags_bytes = 1}) end
    local framed, verified = nil, {}
    for _, alt in ipairs(alternatives) do
        local got = parse_v0_all(tvb, alt)
        if got then
            if v0_all_verify(tvb, got, alt) then verified[#verified + 1] = got end
            framed = framed or got
        end
    end
    for _, got in ipairs(verified) do
        if only_known_flags(got) then return got end
    end
    if verified[1] then return verified[1] end
    if packets then return packets end
    if framed and not guessed then return framed end
    return nil, err
end

local function plausible_vport(b)
    local st = math.floor(b / 16)
    return GEN.prudp_stream_types[st] ~= nil
end

-- v0 has no magic, so the heuristic takes only the virtual ports every source shows (prudp.md §1.1): one known
-- stream type on both sides (a server drops packets whose source and destination stream types differ), and a
-- server's port, 1 or 2, on one side (3DS/Wii U 1; Switch 1 and 2; a client the highest free port, from 15 down).
-- Looser, about half of all UDP datagrams of eleven bytes or more read as v0.
local function plausible_v0_ports(src, dst)
    if not plausible_vport(src) or math.floor(src / 16) ~= math.floor(dst / 16) then return false end
    local sp, dp = src % 16, dst % 16
    return sp == 1 or sp == 2 or dp == 1 or dp == 2
end

-- The v0 variant to read this datagram with: the export comment, the preference, or the stream types.
local function v0_variant(tvb)
    local comment = export_comment()
    local named = comment and string.match(comment, "^pianode: prudp variant=([%w%-]+)")
    if named and GEN.prudp_variants[named] then return named end
    local pref = V0_VARIANT_NAMES[prudp.prefs.v0_variant] or "auto"
    if pref ~= "auto" then return pref end
    -- NEX uses stream type 10 (RVSecure) and up; Quazal titles use the low stream types (prudp.md §1.1).
    if math.floor(tvb(0, 1):uint() / 16) >= 8 then return "nintendo-v0" end
    return "quazal-v0"
end

local function add_flags(tree, tvb, r, range, flags)
    local fl = tree:add(F.p_flags, range, flags)
    fl:append_text(" (" .. flag_text(flags, GEN.prudp_flags) .. ")")
    fl:add(F.p_flag_ack, range, has(flags, 1))
    fl:add(F.p_flag_reliable, range, has(flags, 2))
    fl:add(F.p_flag_need_ack, range, has(flags, 4))
    fl:add(F.p_flag_has_size, range, has(flags, 8))
    fl:add(F.p_flag_multi_ack, range, has(flags, 0x200))
end

local function add_vports(tree, tvb, src_off, dst_off)
    local s = tree:add(F.p_src, tvb(src_off, 1))
    s:add(F.p_src_type, tvb(src_off, 1), math.floor(tvb(src_off, 1):uint() / 16))
    s:add(F.p_src_port, tvb(src_off, 1), tvb(src_off, 1):uint() % 16)
    local d = tree:add(F.p_dst, tvb(dst_off, 1))
    d:add(F.p_dst_type, tvb(dst_off, 1), math.floor(tvb(dst_off, 1):uint() / 16))
    d:add(F.p_dst_port, tvb(dst_off, 1), tvb(dst_off, 1):uint() % 16)
end

local function type_name(t) return GEN.prudp_types[t] or tostring(t) end

local function dissect_v0(tvb, pinfo, tree, name, packets)
    local v = GEN.prudp_variants[name]
    local texts = {}
    for _, r in ipairs(packets) do
        local pt = tree:add(prudp, tvb(r.pos, r.stop - r.pos))
        pt:append_text(string.format(" v0 (%s), %s", name, type_name(r.type)))
        pt:add(F.p_version, "v0"):set_generated()
        pt:add(F.p_variant, name):set_generated()
        add_vports(pt, tvb, r.pos, r.pos + 1)
        local tfr = tvb(r.pos + 2, r.tf_len)
        local tf = pt:add(F.p_type_flags, tfr, (r.tf_len == 2) and tfr:le_uint() or tfr:uint())
        tf:add(F.p_type, tfr, r.type)
        add_flags(tf, tvb, r, tfr, r.flags)
        pt:add(F.p_session_id, tvb(r.session, 1))
        pt:add(F.p_signature, tvb(r.signature, 4))
        pt:add_le(F.p_sequence_id, tvb(r.seq, 2))
        if r.conn_sig then pt:add(F.p_connection_signature, tvb(r.conn_sig[1], r.conn_sig[2])) end
        if r.frag then pt:add_le(F.p_fragment_id, tvb(r.frag[1], r.frag[2])) end
        if r.size_at then pt:add_le(F.p_payload_size, tvb(r.size_at, 2)) end
        if r.payload[2] > 0 then pt:add(F.p_payload, tvb(r.payload[1], r.payload[2])) end
        if r.checksum[2] > 0 then
            local cr = tvb(r.checksum[1], r.checksum[2])
            local ck = pt:add_le(F.p_checksum, cr)
            local comment = export_comment()
            local verdict = comment_value(comment, "checksum")
            -- Checked here when the access key is given, or when the stream type's checksum uses none (GRO: DO, NAT).
            local key = prudp.prefs.access_key or ""
            local st = math.floor(tvb(r.pos, 1):uint() / 16)
            local keyless = v and set_of(v.keyless_stream_types)[st]
            if key ~= "" or keyless then
                local ks = keyless and 0 or key_sum()
                local want = v0_checksum(tvb(r.pos, r.checksum[1] - r.pos):tvb(), r.checksum[1] - r.pos, ks,
                                         r.checksum[2])
                verdict = (want == cr:le_uint()) and "ok" or "failed"
            end
            if verdict then
                ck:add(F.p_checksum_status, verdict):set_generated()
                if verdict == "failed" then ck:add_proto_expert_info(PE.bad_checksum) end
            end
        end
        texts[#texts + 1] = string.format("%s %s seq=%d", type_name(r.type), flag_text(r.flags, GEN.prudp_flags),
                                          tvb(r.seq, 2):le_uint())
    end
    pinfo.cols.protocol = "PRUDP"
    pinfo.cols.info = string.format("PRUDP v0 %02x→%02x ", tvb(0, 1):uint(), tvb(1, 1):uint()) .. table.concat(texts, "; ")
    return tvb:len()
end

local function dissect_options(tree, tvb, start, len)
    local pos = start
    local stop = start + len
    while pos + 2 <= stop do
        local id, size = tvb(pos, 1):uint(), tvb(pos + 1, 1):uint()
        if pos + 2 + size > stop then
            tree:add_proto_expert_info(PE.malformed, "option runs past the options block")
            return
        end
        local ot = tree:add(F.p_option, tvb(pos, 2 + size))
        ot:add(F.p_option_id, tvb(pos, 1)); ot:add(F.p_option_size, tvb(pos + 1, 1))
        if size > 0 then ot:add(F.p_option_value, tvb(pos + 2, size)) end
        -- Option values (prudp.md §2.3): all little-endian.
        local v = (size > 0) and tvb(pos + 2, size) or nil
        if id == 0 and size == 4 then
            ot:add_le(F.p_supported_functions, v)
            tree:add(F.p_minor_version, tvb(pos + 2, 1))
        elseif id == 1 and size == 16 then
            tree:add(F.p_connection_signature, v)
        elseif id == 2 and size == 1 then
            tree:add(F.p_fragment_id, v)
        elseif id == 3 and size == 2 then
            tree:add_le(F.p_initial_unreliable, v)
        elseif id == 4 and size == 1 then
            tree:add(F.p_max_substream, v)
        elseif id == 0x80 and size == 16 then
            tree:add(F.p_lite_signature, v)
        end
        pos = pos + 2 + size
    end
    if pos ~= stop then tree:add_proto_expert_info(PE.malformed, "trailing bytes in the options block") end
end

-- v1 (magic EA D0 01, prudp.md §2.3) and Lite (magic 80, §2.11): several packets may share a datagram.
local function parse_v1_lite(tvb)
    local n = tvb:len()
    local out = {}
    local pos = 0
    while pos < n do
        local b0 = tvb(pos, 1):uint()
        if b0 == 0xEA and pos + 30 <= n and tvb(pos + 1, 1):uint() == 0xD0 then
            local optlen = tvb(pos + 3, 1):uint()
            local size = u16le(tvb, pos + 4)
            local stop = pos + 30 + optlen + size
            if stop > n then return nil end
            out[#out + 1] = {kind = "v1", pos = pos, optlen = optlen, size = size, stop = stop}
            pos = stop
        elseif b0 == 0x80 and pos + 12 <= n then
            local optlen = tvb(pos + 1, 1):uint()
            local size = u16le(tvb, pos + 2)
            local stop = pos + 12 + optlen + size
            if stop > n then return nil end
            out[#out + 1] = {kind = "lite", pos = pos, optlen = optlen, size = size, stop = stop}
            pos = stop
        else
            return nil
        end
    end
    return out
end

local function dissect_v1_lite(tvb, pinfo, tree, packets)
    local texts = {}
    for _, r in ipairs(packets) do
        local p = r.pos
        local pt = tree:add(prudp, tvb(p, r.stop - p))
        local tf, seq
        if r.kind == "v1" then
            pt:append_text(" v1")
            pt:add(F.p_version, "v1"):set_generated()
            pt:add(F.p_magic, tvb(p, 2)); pt:add(F.p_prudp_version, tvb(p + 2, 1))
            pt:add(F.p_options_length, tvb(p + 3, 1)); pt:add_le(F.p_payload_size, tvb(p + 4, 2))
            add_vports(pt, tvb, p + 6, p + 7)
            tf = tvb(p + 8, 2)
            pt:add(F.p_session_id, tvb(p + 10, 1)); pt:add(F.p_substream_id, tvb(p + 11, 1))
            seq = tvb(p + 12, 2)
            local sig = pt:add(F.p_signature, tvb(p + 14, 16))
            -- Lua has no MD5 here: the verdict is the export's, where pianode decode could judge it (a SYN's).
            local verdict = comment_value(export_comment(), "signature")
            if verdict == "ok" or verdict == "failed" then sig:add(F.p_signature_status, verdict):set_generated() end
            dissect_options(pt, tvb, p + 30, r.optlen)
        else
            pt:append_text(" Lite")
            pt:add(F.p_version, "lite"):set_generated()
            pt:add(F.p_magic, tvb(p, 1)); pt:add(F.p_options_length, tvb(p + 1, 1))
            pt:add_le(F.p_payload_size, tvb(p + 2, 2))
            local types = tvb(p + 4, 1)
            local ty = pt:add(F.p_stream_types, types)
            ty:add(F.p_src_type, types, math.floor(types:uint() / 16))
            ty:add(F.p_dst_type, types, types:uint() % 16)
            pt:add(F.p_src_port, tvb(p + 5, 1)); pt:add(F.p_dst_port, tvb(p + 6, 1))
            pt:add(F.p_fragment_id, tvb(p + 7, 1))
            tf = tvb(p + 8, 2)
            seq = tvb(p + 10, 2)
            dissect_options(pt, tvb, p + 12, r.optlen)
        end
        local v = tf:le_uint()
        local ty, flags = v % 16, math.floor(v / 16)
        local t = pt:add(F.p_type_flags, tf, v)
        t:add(F.p_type, tf, ty)
        add_flags(t, tvb, r, tf, flags)
        pt:add_le(F.p_sequence_id, seq)
        local body = r.stop - r.size
        if r.size > 0 then pt:add(F.p_payload, tvb(body, r.size)) end
        pt:append_text(", " .. type_name(ty))
        texts[#texts + 1] = string.format("%s %s seq=%d", type_name(ty), flag_text(flags, GEN.prudp_flags), seq:le_uint())
    end
    pinfo.cols.protocol = "PRUDP"
    pinfo.cols.info = "PRUDP " .. packets[1].kind .. " " .. table.concat(texts, "; ")
    return tvb:len()
end

-- ---------------------------------------------------------------------------------------------------------------
-- Entry points: one heuristic on all of UDP, and the same function on the usual ports

local function classify(tvb)
    local n = tvb:len()
    if n >= 4 and tvb(0, 4):bytes() == MAGIC then return "pia" end
    if n >= 6 and tvb(0, 4):string() == GEN.ldn_magic then return "ldn" end
    local comment = export_comment()
    if comment and comment:sub(1, 15) == "pianode: prudp " then return "prudp" end
    local kind, size = lan_kind(tvb)
    if kind then return "lan", kind, size end
    local b0 = tvb(0, 1):uint()
    if b0 == 0xEA or b0 == 0x80 then
        local packets = parse_v1_lite(tvb)
        if packets then return "v1lite", packets end
    end
    -- A datagram the snap length cut short is not framed: the end of a v0 packet without HAS_SIZE is its
    -- datagram's (prudp.md §2.1), so the bytes last captured would be taken for its checksum.
    if prudp.prefs.heuristic_v0 and n >= 11 and n == tvb:reported_len() and not export_says_cut()
        and plausible_v0_ports(tvb(0, 1):uint(), tvb(1, 1):uint()) then
        local name = v0_variant(tvb)
        local packets = parse_v0_any(tvb, GEN.prudp_variants[name], true)
        if packets then return "v0", name, packets end
    end
    return nil
end

local function dissect_any(tvb, pinfo, tree)
    if tvb:len() == 0 then return 0 end
    local what, a, b = classify(tvb)
    if what == "pia" then return dissect_pia(tvb, pinfo, tree) end
    if what == "ldn" then return dissect_ldn(tvb, pinfo, tree) end
    if what == "lan" then return dissect_lan(tvb, pinfo, tree, a, b) end
    if what == "v1lite" then return dissect_v1_lite(tvb, pinfo, tree, a) end
    if what == "v0" then return dissect_v0(tvb, pinfo, tree, a, b) end
    if what == "prudp" then
        -- The export names the variant: read with it even when the stream types look unusual.
        local name = v0_variant(tvb)
        local v = GEN.prudp_variants[name]
        -- A NEX server takes v0 and v1 on one socket and tells them apart by "EA D0 01" (prudp.md §2.3): pianode
        -- decode's v0 variants read such a datagram as v1 (no v0 packet starts so: stream type 14 does not exist).
        local v1_magic = tvb:len() >= 3 and tvb(0, 2):uint() == 0xEAD0 and tvb(2, 1):uint() == 1
        if v and (v.framing == "v1" or (v.flags_bytes == 2 and v1_magic)) then
            local packets = parse_v1_lite(tvb)
            if packets then return dissect_v1_lite(tvb, pinfo, tree, packets) end
        elseif v then
            local packets, err = parse_v0_any(tvb, v)
            if packets then return dissect_v0(tvb, pinfo, tree, name, packets) end
            local t = tree:add(prudp, tvb())
            t:add_proto_expert_info(PE.malformed, err)
            pinfo.cols.protocol = "PRUDP"
            return tvb:len()
        end
    end
    return 0
end

function pia.dissector(tvb, pinfo, tree)
    return dissect_any(tvb, pinfo, tree)
end

local function heuristic(tvb, pinfo, tree)
    return dissect_any(tvb, pinfo, tree) > 0
end

pia:register_heuristic("udp", heuristic)

local udp_port = DissectorTable.get("udp.port")
-- LAN browse (30000 up to 5.45, 35000 from 6.x), LDN discovery (pianode), Pia data sockets 49152-49155 (§6.1).
for _, port in ipairs({30000, 35000, GEN.ldn_port, 49152, 49153, 49154, 49155}) do
    udp_port:add(port, pia)
end
-- pianode's recordings carry the simulated LDN link's frames below IP, as Ethernet frames of 0x88B5, the first of
-- IEEE 802's two "local experimental" EtherTypes (pianode/capture/frames.py): a console sends them as 802.11 frames.
DissectorTable.get("ethertype"):add(0x88B5, pia)
