"""The ``pianode`` command line: :mod:`pianode.cli.main` parses, one module per subcommand runs it.

Each subcommand module defines ``add_parser(subparsers)``; :mod:`pianode.cli.common`
holds what several share (the one-line :class:`~pianode.cli.common.CliError`, the
version, network and fault flags).
"""
