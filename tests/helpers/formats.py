"""What every data-format test does with a file: write it as JSONL, CSV or Parquet, validate it exactly as the
platform does, render and tokenize it through the tiny model's chat template, and train a few steps on it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from ftpipe.data.columns import ColumnMapping
from ftpipe.data.pipeline import ExamplesCheck, tokenize_to_parquet, validate_to_parquet


def write_rows(path: Path, rows: list[dict]) -> Path:
    """``rows`` as the file type its name says. CSV cells hold nested values as JSON text, as spreadsheets and
    ``pandas.to_csv`` of a JSON column do."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    elif path.suffix == ".csv":
        pl.DataFrame([{k: v if isinstance(v, str) else json.dumps(v) for k, v in r.items()} for r in rows]
                     ).write_csv(path)
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        raise ValueError(path)
    return path


@dataclass
class Validated:
    check: ExamplesCheck
    examples_file: Path

    @property
    def errors(self) -> list[str]:
        return [str(e) for e in self.check.outcome.errors]

    def conversations(self) -> list[list[dict]]:
        frame = pl.read_parquet(self.examples_file).sort("source_file", "line")
        return [json.loads(m) for m in frame["messages"]]

    def tools(self) -> list[list[dict] | None]:
        frame = pl.read_parquet(self.examples_file).sort("source_file", "line")
        return [json.loads(t) if t else None for t in frame["tools"]]


def validate(path: Path, objective: str = "sft", mapping: ColumnMapping | None = None) -> Validated:
    out = path.with_name(path.stem + ".validated.parquet")
    check = validate_to_parquet({"train": path}, 0.1, out, 1, None, objective, mapping=mapping)
    return Validated(check, out)


def tokenized(tokenizer, validated: Validated, max_len: int = 512) -> pl.DataFrame:
    """Every example (train and held out) rendered and tokenized as training reads it, in file order."""
    whole = validated.examples_file.with_name("all.parquet")
    pl.read_parquet(validated.examples_file).with_columns(pl.lit("train").alias("split")).write_parquet(whole)
    out = whole.with_name("tokenized.parquet")
    tokenize_to_parquet(tokenizer, whole, out, max_len, "sft")
    return pl.read_parquet(out).sort("source_file", "line")


def learned_text(tokenizer, ids: list[int], mask: list[int]) -> list[str]:
    """The decoded text of each run of learned tokens."""
    runs, current = [], []
    for token, bit in zip([*ids, None], [*mask, 0]):
        if bit:
            current.append(token)
        elif current:
            runs.append(tokenizer.decode(current))
            current = []
    return runs


def train_a_few_steps(tiny_model, tokenizer, validated: Validated, tmp_path: Path, steps: int = 3):
    """A few real LoRA steps on the file's tokenized train split: the format reaches the trainer intact."""
    from ftpipe.training.runner import run_training
    from tests.helpers.training import tiny_spec

    train_file = tmp_path / "train.tokenized.parquet"
    tokenize_to_parquet(tokenizer, validated.examples_file, train_file, 256, "sft")
    logged: list[dict] = []
    result = run_training(tiny_spec(tiny_model, train_file, tmp_path / "run", max_steps=steps, micro_batch_size=4,
                                    logging_steps=1, save_steps=1000), sink=logged.append)
    assert result.outcome == "completed" and result.steps == steps
    losses = [m["loss"] for m in logged if "loss" in m]
    assert len(losses) == steps and all(math.isfinite(x) and x > 0 for x in losses)
    assert (Path(result.adapter_dir) / "adapter_model.safetensors").exists()
    return result
