"""The pandera model that is the blocking quality gate on a normalized dataset, and its error report.

Each failing check is turned back into the file, the 1-based line and the field the tenant wrote, so that
the report says e.g. ``train.jsonl line 7, messages: no assistant turn``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandera.polars as pa
import polars as pl
from pandera.api.polars.types import PolarsData
from pandera.errors import SchemaErrors

from ftpipe.data.normalize import FIELD_SEPARATOR

# What a failing check means to a tenant, keyed by (column, check name).
_MESSAGES = {
    ("problem", "no_problem"): ("record", "{value}"),
    # field FIELD_SEPARATOR message (ftpipe.data.normalize): the field is the path the tenant wrote, e.g.
    # messages[0].content.
    ("field_problem", "no_field_problem"): (None, "{value}"),
    ("shape", "not_nullable"): ("record", "shape not recognized"),
    ("shape", "same_shape_in_file"): ("record", "shape '{value}' differs from the file's first example "
                                                "({first_shape}); one shape per file"),
    ("unknown_keys", "no_unknown_keys"): ("record", "unknown keys: {value}"),
    # The value is field FIELD_SEPARATOR message (ftpipe.data.preference.pair_problem): the tenant's own key; it
    # names the cause more precisely than the chat checks below, which a broken pair fails too.
    ("pair_problem", "no_pair_problem"): (None, "{value}"),
    ("weight_problem", "no_weight_problem"): (None, "{value}"),
    ("n_assistant", "greater_than_or_equal_to(1)"): ("messages", "no assistant turn"),
    ("n_empty", "equal_to(0)"): ("messages", "{value} message(s) with empty content"),
    ("n_bad_role", "equal_to(0)"): ("messages[].role", "unrecognized role (use system, user, assistant or tool)"),
    ("roles_in_order", "in_order"): ("messages[].role", "roles out of order: optional system first, then user, ..., "
                                                        "ending with assistant"),
}


_CONVERSATION_FIELD = {"sharegpt": "conversations"}
"""The tenant's name for the conversation, where it is not ``messages``, for the row checks' field names."""


class NormalizedExamples(pa.DataFrameModel):
    source_file: str
    line: int = pa.Field(ge=1)
    shape: str = pa.Field(nullable=False)
    problem: str = pa.Field(nullable=True)
    field_problem: str = pa.Field(nullable=True)
    unknown_keys: str = pa.Field(nullable=True)
    n_assistant: int = pa.Field(ge=1)
    n_empty: int = pa.Field(eq=0)
    n_bad_role: int = pa.Field(eq=0)
    roles_in_order: bool
    pair_problem: str = pa.Field(nullable=True)
    weight_problem: str = pa.Field(nullable=True)

    # The file's first shape, when an earlier chunk of a streamed file saw it (``RowValidator``).
    file_shape: str = pa.Field(nullable=True)

    @pa.check("shape", name="same_shape_in_file")
    def _same_shape(cls, data: PolarsData) -> pl.LazyFrame:
        """A file that mixes shapes is refused: half of it would be read with the wrong meaning."""
        first = pl.coalesce(pl.col("file_shape"), pl.col(data.key).drop_nulls().first().over("source_file"))
        return data.lazyframe.select(pl.col(data.key).is_null() | (pl.col(data.key) == first))

    @pa.check("problem", name="no_problem")
    def _no_problem(cls, data: PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(pl.col(data.key).is_null())

    @pa.check("field_problem", name="no_field_problem")
    def _no_field_problem(cls, data: PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(pl.col(data.key).is_null())

    @pa.check("pair_problem", name="no_pair_problem")
    def _no_pair_problem(cls, data: PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(pl.col(data.key).is_null())

    @pa.check("weight_problem", name="no_weight_problem")
    def _no_weight_problem(cls, data: PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(pl.col(data.key).is_null())

    @pa.check("unknown_keys", name="no_unknown_keys")
    def _no_unknown_keys(cls, data: PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(pl.col(data.key).is_null())

    @pa.check("roles_in_order", name="in_order")
    def _in_order(cls, data: PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(pl.col(data.key))

    class Config:
        strict = False
        coerce = False


@dataclass(frozen=True)
class RowError:
    source_file: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.source_file} line {self.line}, {self.field}: {self.message}"


MAX_KEPT_ERRORS = 1_000
"""Row errors kept for the report (all are counted): a 10M-row file of bad lines must not fill the memory."""


@dataclass
class ValidationOutcome:
    n_examples: int
    errors: list[RowError] = field(default_factory=list)
    dataset_errors: list[str] = field(default_factory=list)
    n_row_errors: int = 0
    """Rows with an error; ``errors`` holds the first ``MAX_KEPT_ERRORS`` of them."""

    @property
    def passed(self) -> bool:
        return not self.n_row_errors and not self.dataset_errors

    @property
    def n_errors(self) -> int:
        return self.n_row_errors + len(self.dataset_errors)

    def error_lines(self) -> list[str]:
        return self.dataset_errors + [str(e) for e in self.errors]


class RowValidator:
    """The pandera model applied chunk by chunk, so that a file of any size is checked in bounded memory;
    a file's first shape carries over from chunk to chunk."""

    def __init__(self):
        self.n_records = 0
        self.n_row_errors = 0
        self.errors: list[RowError] = []
        self._first_shape: dict[str, str] = {}

    def add(self, frame: pl.DataFrame) -> None:
        known = pl.DataFrame({"source_file": list(self._first_shape), "file_shape": list(self._first_shape.values())},
                             schema={"source_file": pl.String, "file_shape": pl.String})
        frame = frame.drop("file_shape", strict=False).join(known, on="source_file", how="left", maintain_order="left")
        for f, shape in (frame.filter(pl.col("shape").is_not_null())
                         .group_by("source_file", maintain_order=True).agg(pl.col("shape").first()).iter_rows()):
            self._first_shape.setdefault(f, shape)
        self.n_records += frame.height
        try:
            NormalizedExamples.validate(frame, lazy=True)
        except SchemaErrors as exc:
            # A record that failed to parse fails the checks of every derived column too: its first cause only.
            seen: dict[tuple[str, int], RowError] = {}
            for err in _row_errors(frame, exc.failure_cases, self._first_shape):
                seen.setdefault((err.source_file, err.line), err)
            self.n_row_errors += len(seen)
            room = MAX_KEPT_ERRORS - len(self.errors)
            self.errors += sorted(seen.values(), key=lambda e: (e.source_file, e.line))[:max(room, 0)]

    def outcome(self, min_examples: int = 1, max_examples: int | None = None) -> ValidationOutcome:
        outcome = ValidationOutcome(self.n_records, list(self.errors), n_row_errors=self.n_row_errors)
        valid = self.n_records - self.n_row_errors
        if valid < min_examples:
            outcome.dataset_errors.append(f"too few valid examples: {valid} (at least {min_examples} required)")
        if max_examples is not None and self.n_records > max_examples:
            outcome.dataset_errors.append(f"too many examples: {self.n_records} "
                                          f"(the tenant's tier allows {max_examples})")
        return outcome


def validate_examples(frame: pl.DataFrame, min_examples: int = 1, max_examples: int | None = None) -> ValidationOutcome:
    validator = RowValidator()
    validator.add(frame)
    return validator.outcome(min_examples, max_examples)


def _row_errors(frame: pl.DataFrame, failure_cases: pl.DataFrame, first_shape: dict[str, str]) -> list[RowError]:
    errors = []
    order = {key: i for i, key in enumerate(_MESSAGES)}
    cases = failure_cases.filter(pl.col("index").is_not_null()).to_dicts()
    cases.sort(key=lambda c: (c["index"], order.get((c["column"], c["check"]), len(order))))
    for case in cases:
        row = frame.row(case["index"], named=True)
        field_name, template = _MESSAGES.get((case["column"], case["check"]),
                                             (case["column"], f"failed {case['check']}"))
        message = template.format(value=row.get(case["column"]), first_shape=first_shape.get(row["source_file"]))
        if field_name is None:
            field_name, message = message.split(FIELD_SEPARATOR, 1)
        elif field_name.startswith("messages") and row.get("shape") in _CONVERSATION_FIELD:
            field_name = _CONVERSATION_FIELD[row["shape"]] + field_name.removeprefix("messages")
        errors.append(RowError(row["source_file"], row["line"], field_name, message))
    return errors
