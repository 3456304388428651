"""pianode relay: a hub through which meshes span places, and the certificates it admits (seed 004).

    pianode relay ca init pki                     # pki/ca.pem, pki/ca.key (keep ca.key to yourself)
    pianode relay ca issue pki --server hub       # pki/hub.pem, pki/hub.key: the hub's
    pianode relay ca issue pki --client site-a    # one per site
    pianode relay serve --listen 0.0.0.0:7777 --ca pki/ca.pem --cert pki/hub.pem --key pki/hub.key

and at each site, any of ``pianode node``, ``lan host|browse|join``, ``ldn host|scan|join``
and ``mesh`` with ``--relay HUB:7777 --relay-ca pki/ca.pem --relay-cert pki/site-a.pem
--relay-key pki/site-a.key`` (``--relay-room NAME``: which room, default ``lan``).
The node then has the room's virtual address (its --bind port is kept) and
broadcasts reach the room; everything above is plain Pia.

serve prints one line per site admitted, refused or gone, and the counters
table every --report seconds and when it stops (SIGTERM, Ctrl-C, --duration).

Exit status: 0; 1 when the hub cannot run; 2 for a bad flag or file.  A site
refused by the hub, or refusing it, ends with one line naming the reason, exit 1.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from pianode.cli.common import (
    relay_unavailable,
    printable,
    check_not_standard_output,
    CliError, CliFailure, Stop, check_udp_free, number_arg, parse_bind, parse_hostport, parse_remote, render_table,
)  # fmt: skip
from pianode.mesh.config import NodeConfig
from protocols.relay_control import room_name_problem

if TYPE_CHECKING:
    from pianode.relay.certificates import Credentials
    from pianode.relay.client import RelayClient
    from pianode.relay.hub import RelayHub
    from protocols.relay_control import Welcome

__all__ = ["OWN_HUB", "RelayPlan", "add_parser", "add_relay_arguments", "check_reaches_hub", "relay_address", "relay_broadcast", "relay_join_flags", "relay_local", "relay_node_config", "relay_plan", "run_trio"]

T = TypeVar("T")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("relay", help="a hub that joins meshes across places (QUIC, mutual TLS), and its CA",
                       description=__doc__)  # fmt: skip
    rsub = p.add_subparsers(dest="relay_command", metavar="SUBCOMMAND")
    s = rsub.add_parser("serve", help="run a hub")
    s.add_argument("--listen", required=True, metavar="IP:PORT", help="UDP address of the hub")
    s.add_argument("--ca", required=True, metavar="CA.pem", help="the CA whose client certificates are admitted")
    s.add_argument("--cert", required=True, metavar="S.pem", help="the hub's server certificate")
    s.add_argument("--key", required=True, metavar="S.key", help="the hub's key")
    s.add_argument("--network", default="10.77.0.0/16", metavar="CIDR",
                   help="virtual addresses of the rooms, one /24 each (default 10.77.0.0/16)")
    s.add_argument("--report", type=number_arg("--report", 0, 86400), default=10.0, metavar="S",
                   help="print the counters table every S seconds (0: only at the end; default 10)")
    s.add_argument("--duration", type=number_arg("--duration", 0, 86400 * 365, lo_open=True), default=None,
                   metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    s.set_defaults(handler=run_serve)
    ca = rsub.add_parser("ca", help="the relay's certificate authority")
    csub = ca.add_subparsers(dest="ca_command", metavar="ACTION")
    i = csub.add_parser("init", help="make DIR/ca.pem and DIR/ca.key")
    i.add_argument("dir", metavar="DIR")
    i.set_defaults(handler=run_ca_init)
    iss = csub.add_parser("issue", help="issue DIR/NAME.pem and DIR/NAME.key for a hub or a site")
    iss.add_argument("dir", metavar="DIR")
    role = iss.add_mutually_exclusive_group(required=True)
    role.add_argument("--server", metavar="NAME", help="a server-only certificate (a hub)")
    role.add_argument("--client", metavar="NAME", help="a client-only certificate (a site)")
    iss.add_argument("--days", type=number_arg("--days", 1, 3650, integer=True), default=825, help="validity (default 825)")
    iss.set_defaults(handler=run_ca_issue)


def _relay_modules() -> Any:
    """pianode.relay, imported when a command needs it: it needs the [relay] extra (aioquic)."""
    try:
        import pianode.relay.certificates
        import pianode.relay.client
        import pianode.relay.hub
        import pianode.relay.hub_state
    except ImportError as exc:
        raise relay_unavailable(exc) from None
    return pianode.relay


# ---------------------------------------------------------------------- ca


def _ca_dir(text: str) -> None:
    if not text:
        raise CliError("DIR must be a folder name, got ''")
    if text == "-":  # as for every folder flag (check_output_dir)
        raise CliError("DIR -: DIR names a folder, not standard input or output: give a folder name (./- for one named -)")


def run_ca_init(args: argparse.Namespace) -> int:
    _ca_dir(args.dir)
    relay = _relay_modules()
    try:
        path = relay.certificates.init_ca(args.dir)
    except FileExistsError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"{args.dir}: {exc.strerror or exc}") from None
    print(printable(f"made the relay CA: {path} (certificate, give it to the hub and every site) and "
                    f"{path.with_suffix('.key')} (its key: keep it here)"))  # fmt: skip
    return 0


def run_ca_issue(args: argparse.Namespace) -> int:
    role, name = ("server", args.server) if args.server is not None else ("client", args.client)
    if name is None:
        raise CliError("name the certificate's holder: --server NAME (a hub) or --client NAME (a site)")
    if not name:
        raise CliError(f"--{role} needs a name")
    _ca_dir(args.dir)
    for name_of_file in ("ca.pem", "ca.key"):  # `... >> DIR/ca.pem` would append the result line to the CA
        check_not_standard_output("DIR", os.path.join(args.dir, name_of_file))
    relay = _relay_modules()
    try:
        pem, key = relay.certificates.issue(args.dir, name, role=role, days=args.days)
    except FileNotFoundError as exc:
        there = [n for n in ("ca.pem", "ca.key") if os.path.lexists(os.path.join(args.dir, n))]
        if there:  # half a CA: ca init refuses to overwrite what is there
            raise CliError(f"{args.dir}: {exc.filename} missing beside {there[0]}: put it back, or remove {there[0]}"
                           f" and make a new CA with pianode relay ca init {args.dir}") from None
        raise CliError(f"{args.dir}: no CA there ({exc.filename} missing; make one with pianode relay ca init {args.dir})") from None
    except FileExistsError as exc:
        raise CliError(f"--{role} {name}: {exc.filename} {exc.strerror}") from None
    except relay.certificates.CaUnusable as exc:  # names the CA file: not the fault of --client/--server NAME
        raise CliError(str(exc)) from None
    except ValueError as exc:
        raise CliError(f"--{role} {name}: {exc}") from None
    except OSError as exc:
        raise CliError(f"{args.dir}: {exc.strerror or exc}") from None
    print(printable(f"issued a {role}-only certificate for {name}: {pem} and {key}"))
    return 0


# ---------------------------------------------------------------------- serve


def _credentials(ca: str, cert: str, key: str, flags: tuple[str, str, str], role: str) -> Credentials:
    """The three files, and our own certificate checked as one the other side will take."""
    certificates = _relay_modules().certificates
    for flag, path in zip(flags, (ca, cert, key)):
        check_not_standard_output(flag, path)  # `... >> hub.key` would append the command's output to the key
    try:
        creds = certificates.load_credentials(ca, cert, key)
    except ValueError as exc:
        text = str(exc)
        flag = flags[0] if text.startswith("CA") else flags[2] if text.startswith("key") else flags[1]
        raise CliError(f"{flag}: {text}") from None
    try:
        certificates.check_peer(creds.certificate, [], creds.ca, role=role)
    except certificates.CertificateRefused as exc:
        raise CliError(f"{flags[1]} {cert}: {exc} (issue one with pianode relay ca issue DIR --{role} NAME)") from None
    return creds


def run_serve(args: argparse.Namespace) -> int:
    listen = parse_hostport(args.listen, flag="--listen", ipv6=True)  # an IPv6 literal is named whole, then refused
    if ":" in listen[0]:
        # The hub's socket is IPv4, as every site's --relay HOST:PORT is: an IPv6 address ended in a
        # "cannot resolve" line that named no flag.
        raise CliError(f"--listen {args.listen}: the hub listens on IPv4 (sites reach it with --relay IPv4:PORT); "
                       "give an IPv4 address, or 0.0.0.0 for every interface")
    check_udp_free("--listen", *listen, any_port=False)  # sites must know the port: --listen names one
    creds = _credentials(args.ca, args.cert, args.key, ("--ca", "--cert", "--key"), "server")
    relay = _relay_modules()
    try:
        state = relay.hub_state.HubState(args.network)
    except ValueError as exc:
        raise CliError(f"--network {args.network}: {exc}") from None
    duration = math.inf if args.duration is None else args.duration
    stop = Stop()

    def say(line: str) -> None:
        if not args.quiet:
            print(f"relay: {line}", flush=True)

    hub = relay.hub.RelayHub(creds, listen, state=state, log=say)

    async def main() -> None:
        stop.deadline = trio.current_time() + duration
        async with trio.open_nursery() as nursery:
            await nursery.start(stop.watch)
            address = await nursery.start(hub.serve)
            say(f"hub on {address[0]}:{address[1]}, rooms in {state.network}")
            with stop.phase():
                while True:
                    await trio.sleep(args.report if args.report > 0 else math.inf)
                    _print_table(hub)
            nursery.cancel_scope.cancel()

    trio.run(main)
    _print_table(hub)
    stop.exit_if_interrupted()
    return 0


def _print_table(hub: RelayHub) -> None:
    headers, rows = hub.state.table()
    for line in render_table(headers, rows, right={4, 5, 6, 7, 8}):
        print(line)
    for line in hub.state.room_lines():
        print(line)
    drops = ", ".join(f"{k}: {v}" for k, v in sorted(hub.state.drops.items()))
    print(f"{len(hub.state.rooms)} room(s), {len(rows)} site(s); dropped: {drops or 'none'}", flush=True)


# ---------------------------------------------------------------------- --relay on other commands


#: ``--relay`` with no value where a command can start its own hub (``pianode mesh``).
OWN_HUB = "own hub"
#: The room a site joins when --relay-room is not given.
DEFAULT_ROOM = "lan"


def relay_room(args: argparse.Namespace) -> str:
    """The checked --relay-room (the default room when it is not given); one line when it is wrong,
    or when it is given without --relay (it would name a room of no hub: refused, not ignored)."""
    room = args.relay_room
    if room is not None and args.relay is None:
        raise CliError("--relay-room needs --relay HOST:PORT (it names a room on a relay hub)")
    if room is None:
        return DEFAULT_ROOM
    problem = room_name_problem(room)
    if problem is not None:
        raise CliError(f"--relay-room {room!r}: {problem}")
    return str(room)


def add_relay_arguments(p: argparse.ArgumentParser, *, own_hub: str | None = None) -> None:
    """The --relay flags; *own_hub* (the help) lets ``--relay`` alone start a hub of the command's own."""
    g = p.add_argument_group("relay (reach sites elsewhere through a hub: pianode relay --help)")
    if own_hub is None:
        g.add_argument("--relay", metavar="HOST:PORT", default=None, help="the hub; the node gets a virtual address there")
    else:
        g.add_argument("--relay", metavar="HOST:PORT", default=None, nargs="?", const=OWN_HUB, help=own_hub)
    g.add_argument("--relay-ca", metavar="CA.pem", default=None, help="the relay's CA certificate")
    g.add_argument("--relay-cert", metavar="C.pem", default=None, help="this site's client certificate")
    g.add_argument("--relay-key", metavar="C.key", default=None, help="this site's key")
    g.add_argument("--relay-room", metavar="NAME", default=None, help=f"room (one virtual LAN) to join (default {DEFAULT_ROOM})")


@attrs.define
class RelayPlan:
    """The --relay flags, checked; the connection once :func:`run_trio` made it."""

    hub: tuple[str, int]
    credentials: Credentials
    room: str
    #: Where the site's connection to the hub goes out from: the IP of --bind, or any address.
    local: str = "0.0.0.0"
    client: RelayClient | None = None
    welcome: Welcome | None = None


_ACTIVE: trio.lowlevel.RunVar[RelayPlan] = trio.lowlevel.RunVar("pianode_cli_relay")


def relay_plan(args: argparse.Namespace) -> RelayPlan | None:
    """The checked --relay flags (None without --relay); one line naming the flag otherwise."""
    files = (args.relay_ca, args.relay_cert, args.relay_key)
    room = relay_room(args)
    if args.relay is None:
        if any(f is not None for f in files):
            raise CliError("--relay-ca/--relay-cert/--relay-key need --relay HOST:PORT")
        return None
    missing = [f for f, v in zip(("--relay-ca", "--relay-cert", "--relay-key"), files) if not v]
    if missing:
        raise CliError(f"--relay needs {', '.join(missing)}")
    hub = parse_remote(args.relay, "--relay")
    creds = _credentials(args.relay_ca, args.relay_cert, args.relay_key, ("--relay-ca", "--relay-cert", "--relay-key"), "client")
    return RelayPlan(hub, creds, room)


def relay_local(plan: RelayPlan | None, text: str | None, flag: str = "--bind") -> None:
    """Through a relay, the IP of --bind (*text*, when given) is where the site's connection to the hub
    goes out from, as a node's socket does without one (its Pia address is the virtual one the hub
    gives, its port the --bind port); checked now, one line naming *flag* when it cannot be."""
    if plan is None or text is None:
        return
    ip = parse_bind(text, flag)[0]
    check_reaches_hub(ip, plan.hub, flag)
    plan.local = ip


def check_reaches_hub(ip: str, hub: tuple[str, int], flag: str) -> None:
    """A connection from *ip* can reach *hub*: a loopback address reaches only loopback."""
    if ipaddress.IPv4Address(ip).is_loopback and not ipaddress.IPv4Address(hub[0]).is_loopback:
        raise CliError(f"{flag} {ip}: a loopback address cannot reach the relay at {hub[0]}:{hub[1]}")


def run_trio(plan: RelayPlan | None, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(fn, *args)``; with a relay, connected first, its site the run's socket factory."""
    if plan is None:
        return trio.run(fn, *args)
    return trio.run(_with_relay, plan, fn, args)


async def _with_relay(plan: RelayPlan, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> T:
    async with trio.open_nursery() as nursery:
        with trio.fail_after(15):
            await nursery.start(_connect, plan)
        assert plan.client is not None
        trio.socket.set_custom_socket_factory(plan.client.site)
        _ACTIVE.set(plan)
        result = await fn(*args)
        nursery.cancel_scope.cancel()
    return result


async def _connect(plan: RelayPlan, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    client_module = _relay_modules().client
    plan.client = client = client_module.RelayClient(plan.credentials, plan.hub, room=plan.room, bind=(plan.local, 0))

    async def guarded(*, task_status: trio.TaskStatus[Welcome] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await client.run(task_status=task_status)
        except client_module.RelayRefused as exc:
            where = f"relay {plan.hub[0]}:{plan.hub[1]}"
            raise CliFailure(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from None

    async with trio.open_nursery() as nursery:
        plan.welcome = await nursery.start(guarded)
        task_status.started()


def relay_address() -> tuple[str, str] | None:
    """In a run with a relay: (this site's virtual address, its room's broadcast address)."""
    try:
        plan = _ACTIVE.get()
    except LookupError:
        return None
    assert plan.client is not None and plan.client.address is not None and plan.welcome is not None
    network = ipaddress.IPv4Network(f"{plan.welcome.address}/{plan.welcome.prefix}", strict=False)
    return plan.client.address, str(network.broadcast_address)


def relay_node_config(config: NodeConfig) -> NodeConfig:
    """*config* as it is at this site: in a run with a relay, bound to the virtual address (same
    port), group packets to the room's broadcast address; unchanged otherwise."""
    where = relay_address()
    if where is None:
        return config
    address, broadcast = where
    group = None if config.group_broadcast is None else (broadcast, config.group_broadcast[1])
    return attrs.evolve(config, bind=(address, config.bind[1]), group_broadcast=group)


def relay_broadcast(default: str, given: str | None) -> str:
    """The broadcast address to use: the room's in a run with a relay (unless one was *given*), else *default*."""
    where = relay_address()
    return default if where is None or given is not None else where[1]


def relay_join_flags() -> str | None:
    """In a run with a relay: the --relay flags another site joins with (its own certificate)."""
    try:
        plan = _ACTIVE.get()
    except LookupError:
        return None
    return (f"--relay {plan.hub[0]}:{plan.hub[1]} --relay-room {plan.room} --relay-ca CA.pem "
            "--relay-cert SITE.pem --relay-key SITE.key")
