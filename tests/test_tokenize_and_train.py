import json

import polars as pl
import pytest

from ftpipe import synthetic
from ftpipe.data.tokenize import tokenize_frame, tokenize_messages
from ftpipe.training.runner import run_training
from tests.helpers.training import heldout_loss, tiny_spec


def test_mask_covers_exactly_the_assistant_answer_and_its_end_of_turn(tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"},
                {"role": "assistant", "content": "Hello! How can I help?"}]
    ids, mask, truncated = tokenize_messages(tokenizer, messages, max_len=512)
    assert ids[0] == tokenizer.bos_token_id and not truncated
    learned = [i for i, m in zip(ids, mask) if m]
    assert tokenizer.decode(learned) == "Hello! How can I help?<|end|>"
    assert learned[-1] == tokenizer.eos_token_id  # the model learns to stop


def test_truncation_is_reported(tokenizer):
    ids, mask, truncated = tokenize_messages(tokenizer, synthetic.acme_support(1)[0], max_len=8)
    assert len(ids) == len(mask) == 8 and truncated


@pytest.mark.quality
def test_lora_sft_lowers_heldout_loss_and_saves_a_peft_adapter(tiny_model, tokenizer, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    train = synthetic.acme_support(120, seed=1)
    frame = pl.DataFrame({"source_file": "t.jsonl", "line": list(range(1, 121)),
                          "messages": [json.dumps(c) for c in train]})
    tokenize_frame(tokenizer, frame, 256).write_parquet(tmp_path / "train.parquet")
    seen = []
    result = run_training(tiny_spec(tiny_model, tmp_path / "train.parquet", tmp_path / "out", epochs=4,
                                    logging_steps=10), sink=seen.append)
    assert result.steps == 60 and len(seen) == 6
    assert {"loss", "learning_rate", "grad_norm", "tokens_per_second"} <= set(seen[0])
    adapter = tmp_path / "out" / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert (adapter / "adapter_model.safetensors").stat().st_size > 0
    assert config["peft_type"] == "LORA" and config["r"] == 16 and not config.get("use_dora")

    heldout = synthetic.acme_support(24, seed=99)
    base = AutoModelForCausalLM.from_pretrained(tiny_model.path)
    base_loss = heldout_loss(base, tokenizer, heldout)
    tuned = PeftModel.from_pretrained(base, str(adapter))
    tuned_loss = heldout_loss(tuned, tokenizer, heldout)
    assert tuned_loss < 0.8 * base_loss, (base_loss, tuned_loss)


def test_batched_tokenization_equals_one_example_at_a_time(tokenizer, monkeypatch):
    # The batched path renders and encodes on its own (render, then the Rust encoder in a thread); the
    # one-at-a-time path is transformers' apply_chat_template. Several small batches, so that rendering
    # overlaps encoding; multi-turn, system, unicode and weight-0 answers.
    monkeypatch.setattr("ftpipe.data.tokenize.BATCH", 7)
    conversations = synthetic.acme_support(40) + [
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! " * 50}],
        [{"role": "system", "content": "Réponds en français. 日本語も"}, {"role": "user", "content": "Ça va ?"},
         {"role": "assistant", "content": "Oui, très bien — merci ! 🙂"}],
        [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "3", "weight": 0},
         {"role": "user", "content": "Sure?"}, {"role": "assistant", "content": "2", "weight": 1}],
        [{"role": "user", "content": "<|end|> is not a control token here"}, {"role": "assistant", "content": "ok"}],
    ]
    frame = pl.DataFrame({"source_file": "t.jsonl", "line": list(range(1, len(conversations) + 1)),
                          "messages": [json.dumps(c, ensure_ascii=False) for c in conversations]})
    table = tokenize_frame(tokenizer, frame, max_len=64)
    for row, conv in zip(table.iter_rows(named=True), conversations):
        ids, mask, truncated = tokenize_messages(tokenizer, conv, 64)
        assert (row["input_ids"], row["assistant_masks"], row["truncated"]) == (ids, mask, truncated)
    assert table["truncated"].to_list()[40] and table["n_tokens"].to_list()[40] > 64
