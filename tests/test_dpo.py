"""DPO: preference pairs tokenized once through the chat template, trained with TRL on the tiny model."""


import pytest
import torch

from ftpipe import synthetic
from ftpipe.data.tokenize import tokenize_preferences
from ftpipe.training.runner import run_training
from tests.helpers.training import tiny_spec

pytestmark = pytest.mark.slow


def test_pairs_split_at_the_generation_prompt_and_end_at_end_of_turn(tokenizer):
    row = synthetic.acme_preferences(1)[0]
    table = tokenize_preferences(tokenizer, synthetic.preference_frame([row]), 512)
    prompt, chosen = table["prompt_ids"][0].to_list(), table["chosen_ids"][0].to_list()
    full = tokenizer.apply_chat_template(row["prompt"] + row["chosen"], tokenize=True, return_dict=True)["input_ids"]
    assert prompt + chosen == list(full)
    assert tokenizer.decode(prompt).endswith("<|assistant|>\n")
    assert tokenizer.decode(chosen) == row["chosen"][0]["content"] + "<|end|>"
    assert table["rejected_ids"][0].to_list()[-1] == tokenizer.eos_token_id
    assert table["n_tokens"][0] == max(len(full), len(prompt) + len(table["rejected_ids"][0]))


def _preferences(model, tokenizer, rows) -> tuple[float, float]:
    """(share of pairs where the chosen answer is the likelier, mean log-likelihood of the chosen answers)."""
    table = tokenize_preferences(tokenizer, synthetic.preference_frame(rows), 512)
    wins, chosen_total = 0, 0.0
    with torch.no_grad():
        for prompt, chosen, rejected in table.select("prompt_ids", "chosen_ids", "rejected_ids").iter_rows():
            scores = []
            for completion in (chosen, rejected):
                ids = torch.tensor([prompt + completion])
                logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1]
                scores.append(torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None]).sum().item())
            wins += scores[0] > scores[1]
            chosen_total += scores[0]
    return wins / table.height, chosen_total / table.height


@pytest.mark.quality
def test_dpo_trains_saves_reloads_and_prefers_the_chosen_answers(tiny_model, tokenizer, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    tokenize_preferences(tokenizer, synthetic.preference_frame(synthetic.acme_preferences(96, seed=5)), 256) \
        .write_parquet(tmp_path / "pairs.parquet")
    spec = tiny_spec(tiny_model, tmp_path / "pairs.parquet", tmp_path / "out", objective="dpo", learning_rate=2e-3,
                     max_steps=40, micro_batch_size=8, logging_steps=4, save_steps=20)
    result = run_training(spec)
    assert result.outcome == "completed" and result.steps == 40
    losses = [loss for _, loss in result.loss_history]
    assert losses[-1] < losses[0] / 2
    assert (tmp_path / "out" / "checkpoints" / "checkpoint-40").is_dir()

    held_out = synthetic.acme_preferences(40, seed=99)
    base = AutoModelForCausalLM.from_pretrained(tiny_model.path)
    accuracy_before, chosen_before = _preferences(base, tokenizer, held_out)
    tuned = PeftModel.from_pretrained(base, result.adapter_dir)
    accuracy_after, chosen_after = _preferences(tuned, tokenizer, held_out)
    # The base model prefers the rejected style; the tuned adapter prefers the chosen one, and (thanks to the
    # chosen answer's NLL in the loss) is more likely to say it, not less.
    assert accuracy_before <= 0.1 and accuracy_after >= 0.9
    assert chosen_after > chosen_before
