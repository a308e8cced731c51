"""The validation report a tenant reads: markdown for people, JSON for tools."""

from __future__ import annotations

import json
from dataclasses import asdict

from ftpipe.data.pipeline import ExamplesCheck
from ftpipe.data.preflight import Preflight

MAX_LISTED = 50


def _row_errors(check: ExamplesCheck, preflight: Preflight | None) -> tuple[list, int]:
    """The row errors kept for the report, and how many there are in all (structure and pre-flight)."""
    kept = check.outcome.errors + (preflight.errors if preflight else [])
    return kept, check.outcome.n_row_errors + (preflight.n_errors if preflight else 0)


def report_json(check: ExamplesCheck, preflight: Preflight | None = None) -> str:
    return json.dumps(report_dict(check, preflight), indent=2)


def report_dict(check: ExamplesCheck, preflight: Preflight | None = None) -> dict:
    errors, n_row_errors = _row_errors(check, preflight)
    warnings = check.warnings + (preflight.warnings if preflight else [])
    return {
        "passed": check.outcome.passed and (preflight is None or preflight.passed),
        "stage": "preflight" if preflight else "structure",
        "n_records": check.outcome.n_examples,
        "n_row_errors": n_row_errors,
        "dataset_errors": check.outcome.dataset_errors,
        "errors": [asdict(e) for e in errors],
        "warnings": [asdict(w) for w in warnings],
        "stats": check.stats,
        "preflight": preflight.stats if preflight else None,
        "training_plan": preflight.plan if preflight else None,
    }


def _table(rows: dict) -> list[str]:
    return ["| statistic | value |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in rows.items()] + [""]


def report_markdown(check: ExamplesCheck, title: str, preflight: Preflight | None = None) -> str:
    errors, n_row_errors = _row_errors(check, preflight)
    warnings = check.warnings + (preflight.warnings if preflight else [])
    n_errors = n_row_errors + len(check.outcome.dataset_errors)
    verdict = "passed" if not n_errors else f"**failed** with {n_errors} error(s)"
    stage = "structure and pre-flight" if preflight else "structure (the pre-flight runs once this passes)"
    lines = [f"# Validation of {title}", "", f"Validation {verdict}; {check.outcome.n_examples} records read; "
             f"checked: {stage}.", ""]
    lines += _table(check.stats)
    if preflight:
        lines += ["## Pre-flight (rendered through the base model's chat template)", ""] + _table(preflight.stats)
    if preflight and preflight.plan:
        lines += ["## Training plan", "", "| hyperparameter | value | from | why |", "|---|---:|---|---|"]
        lines += [f"| {r['name']} | {r['shown']} | {r['source']} | {r['reason']} |" for r in preflight.plan] + [""]
    if check.outcome.dataset_errors:
        lines += ["## Dataset errors", ""] + [f"- {e}" for e in check.outcome.dataset_errors] + [""]
    if errors:
        lines += ["## Row errors", "", "| file | line | field | problem |", "|---|---:|---|---|"]
        lines += [f"| {e.source_file} | {e.line} | {e.field} | {e.message} |" for e in errors[:MAX_LISTED]]
        if n_row_errors > MAX_LISTED:
            lines.append(f"\n... and {n_row_errors - MAX_LISTED} more (validation.json lists the first {len(errors)})")
        lines.append("")
    if warnings:
        lines += ["## Warnings", ""] + [f"- **{w.kind}**: {w}" for w in warnings]
        samples = [s for w in warnings for s in w.samples]
        if samples:
            lines += ["", "Masked samples:", ""] + [f"- {s}" for s in samples[:MAX_LISTED]]
    return "\n".join(lines) + "\n"
