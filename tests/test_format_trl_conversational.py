"""TRL's conversational prompt-completion: ``prompt`` and ``completion`` as lists of messages (the format of
``SFTTrainer``'s prompt-completion datasets); the completion is what is learned."""

import pytest

from tests.helpers.formats import learned_text, tokenized, train_a_few_steps, validate, write_rows

ROWS = [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Stock of item {i}?"}],
         "completion": [{"role": "assistant", "content": f"{i * 3} units."}]} for i in range(16)]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_conversational_prompt_completion_reads_as_one_conversation(tmp_path, suffix, tokenizer):
    result = validate(write_rows(tmp_path / f"pc{suffix}", ROWS))
    assert result.check.outcome.passed, result.errors
    assert result.conversations()[2] == [*ROWS[2]["prompt"], *ROWS[2]["completion"]]
    ids, mask = tokenized(tokenizer, result).select("input_ids", "assistant_masks").row(2)
    assert learned_text(tokenizer, ids, mask) == ["6 units.<|end|>"]


def test_conversational_prompt_completion_trains(tiny_model, tokenizer, tmp_path):
    train_a_few_steps(tiny_model, tokenizer, validate(write_rows(tmp_path / "pc.jsonl", ROWS)), tmp_path)


@pytest.mark.parametrize("bad, error", [
    ({"prompt": [{"role": "user", "content": "q"}], "completion": [{"role": "robot", "content": "a"}]},
     'pc.jsonl line 2, completion[0].role: unknown role "robot" (allowed: system, user, assistant, tool)'),
    ({"prompt": [{"role": "user", "content": "q"}], "completion": {"role": "assistant", "content": "a"}},
     "pc.jsonl line 2, completion: expected a string, got object"),
    ({"prompt": ["q"], "completion": "a"},
     "pc.jsonl line 2, prompt[0]: expected a message (an object with 'role' and 'content'), got string"),
])
def test_a_broken_conversational_row_is_named(tmp_path, bad, error):
    result = validate(write_rows(tmp_path / "pc.jsonl", [ROWS[0], bad]))
    assert result.errors == [error]
