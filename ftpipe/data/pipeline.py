"""The whole validation, as plain functions: used by the Dagster assets and by ``ftpipe validate`` alike.

    example_chunks       read every file chunk by chunk, normalize to chat messages, split train/holdout
    ExamplesChecker      the pandera model (errors) and the data-quality checks (warnings), chunk by chunk
    validate_to_parquet  both in one pass, writing the normalized examples as they go: bounded memory
    tokenize_to_parquet  the train split rendered and tokenized slice by slice (ftpipe.data.tokenize): the
                         tokenized cache, whose statistics are the pre-flight (ftpipe.data.preflight); the
                         held-out split beside it, for the validation loss during training
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
from jinja2.exceptions import TemplateError

from ftpipe.data.columns import ColumnMapping
from ftpipe.data.fast_normalize import normalize_lines_fast
from ftpipe.data.normalize import normalize
from ftpipe.data.preference import PREFERENCE_SHAPES
from ftpipe.data.preflight import Preflight
from ftpipe.data.quality import DUPLICATE_KEY, WARNING_COLUMNS, DataWarning, WarningCollector
from ftpipe.data.read import (
    CHUNK_BYTES,
    JSON_COLUMNS,
    is_json_array,
    iter_line_chunks,
    parquet_frames,
    record_batches,
    records_from_chunk,
)
from ftpipe.data.schema import RowValidator, ValidationOutcome
from ftpipe.data.split import assign_split

MAX_EVAL_OVERLAP = 0.5
"""An evaluation file whose examples are this much (or more) in the training data is refused; below, a warning."""
MIN_HOLDOUT_EXAMPLES = 5
"""Fewer held-out examples than this cannot evaluate an adapter: its gates would turn on one answer. A job's
validation (the asset, ``ftpipe validate``) asks for it; checking a file's rows alone does not."""


@dataclass
class ExamplesCheck:
    outcome: ValidationOutcome
    warnings: list[DataWarning] = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def normalized_chunks(path: str | Path, chunk_bytes: int = CHUNK_BYTES,
                      mapping: ColumnMapping | None = None) -> Iterator[pl.DataFrame]:
    """One file, normalized chunk by chunk: JSONL vectorized where a chunk is clean, other formats record by record.
    ``mapping``: the manifest's ``columns:`` / ``roles:``, applied to every record."""
    path = Path(path)
    if path.suffix.lower() not in (".jsonl", ".json") or (path.suffix.lower() == ".json" and is_json_array(path)):
        # One reader frame at a time: bounded in rows and in decoded bytes (a few hundred bytes of Parquet may
        # decode to thousands of megabyte records), so that the per-chunk checks are bounded too.
        for batch in record_batches(path, path.name, mapping.json_columns() if mapping else JSON_COLUMNS):
            yield normalize(batch, mapping)
        return
    for chunk in iter_line_chunks(path, chunk_bytes, path.name):
        fast = None
        try:
            lines = None if chunk.too_long else chunk.data.decode("utf-8").split("\n")
        except UnicodeDecodeError:
            lines = None
        if lines is not None and not mapping:
            if lines and lines[-1] == "":
                lines.pop()
            fast = normalize_lines_fast(pl.Series(lines, dtype=pl.String), chunk.first_line, path.name)
        yield fast if fast is not None else normalize(records_from_chunk(chunk, path.name), mapping)


def normalize_file(path: str | Path, chunk_bytes: int = CHUNK_BYTES,
                   mapping: ColumnMapping | None = None) -> pl.DataFrame:
    frames = list(normalized_chunks(path, chunk_bytes, mapping))
    return pl.concat(frames) if frames else normalize([])


def inferred_objective(path: str | Path, mapping: ColumnMapping | None = None) -> tuple[str, str | None]:
    """(objective, shape) from the file's first recognised record: preference pairs train DPO, the rest SFT.
    Reads one chunk of a file that starts with a valid record."""
    for frame in normalized_chunks(path, mapping=mapping):
        shapes = frame["shape"].drop_nulls()
        if len(shapes):
            return ("dpo" if shapes[0] in PREFERENCE_SHAPES else "sft"), shapes[0]
    return "sft", None


def example_chunks(files: Mapping[str, str | Path], holdout_fraction: float, chunk_bytes: int = CHUNK_BYTES,
                   mapping: ColumnMapping | None = None) -> Iterator[pl.DataFrame]:
    """``files`` maps a role (``train``, ``eval``) to a path; an eval file is held out as a whole."""
    for role, path in files.items():
        for frame in normalized_chunks(path, chunk_bytes, mapping):
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
        self._eval_rows = 0
        self._eval_files: list[str] = []
        self._holdout_keys: list[pl.Series] = []  # 8 bytes per held-out row: the distinct ones are counted

    def add(self, chunk: pl.DataFrame) -> None:
        self._rows.add(chunk)
        self._warnings.add(chunk)
        if not self._objective_error:
            self._objective_error = _objective_errors(chunk, self.objective)
        for split in self._counts:
            self._counts[split] += chunk.filter(pl.col("split") == split).height
        self._shapes |= set(chunk.filter(pl.col("role") == "train")["shape"].drop_nulls().unique().to_list())
        self._holdout_keys.append(chunk.filter(pl.col("split") == "holdout").select(DUPLICATE_KEY)["key"])
        evals = chunk.filter(pl.col("role") == "eval")
        self._eval_rows += evals.height
        self._eval_files += [f for f in evals["source_file"].unique(maintain_order=True) if f not in self._eval_files]

    def finish(self, examples: Iterable[pl.DataFrame], min_examples: int, max_examples: int | None,
               min_holdout: int = 0) -> ExamplesCheck:
        """``examples``: the frames fed to ``add``, in the same order, for the few rows a warning must re-read."""
        outcome = self._rows.outcome(min_examples, max_examples)
        outcome.dataset_errors += self._objective_error
        warnings = self._warnings.finish(examples)
        outcome.dataset_errors += self._evaluation_errors(warnings, min_holdout)
        stats = {"records": self._rows.n_records, **self._counts, "shapes": ",".join(sorted(self._shapes))}
        return ExamplesCheck(outcome, warnings, stats)

    def _evaluation_errors(self, warnings: list[DataWarning], min_holdout: int) -> list[str]:
        """What would make the evaluation meaningless, or impossible, known before any training."""
        errors = []
        distinct = pl.concat(self._holdout_keys).n_unique() if self._holdout_keys else 0
        if self._rows.n_records and distinct < min_holdout:
            errors.append(f"the held-out split has {distinct} distinct example(s); evaluating the adapter "
                          f"needs at least {min_holdout}: upload more examples, raise holdout_fraction, or give "
                          "an eval_dataset")
        overlap = next((w for w in warnings if w.kind == "train_eval_overlap"), None)
        if overlap is not None and self._eval_rows and overlap.count >= MAX_EVAL_OVERLAP * self._eval_rows:
            share = "every" if overlap.count >= self._eval_rows else f"{overlap.count} of {self._eval_rows}"
            errors.append(f"{share} example(s) of {', '.join(self._eval_files)} are also in the training data (by "
                          "their prompt, ignoring case, spacing and system messages): a score on them measures "
                          "memory, not skill; evaluate on examples the adapter does not train on, or leave "
                          "eval_dataset out for a held-out split")
        return errors


def check_examples(examples: pl.DataFrame, min_examples: int, max_examples: int | None,
                   objective: str = "sft", min_holdout: int = 0) -> ExamplesCheck:
    checker = ExamplesChecker(objective)
    checker.add(examples)
    return checker.finish([examples], min_examples, max_examples, min_holdout)


@contextmanager
def parquet_written_whole(
    out_file: str | Path, empty: Callable[[], pl.DataFrame],
) -> Iterator[Callable[[pl.DataFrame], None]]:
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


def validate_to_parquet(files: Mapping[str, str | Path], holdout_fraction: float, out_file: str | Path,
                        min_examples: int, max_examples: int | None, objective: str = "sft",
                        chunk_bytes: int = CHUNK_BYTES, progress=None,
                        min_holdout: int = 0, mapping: ColumnMapping | None = None) -> ExamplesCheck:
    """Read, check and write the normalized examples in one pass, one chunk in memory at a time."""
    checker, rows = ExamplesChecker(objective), 0
    with parquet_written_whole(out_file, _no_examples) as append:
        for chunk in example_chunks(files, holdout_fraction, chunk_bytes, mapping):
            checker.add(chunk)
            append(chunk)
            rows += chunk.height
            if progress:
                progress(rows)
    return checker.finish(parquet_frames(out_file, WARNING_COLUMNS), min_examples, max_examples, min_holdout)


def _objective_errors(examples: pl.DataFrame, objective: str) -> list[str]:
    """DPO learns from preference pairs and SFT from demonstrations: a file of the other kind is refused whole."""
    wrong = ((~pl.col("shape").is_in(PREFERENCE_SHAPES)) if objective == "dpo"
             else pl.col("shape").is_in(PREFERENCE_SHAPES))
    first = examples.filter(pl.col("shape").is_not_null() & wrong).head(1)
    if first.is_empty():
        return []
    file, line, shape = first.select("source_file", "line", "shape").row(0)
    if objective == "dpo":
        return [f"objective 'dpo' trains on preference pairs (prompt/chosen/rejected or input/preferred_output/"
                f"non_preferred_output), but {file} line {line} is a '{shape}' example"]
    return [f"{file} line {line} is a preference pair ('{shape}'): "
            "set 'objective: dpo' in manifest.yaml to train on it"]


TOKENIZE_SLICE_ROWS = 50_000


def train_row_count(examples_file: str | Path) -> int:
    return pl.scan_parquet(examples_file).filter(pl.col("split") == "train").select(pl.len()).collect().item()


def tokenize_to_parquet(tokenizer, examples_file: str | Path, out_file: str | Path, max_len: int, objective: str,
                        progress=None, slice_rows: int = TOKENIZE_SLICE_ROWS,
                        eval_file: str | Path | None = None) -> int:
    """The train split of a ``validate_to_parquet`` file, tokenized into ``out_file`` one slice at a time, so that
    memory holds one slice, not the upload; with ``eval_file``, the held-out split into it the same way in the
    same pass (the validation loss during training). ``progress(done, total)`` after each batch of the train
    split. Returns the number of train examples written. ``eval_file`` is complete before ``out_file`` appears,
    so a cache whose train file exists has both."""
    from ftpipe.data.tokenize import tokenize_examples

    total, done = train_row_count(examples_file), 0
    if (refusal := _tools_refusal(tokenizer, examples_file)) is not None:
        raise refusal

    def no_examples() -> pl.DataFrame:
        return tokenize_examples(tokenizer, pl.scan_parquet(examples_file).head(0).collect(), max_len, objective)

    def tokenized(rows: pl.DataFrame, in_slice=None) -> pl.DataFrame:
        try:
            return tokenize_examples(tokenizer, rows, max_len, objective, in_slice)
        except TemplateError as exc:
            raise _template_refusal(tokenizer, rows) or TemplateRefused(f"the chat template: {exc}") from None

    with parquet_written_whole(out_file, no_examples) as append, _optional_parquet(eval_file, no_examples) as held_out:
        for frame in parquet_frames(examples_file, batch_rows=slice_rows):
            if eval_file is not None and not (holdout := frame.filter(pl.col("split") == "holdout")).is_empty():
                held_out(tokenized(holdout))
            train = frame.filter(pl.col("split") == "train")
            if train.is_empty():
                continue
            in_slice = None if progress is None else (lambda n, _, offset=done: progress(offset + n, total))
            append(tokenized(train, in_slice))
            done += train.height
    return done


@contextmanager
def _optional_parquet(out_file: str | Path | None, empty: Callable[[], pl.DataFrame]):
    """``parquet_written_whole`` when there is a file to write; otherwise an ``append`` that is never called."""
    if out_file is None:
        yield lambda frame: None
        return
    with parquet_written_whole(out_file, empty) as append:
        yield append


class TemplateRefused(ValueError):
    """The base model's chat template raised on an example (many refuse roles that do not alternate)."""


def _tools_refusal(tokenizer, examples_file: str | Path) -> TemplateRefused | None:
    """The first example with tools or tool calls, when the base model's chat template cannot show them."""
    from ftpipe.data.tokenize import renders_tools

    examples = pl.scan_parquet(examples_file)
    if "tools" not in examples.collect_schema():  # validated before tools were read: none has them
        examples = examples.with_columns(pl.lit(None, pl.String).alias("tools"))
    first = (examples
             .filter(pl.col("tools").is_not_null() | pl.col("messages").str.contains('"tool_calls":', literal=True))
             .select("source_file", "line", "tools").head(1).collect())
    if first.is_empty() or renders_tools(tokenizer):
        return None
    source_file, line, tools = first.row(0)
    return TemplateRefused(f"{source_file} line {line}, {'tools' if tools else 'messages'}: the base model's chat "
                           "template does not render tools and tool calls, so the model would never see them; "
                           "choose a base model whose template supports tools, or leave the tool turns out")


def _template_refusal(tokenizer, train: pl.DataFrame) -> TemplateRefused | None:
    """The first example of the slice that the template refuses, by file and line: searched only once the slice
    has failed, one example at a time."""
    tools = train["tools"].to_list() if "tools" in train.columns else [None] * train.height
    for (source_file, line, messages), spec in zip(train.select("source_file", "line", "messages").iter_rows(), tools):
        try:
            tokenizer.apply_chat_template(json.loads(messages), tools=json.loads(spec) if spec else None,
                                          tokenize=False)
        except TemplateError as exc:
            return TemplateRefused(f"{source_file} line {line}, messages: the base model's chat template refuses "
                                   f"this conversation: {exc}")
    return None


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
                   holdout_fraction: float = 0.1, objective: str = "sft", progress=None,
                   min_holdout: int = 0, mapping: ColumnMapping | None = None) -> LocalValidation:
    """Everything the platform checks before training, in the same order: structure first, then the
    pre-flight through the base model's template (only when the structure is valid)."""
    import tempfile

    from transformers import AutoTokenizer

    from ftpipe.data.preflight import run_preflight

    with tempfile.TemporaryDirectory() as tmp:
        examples_file, tokenized_file = Path(tmp) / "examples.parquet", Path(tmp) / "tokenized.parquet"
        check = validate_to_parquet(files, holdout_fraction, examples_file, min_examples, max_examples, objective,
                                    min_holdout=min_holdout, mapping=mapping)
        if not check.outcome.passed:
            return LocalValidation(check, None)
        tokenize_to_parquet(AutoTokenizer.from_pretrained(tokenizer_path), examples_file, tokenized_file, max_len,
                            objective, progress)
        stats = pl.read_parquet(tokenized_file, columns=PREFLIGHT_COLUMNS)
    return LocalValidation(check, run_preflight(stats, max_len, epochs, num_parameters, pool_name, pool))
