"""A torchrun worker that runs only the trainer's watchdog, for the orphaning test in tests/test_distributed.py.

It writes ``pid-RANK`` into ``$WATCHDOG_OUT`` once its watchdog runs, waits for a stop request as the training
loop would, and writes the reason into ``stopped-RANK``.
"""

import os
import time
from pathlib import Path

from ftpipe.training.interrupts import stop_on_signals_and_orphaning


def main() -> None:
    out, rank = Path(os.environ["WATCHDOG_OUT"]), os.environ.get("RANK", "0")
    with stop_on_signals_and_orphaning(poll_seconds=0.1) as stop:
        (out / f"pid-{rank}").write_text(str(os.getpid()))
        while not stop.requested:
            time.sleep(0.05)
    (out / f"stopped-{rank}").write_text(stop.reason)


if __name__ == "__main__":
    main()
