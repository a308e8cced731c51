"""Run the real trainer in its own process, with faults injected at exact steps, for the resume tests.

    python tests/helpers/trainer_harness.py SPEC.json RESULT.json [--sigkill-at-step N] [--signal-at-step N:SIG]
                                                               [--step-seconds S] [--steps-file PATH]

The faults are real: ``--sigkill-at-step`` kills this process with SIGKILL right after step N; ``--signal-at-step``
delivers a real signal to it, which goes through the trainer's own handlers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time

from transformers import TrainerCallback

from ftpipe.training.interrupts import stop_on_signals_and_orphaning
from ftpipe.training.local import EXIT_INTERRUPTED
from ftpipe.training.runner import INTERRUPTED, run_training
from ftpipe.training.spec import TrainJobSpec


class Faults(TrainerCallback):
    def __init__(self, args) -> None:
        self.args = args

    def on_step_end(self, args, state, control, **kwargs):
        if self.args.steps_file:
            with open(self.args.steps_file, "w") as f:
                f.write(str(state.global_step))
        if self.args.step_seconds:
            time.sleep(self.args.step_seconds)
        if state.global_step == self.args.sigkill_at_step:
            os.kill(os.getpid(), signal.SIGKILL)  # mid-interval: the steps since the last checkpoint are lost
        if self.args.signal_at_step:
            step, name = self.args.signal_at_step.split(":")
            if state.global_step == int(step):
                os.kill(os.getpid(), getattr(signal, name))



def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("spec")
    parser.add_argument("result")
    parser.add_argument("--sigkill-at-step", type=int)
    parser.add_argument("--signal-at-step")
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--steps-file")
    args = parser.parse_args()
    spec = TrainJobSpec.from_dict(json.loads(open(args.spec).read()))
    with stop_on_signals_and_orphaning(poll_seconds=0.2) as stop:
        result = run_training(spec, stop=stop, log=lambda m: print(m, file=sys.stderr, flush=True),
                         extra_callbacks=[Faults(args)])
    with open(args.result, "w") as f:
        json.dump(dataclasses.asdict(result), f)
    return EXIT_INTERRUPTED if result.outcome == INTERRUPTED else 0


if __name__ == "__main__":
    sys.exit(main())
