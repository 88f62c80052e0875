"""`python -m pipeline ...`."""
import os
import sys

from pipeline.cli import EXIT_INTERRUPTED, EXIT_TERMINATED, main

status = main()
if status in (EXIT_INTERRUPTED, EXIT_TERMINATED):
    # A signal to the process group (Slurm's SIGTERM, Ctrl-C in a terminal) may have ended a local
    # Ray with the driver; Ray's exit hook then waits for its GCS and ends the process with status 1.
    # Everything the grid records is written before main returns, so the process ends here, with the
    # signal's status (the re-derivation child reads end-of-file and exits; Ray's own processes share
    # the driver's fate).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
sys.exit(status)
