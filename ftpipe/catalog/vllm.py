"""The handoff to a multi-LoRA vLLM fleet: per base model, the promoted adapters and the flags that serve them.

vLLM takes adapters as ``--lora-modules name=path ...`` and must be started with a ``--max-lora-rank`` at least
the largest rank among them (its accepted values are a fixed list, so the rank is rounded up to one of them).
One file pair per base model: ``<base>.json`` for tools, ``<base>.args`` to paste after ``vllm serve <base>``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ftpipe.catalog.adapters import AdapterRecord, AdapterRegistry

VLLM_MAX_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


@dataclass(frozen=True)
class ServingConfig:
    base_model: str
    max_lora_rank: int
    lora_modules: dict[str, str]
    """adapter id -> directory."""

    def args(self) -> list[str]:
        modules = [f"{name}={path}" for name, path in sorted(self.lora_modules.items())]
        return ["--enable-lora", "--max-lora-rank", str(self.max_lora_rank), "--max-loras", str(len(modules)),
                "--lora-modules", *modules]


def serving_configs(records: list[AdapterRecord]) -> list[ServingConfig]:
    by_base: dict[str, list[AdapterRecord]] = {}
    for record in records:
        if record.status == "promoted":
            by_base.setdefault(record.base_model, []).append(record)
    configs = []
    for base, promoted in sorted(by_base.items()):
        rank = max(r.lora_rank or 0 for r in promoted)
        configs.append(ServingConfig(
            base_model=base,
            max_lora_rank=next((v for v in VLLM_MAX_LORA_RANKS if v >= rank), VLLM_MAX_LORA_RANKS[-1]),
            lora_modules={r.adapter_id: r.path for r in promoted},
        ))
    return configs


def write_serving_configs(configs: list[ServingConfig], out_dir: str | Path) -> list[Path]:
    """Replace the directory's files atomically, one base model at a time; stale bases are removed."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for config in configs:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "__", config.base_model)
        for suffix, text in ((".json", json.dumps({"base_model": config.base_model,
                                                    "max_lora_rank": config.max_lora_rank,
                                                    "lora_modules": config.lora_modules}, indent=2)),
                             (".args", " ".join(config.args()) + "\n")):
            tmp = out_dir / f".{stem}{suffix}.tmp"
            tmp.write_text(text)
            tmp.replace(out_dir / f"{stem}{suffix}")
            written.append(out_dir / f"{stem}{suffix}")
    for stale in set(out_dir.glob("*.json")) | set(out_dir.glob("*.args")):
        if stale not in written:
            stale.unlink()
    return written


def rewrite_from_registry(registry: AdapterRegistry, out_dir: str | Path) -> list[ServingConfig]:
    """What every registry change runs: the fleet's files rebuilt from the adapters promoted now."""
    configs = serving_configs(registry.list())
    write_serving_configs(configs, out_dir)
    return configs
