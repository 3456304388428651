"""One module per ``pianode`` subcommand; each defines ``add_parser(subparsers)``."""
