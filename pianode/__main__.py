from __future__ import annotations

import sys

from pianode.cli import interrupt

interrupt.install()  # first: Ctrl-C or SIGTERM while the rest imports ends the way it does later
try:
    from pianode.cli.main import main

    status = main()
except KeyboardInterrupt:
    status = interrupt.report()
sys.exit(status)
