"""Eight stations in two places at 60 Hz, through a relay hub and over direct UDP, in the same run.

    sudo .venv/bin/python scripts/netns/relay_frames.py [--duration 10] [--rounds 2]

Builds a hub namespace and two site namespaces (``relay_sites.py``), with the
hub namespace forwarding IPv4 this time so that the sites also have a direct
UDP path over the same two veth hops.  Each round runs the same workload twice,
relay first, then direct: four Pia 5.18 stations per site (one process per
site, the host in site A), each broadcasting an unreliable 64-byte frame 60
times a second that carries its send time.  Every receiver reads the one-way
delay off ``time.monotonic()``, which all namespaces of one machine share.
Prints one JSON object: per mode the frames expected and received, the share
within 50 ms, the delay percentiles, and the relay's added latency per hop
(the difference of the medians over the two hops).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
KEY = bytes(range(16)).hex()
FRAME = struct.Struct("!dI")
PER_SITE = 4


def _load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"pianode_netns_{name}", ROOT / "scripts" / "netns" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------- one site (runs in its namespace)


async def _site(args: argparse.Namespace) -> dict[str, object]:
    import trio

    from pianode.mesh.config import NodeConfig
    from pianode.mesh.node import open_node
    from pianode.relay.certificates import load_credentials
    from pianode.relay.client import RelayClient

    delays: list[float] = []
    sent = 0
    async with trio.open_nursery() as nursery:
        factory, ip = None, args.ip
        client = None
        if args.relay:
            pki = pathlib.Path(args.pki)
            creds = load_credentials(pki / "ca" / "ca.pem", pki / "ca" / f"{args.name}.pem", pki / "ca" / f"{args.name}.key")
            client = RelayClient(creds, (args.relay, 7777))
            welcome = await nursery.start(client.run)
            factory, ip = client.site, welcome.address
        nodes = []
        async with _nodes(open_node, NodeConfig, ip, factory) as nodes:
            def on_data(source: int, data: bytes, reliable: bool) -> None:
                if len(data) >= FRAME.size:
                    delays.append(time.monotonic() - FRAME.unpack_from(data)[0])

            for node in nodes:
                node.set_data_handler(on_data)
            host = (args.host, 49152)
            for k, node in enumerate(nodes):
                if args.first == 0 and k == 0:
                    await node.create_mesh()
                else:
                    await node.join(host)
            with trio.fail_after(30):
                for node in nodes:
                    while not await node.wait_connected(7, timeout=30):
                        pass
            await trio.sleep(max(0.0, args.start - time.monotonic()))  # the shared start
            delays.clear()
            end = args.start + args.duration
            tick = 1 / 60
            nxt = time.monotonic()
            seq = 0
            while time.monotonic() < end:
                for node in nodes:
                    node.broadcast_nowait(FRAME.pack(time.monotonic(), seq) + bytes(52), reliable=False)
                    sent += 1
                seq += 1
                nxt += tick
                await trio.sleep(max(0.0, nxt - time.monotonic()))
            await trio.sleep(0.5)  # late frames still count (as late)
        nursery.cancel_scope.cancel()
    return {"sent": sent, "delays": delays}


class _nodes:
    def __init__(self, open_node, NodeConfig, ip, factory) -> None:  # type: ignore[no-untyped-def]  # noqa: N803
        from contextlib import AsyncExitStack

        self.stack = AsyncExitStack()
        self.configs = [
            NodeConfig(version="5.18", bind=(ip, 49152 + k), session_key=KEY, socket_factory=factory, seed=k + 1)
            for k in range(PER_SITE)
        ]
        self.open_node = open_node

    async def __aenter__(self):  # type: ignore[no-untyped-def]
        return [await self.stack.enter_async_context(self.open_node(c)) for c in self.configs]

    async def __aexit__(self, *exc: object) -> None:
        await self.stack.aclose()


def site_main(argv: list[str]) -> int:
    import trio

    p = argparse.ArgumentParser()
    p.add_argument("--ip")
    p.add_argument("--host")
    p.add_argument("--first", type=int)
    p.add_argument("--start", type=float)
    p.add_argument("--duration", type=float)
    p.add_argument("--relay", default=None)
    p.add_argument("--pki", default=None)
    p.add_argument("--name", default=None)
    p.add_argument("--out")
    args = p.parse_args(argv)
    result = trio.run(_site, args)
    pathlib.Path(args.out).write_text(json.dumps(result))
    return 0


# ---------------------------------------------------------------------- the run


def _summary(results: list[dict[str, object]], duration: float) -> dict[str, object]:
    delays = sorted(d for r in results for d in r["delays"])  # type: ignore[attr-defined]
    sent = sum(int(r["sent"]) for r in results)  # type: ignore[call-overload]
    expected = sent * 7
    within = sum(1 for d in delays if d <= 0.050)

    def pct(q: float) -> float:
        return round(1000 * delays[min(len(delays) - 1, int(q * len(delays)))], 3) if delays else float("nan")

    return {"frames_expected": expected, "frames_received": len(delays), "within_50ms": within,
            "share_within_50ms": round(within / expected, 5) if expected else 0.0,
            "median_ms": round(1000 * statistics.median(delays), 3) if delays else None,
            "p95_ms": pct(0.95), "p99_ms": pct(0.99), "max_ms": pct(1.0), "duration_s": duration}  # fmt: skip


def run(duration: float, rounds: int) -> dict[str, object]:
    sites_mod = _load("relay_sites")
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from relay_pki import make_pki

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="pianode-relay-frames-"))
    make_pki(tmp)
    sites = sites_mod.build(2)
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out: dict[str, list[dict[str, object]]] = {"relay": [], "direct": []}
    hub = None
    try:
        a, b = sites.sites
        sites_mod._must("netns", "exec", sites.hub, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        sites_mod._must("-n", a, "route", "add", "default", "via", sites.hub_addresses[0])
        sites_mod._must("-n", b, "route", "add", "default", "via", sites.hub_addresses[1])
        hub = subprocess.Popen(sites.exec_argv(sites.hub, py, "-m", "pianode", "relay", "serve", "--listen", "0.0.0.0:7777",
                               "--ca", str(tmp / "ca" / "ca.pem"), "--cert", str(tmp / "ca" / "hub.pem"), "--key",
                               str(tmp / "ca" / "hub.key"), "--report", "0"), stdout=subprocess.DEVNULL, env=env)  # fmt: skip
        time.sleep(1.5)
        for _ in range(rounds):
            for mode in ("relay", "direct"):
                start = time.monotonic() + 8.0
                procs = []
                for k, (ns, ip) in enumerate(zip(sites.sites, sites.site_addresses)):
                    argv = [py, __file__, "site", "--first", str(k * PER_SITE), "--start", str(start), "--duration",
                            str(duration), "--out", str(tmp / f"{mode}-{k}.json")]  # fmt: skip
                    if mode == "relay":
                        argv += ["--ip", "0.0.0.0", "--host", "10.77.0.1", "--relay", sites.hub_addresses[k],
                                 "--pki", str(tmp), "--name", f"site-{'ab'[k]}"]  # fmt: skip
                    else:
                        argv += ["--ip", ip, "--host", sites.site_addresses[0]]
                    procs.append(subprocess.Popen(sites.exec_argv(ns, *argv), env=env))
                    time.sleep(1.0)  # site A (the host) first
                for proc in procs:
                    if proc.wait(timeout=duration + 60) != 0:
                        raise RuntimeError(f"a {mode} site failed")
                out[mode].extend(json.loads((tmp / f"{mode}-{k}.json").read_text()) for k in range(2))
    finally:
        if hub is not None:
            hub.terminate()
            hub.wait(timeout=10)
        sites_mod.remove(sites.prefix)
        shutil.rmtree(tmp, ignore_errors=True)  # (the run's CA and its keys, the sites' reports: read above)
    figures = {mode: _summary(results, duration * rounds) for mode, results in out.items()}
    relay, direct = figures["relay"]["median_ms"], figures["direct"]["median_ms"]
    figures["relay_added_ms_per_hop"] = round((relay - direct) / 2, 3) if relay and direct else None  # type: ignore[operator]
    return figures


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "site":
        return site_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    print(json.dumps(run(args.duration, args.rounds), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
