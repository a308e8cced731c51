"""The platform's golden set: fixed general-capability questions every adapter is evaluated on.

A tenant's fine-tune should teach its own task without costing the base model's general skills; scoring the
base and the tuned model on the same fixed set shows the regression. The set ships with the project and is
identified by its digest, so a report always says which set it was scored on; a deployment on a real base
model points ``evaluation.golden_set`` in the platform configuration at its own file of the same shape
(JSON lines with ``system``, ``prompt``, ``target``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

DEFAULT_GOLDEN_SET = Path(__file__).parent / "golden" / "general-v1.jsonl"


def load_golden_set(path: str | Path | None = None) -> tuple[list[dict], str]:
    """(docs, sha256 digest of the file)."""
    data = Path(path or DEFAULT_GOLDEN_SET).read_bytes()
    docs = []
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        missing = {"prompt", "target"} - set(row)
        if missing:
            raise ValueError(f"{path or DEFAULT_GOLDEN_SET}: line {number}: missing field(s) {sorted(missing)}")
        docs.append({"system": row.get("system", ""), "prompt": row["prompt"], "target": row["target"]})
    return docs, hashlib.sha256(data).hexdigest()
