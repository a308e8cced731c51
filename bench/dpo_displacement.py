"""Likelihood displacement in DPO, with and without the chosen answer's NLL in the loss (``dpo_sft_weight``).

Trains the tiny model on ``synthetic.acme_preferences`` (the same answer, upbeat or plain) as
``tests/test_dpo.py`` does, once with pure DPO (weight 0) and once with the platform's default (weight 1), and
prints for each the held-out share of pairs where the chosen answer is the likelier and the mean
log-likelihood of the chosen answers, beside the base model's.

    .venv/bin/python -m bench.dpo_displacement
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("FTPIPE_MODEL_CACHE", str(REPO_ROOT / ".cache" / "models"))


def _pairs(tokenizer, rows):
    from ftpipe import synthetic
    from ftpipe.data.tokenize import tokenize_preferences

    return tokenize_preferences(tokenizer, synthetic.preference_frame(rows), 512)


def preferences(model, table) -> tuple[float, float]:
    """(share of pairs where the chosen answer is the likelier, mean log-likelihood of the chosen answers)."""
    import torch

    wins, chosen_total = 0, 0.0
    with torch.no_grad():
        for prompt, chosen, rejected in table.select("prompt_ids", "chosen_ids", "rejected_ids").iter_rows():
            scores = []
            for completion in (chosen, rejected):
                logits = model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1:-1]
                scores.append(torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None]).sum().item())
            wins += scores[0] > scores[1]
            chosen_total += scores[0]
    return wins / table.height, chosen_total / table.height


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)

    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ftpipe import synthetic
    from ftpipe.basemodel.registry import BaseModelRegistry
    from ftpipe.basemodel.tiny import TINY_MODEL_ID
    from ftpipe.training.runner import run_training
    from ftpipe.training.spec import TrainJobSpec

    base_path = BaseModelRegistry(os.environ["FTPIPE_MODEL_CACHE"]).resolve(TINY_MODEL_ID).path
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    held_out = _pairs(tokenizer, synthetic.acme_preferences(40, seed=99))
    accuracy, chosen = preferences(AutoModelForCausalLM.from_pretrained(base_path), held_out)
    print(f"base model:            preference accuracy {accuracy:.2f}, "
          f"chosen answers' log-likelihood {chosen:.1f} nats")
    with tempfile.TemporaryDirectory() as tmp:
        _pairs(tokenizer, synthetic.acme_preferences(96, seed=5)).write_parquet(Path(tmp) / "pairs.parquet")
        for weight in (0.0, 1.0):
            spec = TrainJobSpec(base_model_path=base_path, train_file=str(Path(tmp) / "pairs.parquet"),
                                output_dir=str(Path(tmp) / f"w{weight}"), objective="dpo", learning_rate=2e-3,
                                max_steps=40, micro_batch_size=8, logging_steps=20, dpo_sft_weight=weight)
            result = run_training(spec)
            tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), result.adapter_dir)
            accuracy, chosen = preferences(tuned, held_out)
            print(f"dpo_sft_weight {weight:g}:     preference accuracy {accuracy:.2f}, "
                  f"chosen answers' log-likelihood {chosen:.1f} nats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
