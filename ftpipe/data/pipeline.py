"""The whole validation, as plain functions: used by the Dagster assets and by ``ftpipe validate`` alike.

    load_examples      read every file, normalize to chat messages, split train/holdout
    check_examples     the pandera model (errors) and the data-quality checks (warnings)
    tokenize + run_preflight (ftpipe.data.tokenize / ftpipe.data.preflight) on the train split
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ftpipe.data.normalize import normalize
from ftpipe.data.preference import PREFERENCE_SHAPES
from ftpipe.data.preflight import Preflight
from ftpipe.data.quality import DataWarning, data_warnings
from ftpipe.data.fast_normalize import normalize_lines_fast
from ftpipe.data.read import CHUNK_BYTES, iter_line_chunks, read_records, records_from_chunk
from ftpipe.data.schema import ValidationOutcome, validate_examples
from ftpipe.data.split import assign_split


@dataclass
class ExamplesCheck:
    outcome: ValidationOutcome
    warnings: list[DataWarning] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def normalize_file(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> pl.DataFrame:
    """Read and normalize one file: JSONL chunk by chunk, vectorized where a chunk is clean."""
    path = Path(path)
    if path.suffix.lower() not in (".jsonl", ".json"):
        return normalize(read_records(path, display_name=path.name))
    frames = []
    for first_line, chunk in iter_line_chunks(path, chunk_bytes):
        fast = None
        try:
            lines = chunk.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            lines = None
        if lines is not None:
            if lines and lines[-1] == "":
                lines.pop()
            fast = normalize_lines_fast(pl.Series(lines, dtype=pl.String), first_line, path.name)
        frames.append(fast if fast is not None else normalize(records_from_chunk(chunk, first_line, path.name, path)))
    return pl.concat(frames) if frames else normalize([])


def load_examples(files: dict[str, str | Path], holdout_fraction: float) -> pl.DataFrame:
    """``files`` maps a role (``train``, ``eval``) to a path; an eval file is held out as a whole."""
    frames = []
    for role, path in files.items():
        frame = normalize_file(path).with_columns(pl.lit(role).alias("role"))
        if role == "train":
            frame = assign_split(frame, holdout_fraction)
        else:
            frame = frame.with_columns(pl.lit("holdout").alias("split"))
        frames.append(frame)
    return pl.concat(frames)


def check_examples(examples: pl.DataFrame, min_examples: int, max_examples: int | None,
                   objective: str = "sft") -> ExamplesCheck:
    train_rows = examples.filter(pl.col("role") == "train")
    outcome = validate_examples(examples, min_examples=min_examples, max_examples=max_examples)
    outcome.dataset_errors += _objective_errors(examples, objective)
    stats = {
        "records": examples.height,
        "train": examples.filter(pl.col("split") == "train").height,
        "holdout": examples.filter(pl.col("split") == "holdout").height,
        "shapes": ",".join(sorted(s for s in train_rows["shape"].unique().to_list() if s)),
    }
    return ExamplesCheck(outcome, data_warnings(examples), stats)


def _objective_errors(examples: pl.DataFrame, objective: str) -> list[str]:
    """DPO learns from preference pairs and SFT from demonstrations: a file of the other kind is refused whole."""
    wrong = (~pl.col("shape").is_in(PREFERENCE_SHAPES)) if objective == "dpo" else pl.col("shape").is_in(PREFERENCE_SHAPES)
    first = examples.filter(pl.col("shape").is_not_null() & wrong).head(1)
    if first.is_empty():
        return []
    file, line, shape = first.select("source_file", "line", "shape").row(0)
    if objective == "dpo":
        return [f"objective 'dpo' trains on preference pairs (prompt/chosen/rejected or input/preferred_output/"
                f"non_preferred_output), but {file} line {line} is a '{shape}' example"]
    return [f"{file} line {line} is a preference pair ('{shape}'): set 'objective: dpo' in manifest.yaml to train on it"]


@dataclass
class LocalValidation:
    check: ExamplesCheck
    preflight: Preflight | None
    """None when structural errors stopped the validation before tokenization."""

    @property
    def passed(self) -> bool:
        return self.check.outcome.passed and self.preflight is not None and self.preflight.passed


def validate_files(files: dict[str, str | Path], tokenizer_path: str, num_parameters: int, *, max_len: int,
                   epochs: float, pool_name: str, pool, min_examples: int, max_examples: int | None = None,
                   holdout_fraction: float = 0.1, objective: str = "sft", progress=None) -> LocalValidation:
    """Everything the platform checks before training, in the same order: structure first, then the
    pre-flight through the base model's template (only when the structure is valid)."""
    from transformers import AutoTokenizer

    from ftpipe.data.preflight import run_preflight
    from ftpipe.data.tokenize import tokenize_examples

    examples = load_examples(files, holdout_fraction)
    check = check_examples(examples, min_examples, max_examples, objective)
    if not check.outcome.passed:
        return LocalValidation(check, None)
    tokenized = tokenize_examples(AutoTokenizer.from_pretrained(tokenizer_path),
                                  examples.filter(pl.col("split") == "train"), max_len, objective, progress)
    return LocalValidation(check, run_preflight(tokenized, max_len, epochs, num_parameters, pool_name, pool))
