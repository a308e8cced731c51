"""Write an lm-eval task (YAML + JSONL) for a tenant's held-out examples.

Each held-out conversation becomes one generation problem: the conversation up to its last assistant turn is
the prompt, that turn is the target, scored by exact match. The prompt is rendered by lm-eval through the
model's own chat template, with the conversation's system message as the system instruction.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import yaml

from ftpipe.basemodel.chat_template import EOS


def holdout_docs(conversations: list[list[dict]]) -> list[dict]:
    docs = []
    for messages in conversations:
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        users = [m for m in messages[:last] if m["role"] == "user"]
        if not users:
            continue  # plain-text examples have no prompt to answer
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        docs.append({"system": system, "prompt": users[-1]["content"], "target": messages[last]["content"]})
    return docs


def write_holdout_task(task_dir: str | Path, task_name: str, docs: list[dict], max_gen_toks: int = 64) -> str:
    """Write the task files and return the system instruction most held-out examples use."""
    task_dir = Path(task_dir)
    task_dir.mkdir(parents=True, exist_ok=True)
    data_file = task_dir / f"{task_name}.jsonl"
    data_file.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
    task = {
        "task": task_name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{prompt}}",
        "doc_to_target": "{{target}}",
        # With a chat template the answer starts a fresh assistant turn: no delimiter before it.
        "target_delimiter": "",
        "generation_kwargs": {"until": [EOS], "do_sample": False, "max_gen_toks": max_gen_toks},
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                         "ignore_case": True, "ignore_punctuation": False}],
        "metadata": {"version": 1.0},
    }
    (task_dir / f"{task_name}.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    systems = Counter(d["system"] for d in docs)
    return systems.most_common(1)[0][0] if systems else ""
