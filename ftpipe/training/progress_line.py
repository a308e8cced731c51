"""The one-line training progress a trainer logs per logging step, and its reading back.

The trainer logs it through Dagster Pipes into the run's event log, where the UI shows it; the API reads the
same lines back into OpenAI's metrics events. Both sides use this module, so the format has one owner.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf)"
_LINE = re.compile(r"step (\d+)/(\d+) (.*)")
_FIELD = re.compile(rf"([a-z_/]+)=({_NUMBER})(?:MB)?")
_NAMES = {"loss": "train_loss", "eval_loss": "valid_loss", "lr": "learning_rate", "grad_norm": "grad_norm",
          "tokens/s": "tokens_per_second", "mem": "memory_mb"}


def format_progress(m: dict) -> str:
    """``m``: what ``ftpipe.training.callbacks`` reports for one logging or evaluation step."""
    if "eval_loss" in m:
        return f"step {m['step']}/{m['max_steps']} eval_loss={m['eval_loss']:.4f}"
    return (f"step {m['step']}/{m['max_steps']} loss={m['loss']:.4f} lr={m['learning_rate']:.2e} "
            f"grad_norm={m['grad_norm']:.3f} tokens/s={m['tokens_per_second']:.0f} mem={m['memory_mb']:.0f}MB")


def parse_progress(line: str) -> dict | None:
    """``{"step", "total_steps", "train_loss" | "valid_loss", ...}`` from a progress line; None for any other."""
    match = _LINE.fullmatch(line.strip())
    if not match:
        return None
    fields = {_NAMES[name]: float(value) for name, value in _FIELD.findall(match.group(3)) if name in _NAMES}
    if "train_loss" not in fields and "valid_loss" not in fields:
        return None
    return {"step": int(match.group(1)), "total_steps": int(match.group(2)),
            **{k: (v if math.isfinite(v) else None) for k, v in fields.items()}}
