"""The adapter registry as the operator's CLI prints it."""

from __future__ import annotations

from ftpipe.catalog.adapters import AdapterRecord


def format_adapters(records: list[AdapterRecord]) -> str:
    rows = [("adapter", "status", "base model", "method", "rank", "created")]
    rows += [(r.adapter_id, r.status, r.base_model, r.method, str(r.lora_rank or "-"),
              r.created_at.strftime("%Y-%m-%d %H:%M")) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
