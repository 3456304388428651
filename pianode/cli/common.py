"""Arguments shared by several subcommands (version, network, faults)."""

from __future__ import annotations

import argparse

from pianode.sim.faults import LinkFaults


__all__ = ["CliError", "add_fault_arguments", "add_network_arguments", "fault_injector_from_args", "parse_hostport"]


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


def add_network_arguments(
    p: argparse.ArgumentParser, *, default_version: str | None = "5.18", version_help: str | None = None
) -> None:
    p.add_argument("--version", default=default_version, help=version_help or f"Pia version (default {default_version}; e.g. 5.29)")
    p.add_argument("--network", default="lan", choices=("lan", "ldn", "nex"), help="network type (ids and nonces)")
    p.add_argument("--allow-nearest-version", action="store_true", help="use the nearest documented version for an undocumented one")
    p.add_argument("--backend", choices=("cryptography", "pycryptodome"), default=None, help="AEAD backend (default: fastest installed)")
    p.add_argument("--seed", type=int, default=None, help="seed for ids, keys and fault decisions (reproducible runs)")


def add_fault_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fault injection (every link, decided per packet from --seed)")
    g.add_argument("--loss", type=float, default=0.0, metavar="P", help="probability a datagram is lost")
    g.add_argument("--dup", type=float, default=0.0, metavar="P", help="probability a datagram is duplicated")
    g.add_argument("--reorder", type=float, default=0.0, metavar="P", help="probability a datagram is held back and overtaken")
    g.add_argument("--delay", type=float, default=0.0, metavar="S", help="one-way delay in seconds")
    g.add_argument("--jitter", type=float, default=0.0, metavar="S", help="extra random delay up to S seconds")
    g.add_argument("--corrupt", type=float, default=0.0, metavar="P", help="probability one bit is flipped")
    g.add_argument("--truncate", type=float, default=0.0, metavar="P", help="probability a datagram is cut short")


def fault_injector_from_args(args: argparse.Namespace) -> LinkFaults | None:
    try:
        faults = LinkFaults(
            loss=args.loss,
            duplicate=args.dup,
            reorder=args.reorder,
            delay=args.delay,
            jitter=args.jitter,
            corrupt=args.corrupt,
            truncate=args.truncate,
            seed=args.seed or 0,
        )
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return None if faults.is_clean else faults


def parse_hostport(text: str, default_port: int | None = None) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        if default_port is None:
            raise CliError(f"expected HOST:PORT, got {text!r}")
        host, port = text, str(default_port)
    try:
        value = int(port)
    except ValueError:
        raise CliError(f"bad port in {text!r}") from None
    if not (0 if default_port == 0 else 1) <= value < 65536:
        raise CliError(f"port out of range in {text!r}")
    return host, value
