"""Write lm-eval tasks (YAML + JSONL) for a tenant's held-out examples and for the platform's golden set.

Demonstrations (SFT): each held-out conversation becomes one generation problem: the conversation up to its
last assistant turn is the prompt, that turn is the target, scored by exact match.

Preference pairs (DPO): each pair becomes a two-way multiple choice between the chosen and the rejected
answer, scored by log-likelihood; its accuracy is the share of pairs where the model prefers the chosen one.

Perplexity: the log-likelihood of each reference answer (ending in the end-of-turn token, as training saw
it) given its prompt, aggregated per token over the whole set, so that long answers weigh by their length.

Prompts are rendered by lm-eval through the model's own chat template, with the conversation's system message
as the system instruction.
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
        # The answer scored is the last one training would learn from: a weight-0 answer is not a target, nor is
        # a turn that only calls tools (no text to compare).
        learned = [i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("weight", 1) != 0
                   and isinstance(m.get("content"), str) and m["content"].strip()]
        if not learned:
            continue
        last = learned[-1]
        users = [m for m in messages[:last] if m["role"] == "user"]
        if not users:
            continue  # plain-text examples have no prompt to answer
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        docs.append({"system": system, "prompt": users[-1]["content"], "target": messages[last]["content"]})
    return docs


def preference_docs(pairs: list[tuple[list[dict], list[dict], list[dict]]]) -> list[dict]:
    """(prompt, chosen, rejected) message lists -> multiple-choice docs with the chosen answer first (gold 0)."""
    docs = []
    for prompt, chosen, rejected in pairs:
        users = [m for m in prompt if m["role"] == "user"]
        if not users:
            continue
        system = next((m["content"] for m in prompt if m["role"] == "system"), "")
        # Each answer as training saw it: its content, then the end-of-turn token.
        answers = ["".join(m["content"] for m in side) + EOS for side in (chosen, rejected)]
        docs.append({"system": system, "prompt": users[-1]["content"], "choices": answers, "gold": 0})
    return docs


def answer_docs(docs: list[dict]) -> list[dict]:
    """Generation or preference docs -> docs whose ``answer`` is the reference answer with its end of turn."""
    out = []
    for doc in docs:
        answer = doc["choices"][doc["gold"]] if "choices" in doc else doc["target"] + EOS
        out.append({"system": doc["system"], "prompt": doc["prompt"], "answer": answer})
    return out


def _write_docs(task_dir: Path, task_name: str, docs: list[dict]) -> Path:
    task_dir.mkdir(parents=True, exist_ok=True)
    data_file = task_dir / f"{task_name}.jsonl"
    data_file.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
    return data_file


def _local_json_task(task_name: str, data_file: Path) -> dict:
    """The part of an lm-eval task config that reads a local JSONL file as its test split, offline."""
    return {"task": task_name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data_file)}},
            "test_split": "test", "doc_to_text": "{{prompt}}", "metadata": {"version": 1.0}}


def _main_system(docs: list[dict]) -> str:
    systems = Counter(d["system"] for d in docs)
    return systems.most_common(1)[0][0] if systems else ""


def write_preference_task(task_dir: str | Path, task_name: str, docs: list[dict]) -> str:
    """Write the multiple-choice task and return the system instruction most held-out pairs use."""
    data_file = _write_docs(Path(task_dir), task_name, docs)
    task = {
        **_local_json_task(task_name, data_file),
        "output_type": "multiple_choice",
        "doc_to_choice": "choices",
        "doc_to_target": "gold",
        "target_delimiter": "",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
    }
    (Path(task_dir) / f"{task_name}.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    return _main_system(docs)


def write_holdout_task(task_dir: str | Path, task_name: str, docs: list[dict], max_gen_toks: int = 64) -> str:
    """Write the generation task and return the system instruction most held-out examples use."""
    task_dir = Path(task_dir)
    data_file = _write_docs(task_dir, task_name, docs)
    task = {
        **_local_json_task(task_name, data_file),
        "output_type": "generate_until",
        "doc_to_target": "{{target}}",
        # With a chat template the answer starts a fresh assistant turn: no delimiter before it.
        "target_delimiter": "",
        "generation_kwargs": {"until": [EOS], "do_sample": False, "max_gen_toks": max_gen_toks},
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                         "ignore_case": True, "ignore_punctuation": False}],
    }
    (task_dir / f"{task_name}.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    return _main_system(docs)


# lm-eval resolves ``!function module.name`` against a module file beside the task's YAML.
_HOOKS_MODULE = "ftpipe_lm_eval_hooks"
_HOOKS_SOURCE = "from ftpipe.evaluation.lm_eval_hooks import answer_perplexity  # noqa: F401\n"


def write_perplexity_task(task_dir: str | Path, task_name: str, docs: list[dict], n_tokens: list[int]) -> str:
    """Write the answer-perplexity task over ``answer_docs`` and return the main system instruction.

    ``n_tokens`` counts each answer's tokens with the model's tokenizer: lm-eval hands the per-document
    log-likelihood to the metric, and the token count turns the sum into a per-token perplexity.
    """
    task_dir = Path(task_dir)
    docs = [{**d, "n_tokens": n} for d, n in zip(docs, n_tokens, strict=True)]
    data_file = _write_docs(task_dir, task_name, docs)
    (task_dir / f"{_HOOKS_MODULE}.py").write_text(_HOOKS_SOURCE)
    task = {
        **_local_json_task(task_name, data_file),
        "output_type": "loglikelihood",
        "doc_to_target": "{{answer}}",
        "target_delimiter": "",
        "metric_list": [{"metric": "perplexity", "aggregation": "weighted_perplexity", "higher_is_better": False}],
    }
    text = yaml.safe_dump(task, sort_keys=False)
    text += f"process_results: !function {_HOOKS_MODULE}.answer_perplexity\n"
    (task_dir / f"{task_name}.yaml").write_text(text)
    return _main_system(docs)
