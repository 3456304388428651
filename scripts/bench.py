#!/usr/bin/env python3
"""Run the pianode benchmark (the same as ``pianode bench``); ``--help`` lists the budgets.

Examples::

    python scripts/bench.py --quick                     # about 30 s, every section
    python scripts/bench.py --json bench.json           # the full run
    python scripts/bench.py --sections codec,receive --profile /tmp/prof
"""

from __future__ import annotations

import argparse
import sys

from pianode.bench.run import add_arguments, run_from_args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except ValueError as exc:
        print(f"bench.py: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
