"""The evaluator process: ``python -m ftpipe.evaluation.pipes_main``, launched by Dagster Pipes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from dagster_pipes import open_dagster_pipes

from ftpipe.evaluation.compare import compare_base_and_tuned
from ftpipe.evaluation.smoke import smoke_generation

SMOKE_PROMPTS = 3


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def _last_assistant(messages: list[dict]) -> int:
    return max(i for i, m in enumerate(messages) if m["role"] == "assistant")


def main() -> None:
    with open_dagster_pipes() as pipes:
        holdout = pl.read_parquet(pipes.get_extra("holdout_file"))
        conversations = [json.loads(m) for m in holdout["messages"]]
        pairs = None
        if pipes.get_extra("objective") == "dpo":
            pairs = [(c[:n], c[n:], json.loads(r))
                     for c, n, r in zip(conversations, holdout["n_prompt"], holdout["rejected"])]
        pipes.log.info(f"evaluating base and tuned with lm-eval: {len(conversations)} held-out examples, golden set")
        report = compare_base_and_tuned(
            base_model_path=pipes.get_extra("base_model_path"),
            adapter_dir=pipes.get_extra("adapter_dir"),
            holdout_conversations=conversations,
            work_dir=pipes.get_extra("work_dir"),
            holdout_pairs=pairs,
            golden_set=pipes.get_extra("golden_set"),
        )
        prompts = [p for p, _, _ in pairs] if pairs else [c[:_last_assistant(c)] for c in conversations]
        prompts = [p for p in prompts if any(m["role"] == "user" for m in p)][:SMOKE_PROMPTS]
        smoke = smoke_generation(pipes.get_extra("base_model_path"), pipes.get_extra("adapter_dir"), prompts)
        pipes.log.info(f"smoke generation: differs from base={smoke.differs}, stops at end of turn={smoke.stops}")
        report_file = Path(pipes.get_extra("work_dir")) / "eval_report.json"
        report_file.write_text(json.dumps({**json.loads(report_file.read_text()), "smoke": smoke.to_dict()}, indent=2))
        metadata: dict[str, Any] = {
            "report": {"raw_value": report.to_markdown() + "\n\n" + smoke.to_markdown(), "type": "md"},
            "n_holdout": report.n_holdout, "smoke_passed": smoke.passed}
        for row in report.rows:  # 4 significant digits: more is noise on a few hundred questions
            metadata[f"{row.task}_{row.metric}_base"] = _sig(row.base.value)
            metadata[f"{row.task}_{row.metric}_tuned"] = _sig(row.tuned.value)
            metadata[f"{row.task}_{row.metric}_delta"] = _sig(row.delta.value)
            metadata[f"{row.task}_{row.metric}_delta_low"] = _sig(row.delta.low)
            metadata[f"{row.task}_{row.metric}_delta_high"] = _sig(row.delta.high)
        for task in ("holdout", "golden"):
            ratio = report.estimates[f"{task}_perplexity_ratio"]
            metadata[f"{task}_perplexity_ratio"] = _sig(ratio.value)
            metadata[f"{task}_perplexity_ratio_low"] = _sig(ratio.low)
            metadata[f"{task}_perplexity_ratio_high"] = _sig(ratio.high)
        pipes.report_asset_materialization(metadata=metadata)


if __name__ == "__main__":
    main()
