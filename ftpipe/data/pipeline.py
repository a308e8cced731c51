"""The whole validation, as plain functions: used by the Dagster assets and by ``ftpipe validate`` alike.

    example_chunks       read every file chunk by chunk, normalize to chat messages, split train/holdout
    ExamplesChecker      the pandera model (errors) and the data-quality checks (warnings), chunk by chunk
    validate_to_parquet  both in one pass, writing the normalized examples as they go: bounded memory
    tokenize_to_parquet  the train split rendered and tokenized slice by slice (ftpipe.data.tokenize): the
                         tokenized cache, whose statistics are the pre-flight (ftpipe.data.preflight)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from ftpipe.data.fast_normalize import normalize_lines_fast
from ftpipe.data.normalize import normalize
from ftpipe.data.preference import PREFERENCE_SHAPES
from ftpipe.data.preflight import Preflight
from ftpipe.data.quality import WARNING_COLUMNS, DataWarning, WarningCollector
from ftpipe.data.read import (
    CHUNK_BYTES,
    TABLE_BATCH_ROWS,
    iter_line_chunks,
    parquet_frames,
    read_records,
    records_from_chunk,
)
from ftpipe.data.schema import RowValidator, ValidationOutcome
from ftpipe.data.split import assign_split


@dataclass
class ExamplesCheck:
    outcome: ValidationOutcome
    warnings: list[DataWarning] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def normalized_chunks(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[pl.DataFrame]:
    """One file, normalized chunk by chunk: JSONL vectorized where a chunk is clean, other formats record by record."""
    path = Path(path)
    if path.suffix.lower() not in (".jsonl", ".json"):
        records = read_records(path, display_name=path.name)
        while batch := list(islice(records, TABLE_BATCH_ROWS)):
            yield normalize(batch)
        return
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
        yield fast if fast is not None else normalize(records_from_chunk(chunk, first_line, path.name, path))


def normalize_file(path: str | Path, chunk_bytes: int = CHUNK_BYTES) -> pl.DataFrame:
    frames = list(normalized_chunks(path, chunk_bytes))
    return pl.concat(frames) if frames else normalize([])


def example_chunks(files: dict[str, str | Path], holdout_fraction: float,
                   chunk_bytes: int = CHUNK_BYTES) -> Iterator[pl.DataFrame]:
    """``files`` maps a role (``train``, ``eval``) to a path; an eval file is held out as a whole."""
    for role, path in files.items():
        for frame in normalized_chunks(path, chunk_bytes):
            frame = frame.with_columns(pl.lit(role).alias("role"))
            if role == "train":
                yield assign_split(frame, holdout_fraction)
            else:
                yield frame.with_columns(pl.lit("holdout").alias("split"))


def load_examples(files: dict[str, str | Path], holdout_fraction: float) -> pl.DataFrame:
    """All examples in memory: for small datasets and tests (``validate_to_parquet`` streams)."""
    return pl.concat(list(example_chunks(files, holdout_fraction)))


class ExamplesChecker:
    """Errors and warnings over a dataset fed chunk by chunk, in file order."""

    def __init__(self, objective: str = "sft"):
        self.objective = objective
        self._rows = RowValidator()
        self._warnings = WarningCollector()
        self._objective_error: list[str] = []
        self._counts = {"train": 0, "holdout": 0}
        self._shapes: set[str] = set()

    def add(self, chunk: pl.DataFrame) -> None:
        self._rows.add(chunk)
        self._warnings.add(chunk)
        if not self._objective_error:
            self._objective_error = _objective_errors(chunk, self.objective)
        for split in self._counts:
            self._counts[split] += chunk.filter(pl.col("split") == split).height
        self._shapes |= set(chunk.filter(pl.col("role") == "train")["shape"].drop_nulls().unique().to_list())

    def finish(self, examples: Iterable[pl.DataFrame], min_examples: int, max_examples: int | None) -> ExamplesCheck:
        """``examples``: the frames fed to ``add``, in the same order, for the few rows a warning must re-read."""
        outcome = self._rows.outcome(min_examples, max_examples)
        outcome.dataset_errors += self._objective_error
        stats = {"records": self._rows.n_records, **self._counts, "shapes": ",".join(sorted(self._shapes))}
        return ExamplesCheck(outcome, self._warnings.finish(examples), stats)


def check_examples(examples: pl.DataFrame, min_examples: int, max_examples: int | None,
                   objective: str = "sft") -> ExamplesCheck:
    checker = ExamplesChecker(objective)
    checker.add(examples)
    return checker.finish([examples], min_examples, max_examples)


@contextmanager
def parquet_written_whole(out_file: str | Path, empty: Callable[[], pl.DataFrame]) -> Iterator[Callable[[pl.DataFrame], None]]:
    """Yields ``append(frame)``: the frames go to a file beside ``out_file``, renamed into place once all are in,
    so that a reader never sees half a file, and nothing is left behind on failure. ``empty()`` gives the
    table written when nothing was appended (its readers still select its columns)."""
    out_file = Path(out_file)
    tmp = out_file.with_name(out_file.name + ".tmp")
    writer = None

    def append(frame: pl.DataFrame) -> None:
        nonlocal writer
        table = frame.to_arrow()
        writer = writer or pq.ParquetWriter(tmp, table.schema)
        writer.write_table(table)

    try:
        yield append
    except BaseException:
        if writer:
            writer.close()
        tmp.unlink(missing_ok=True)
        raise
    if writer:
        writer.close()
    else:
        empty().write_parquet(tmp)
    tmp.replace(out_file)


def _no_examples() -> pl.DataFrame:
    return normalize([]).with_columns(pl.lit(None, pl.String).alias("role"), pl.lit(None, pl.String).alias("split"))


def validate_to_parquet(files: dict[str, str | Path], holdout_fraction: float, out_file: str | Path,
                        min_examples: int, max_examples: int | None, objective: str = "sft",
                        chunk_bytes: int = CHUNK_BYTES, progress=None) -> ExamplesCheck:
    """Read, check and write the normalized examples in one pass, one chunk in memory at a time."""
    checker, rows = ExamplesChecker(objective), 0
    with parquet_written_whole(out_file, _no_examples) as append:
        for chunk in example_chunks(files, holdout_fraction, chunk_bytes):
            checker.add(chunk)
            append(chunk)
            rows += chunk.height
            if progress:
                progress(rows)
    return checker.finish(parquet_frames(out_file, WARNING_COLUMNS), min_examples, max_examples)


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


TOKENIZE_SLICE_ROWS = 50_000


def train_row_count(examples_file: str | Path) -> int:
    return pl.scan_parquet(examples_file).filter(pl.col("split") == "train").select(pl.len()).collect().item()


def tokenize_to_parquet(tokenizer, examples_file: str | Path, out_file: str | Path, max_len: int, objective: str,
                        progress=None, slice_rows: int = TOKENIZE_SLICE_ROWS) -> int:
    """The train split of a ``validate_to_parquet`` file, tokenized into ``out_file`` one slice at a time, so that
    memory holds one slice, not the upload. ``progress(done, total)`` after each batch. Returns the number of
    examples written."""
    from ftpipe.data.tokenize import tokenize_examples

    total, done = train_row_count(examples_file), 0

    def no_examples() -> pl.DataFrame:
        return tokenize_examples(tokenizer, pl.scan_parquet(examples_file).head(0).collect(), max_len, objective)

    with parquet_written_whole(out_file, no_examples) as append:
        for frame in parquet_frames(examples_file, batch_rows=slice_rows):
            train = frame.filter(pl.col("split") == "train")
            if train.is_empty():
                continue
            in_slice = None if progress is None else (lambda n, _, offset=done: progress(offset + n, total))
            append(tokenize_examples(tokenizer, train, max_len, objective, in_slice))
            done += train.height
    return done


PREFLIGHT_COLUMNS = ["source_file", "line", "n_tokens", "n_trainable", "learns_eos"]
"""What the pre-flight reads of the tokenized cache: a few bytes per example, never the token lists."""


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
    import tempfile

    from transformers import AutoTokenizer

    from ftpipe.data.preflight import run_preflight

    with tempfile.TemporaryDirectory() as tmp:
        examples_file, tokenized_file = Path(tmp) / "examples.parquet", Path(tmp) / "tokenized.parquet"
        check = validate_to_parquet(files, holdout_fraction, examples_file, min_examples, max_examples, objective)
        if not check.outcome.passed:
            return LocalValidation(check, None)
        tokenize_to_parquet(AutoTokenizer.from_pretrained(tokenizer_path), examples_file, tokenized_file, max_len,
                            objective, progress)
        stats = pl.read_parquet(tokenized_file, columns=PREFLIGHT_COLUMNS)
    return LocalValidation(check, run_preflight(stats, max_len, epochs, num_parameters, pool_name, pool))
