"""The validation report a tenant reads: markdown for people, JSON for tools."""

from __future__ import annotations

import json

from ftpipe.data.schema import ValidationOutcome

MAX_LISTED_ERRORS = 50


def validation_report_json(outcome: ValidationOutcome, stats: dict) -> str:
    return json.dumps({
        "passed": outcome.passed,
        "n_examples": outcome.n_examples,
        "dataset_errors": outcome.dataset_errors,
        "errors": [e.__dict__ for e in outcome.errors],
        "stats": stats,
    }, indent=2)


def validation_report_markdown(outcome: ValidationOutcome, stats: dict, title: str) -> str:
    verdict = "passed" if outcome.passed else f"**failed** with {len(outcome.errors) + len(outcome.dataset_errors)} error(s)"
    lines = [f"# Validation of {title}", "", f"Validation {verdict}; {outcome.n_examples} records read.", ""]
    if stats:
        lines += ["| statistic | value |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in stats.items()] + [""]
    if outcome.dataset_errors:
        lines += ["## Dataset errors", ""] + [f"- {e}" for e in outcome.dataset_errors] + [""]
    if outcome.errors:
        lines += ["## Row errors", "", "| file | line | field | problem |", "|---|---:|---|---|"]
        lines += [f"| {e.source_file} | {e.line} | {e.field} | {e.message} |" for e in outcome.errors[:MAX_LISTED_ERRORS]]
        if len(outcome.errors) > MAX_LISTED_ERRORS:
            lines.append(f"\n... and {len(outcome.errors) - MAX_LISTED_ERRORS} more (see validation.json)")
    return "\n".join(lines) + "\n"
