"""A stand-in GPU process for tests: reports the devices it was pinned to and its thread budget, then holds
them a moment."""

import os
import time

from dagster_pipes import open_dagster_pipes

with open_dagster_pipes() as pipes:
    pipes.report_custom_message({"visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                 "threads": os.environ.get("OMP_NUM_THREADS")})
    time.sleep(float(pipes.get_extra("hold_s")))
