from __future__ import annotations

import os
import sys

from pianode.cli import interrupt

interrupt.install()  # first: Ctrl-C or SIGTERM while the rest imports ends the way it does later
try:
    from pianode.cli.main import main
except KeyboardInterrupt:
    # Stopped while importing: no command has started, so there is nothing to finish or clean up, and the
    # process ends here at once.  Leaving through the interpreter's shutdown instead let the stop end as
    # death by SIGINT in about one run in thirty (the shutdown of an interrupted import), after the
    # process had said "interrupted".
    status = interrupt.report()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
try:
    status = main()
except KeyboardInterrupt:
    status = interrupt.report()
sys.exit(status)
