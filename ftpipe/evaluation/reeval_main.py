"""The re-evaluation process: ``python -m ftpipe.evaluation.reeval_main``, launched by Dagster Pipes.

Extras: ``groups`` (a list of ``{"base_model_path", "adapters": {adapter_id: path}}``), ``work_dir``,
``golden_set``. Writes ``golden_scores.json`` into ``work_dir``.
"""

from __future__ import annotations

import json
from pathlib import Path

from dagster_pipes import open_dagster_pipes

from ftpipe.evaluation.reeval import golden_scores


def main() -> None:
    with open_dagster_pipes() as pipes:
        work_dir = Path(pipes.get_extra("work_dir"))
        out, digest = [], ""
        for n, group in enumerate(pipes.get_extra("groups")):
            pipes.log.info(f"golden set: {group['base_model_path']} and {len(group['adapters'])} adapter(s)")
            run = golden_scores(group["base_model_path"], group["adapters"], work_dir / f"group-{n}",
                                pipes.get_extra("golden_set"))
            digest = run.digest
            out.append({"base_model_path": group["base_model_path"], **run.to_dict()})
        (work_dir / "golden_scores.json").write_text(json.dumps({"golden_set_digest": digest, "groups": out}))
        pipes.log.info(f"scored {sum(len(g['adapters']) for g in out)} adapter(s) on the golden set")


if __name__ == "__main__":
    main()
