"""Run one training spec outside Dagster: ``python -m ftpipe.training.local SPEC.json [RESULT.json]``.

The same trainer the Pipes process runs, with the Trainer's progress bar; used to debug a job by hand and by
the tests that kill and resume a real trainer process. Exit status: 0 completed, 75 interrupted at a
checkpoint (resume by running it again), 1 failed.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from ftpipe.training.failures import TrainingFailure
from ftpipe.training.interrupts import stop_on_signals_and_orphaning
from ftpipe.training.runner import INTERRUPTED, is_main_process, run_training
from ftpipe.training.spec import TrainJobSpec

EXIT_INTERRUPTED = 75  # EX_TEMPFAIL: try again later


def main(argv: list[str]) -> int:
    spec = TrainJobSpec.from_dict(json.loads(open(argv[0]).read()))
    with stop_on_signals_and_orphaning() as stop:
        try:
            result = run_training(spec, stop=stop, log=lambda message: print(message, file=sys.stderr, flush=True))
        except TrainingFailure as failure:
            print(failure.report(), file=sys.stderr)
            return 1
    if len(argv) > 1 and is_main_process():
        with open(argv[1], "w") as f:
            json.dump(dataclasses.asdict(result), f, indent=1)
    return EXIT_INTERRUPTED if result.outcome == INTERRUPTED else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
