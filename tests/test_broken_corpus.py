"""One broken file per error kind (tests/data/broken/): each is refused with the exact file, line and field,
before any tokenization; only the too-long example needs the tokenizer, and nothing ever trains."""

from pathlib import Path

import pytest

from ftpipe.data.pipeline import validate_files
from ftpipe.tenants import PoolConfig

BROKEN = Path(__file__).parent / "data" / "broken"
POOL = PoolConfig(gpu="cpu", gpu_memory_gb=8, peak_tflops=0.046, mfu=1.0)

EXPECTED = {
    "invalid_json.jsonl": [(3, "record", "invalid JSON: Expecting ',' delimiter at column 64")],
    "not_an_object.jsonl": [(2, "record", "expected a JSON object, got list")],
    "missing_key.jsonl": [(2, "record", "unrecognized shape with keys ['prompt']: the 'prompt_completion' shape "
                                        "(completion+prompt) lacks 'completion' (name your key for it in the "
                                        "manifest's columns:)")],
    "alpaca_typo.jsonl": [(2, "record", "unrecognized shape with keys ['input', 'instruction', 'outptu']: the "
                                        "'alpaca' shape (instruction+output) lacks 'output' (is \"outptu\" it? then "
                                        "rename it, or map it in the manifest's columns:)")],
    "unknown_key.jsonl": [(2, "record", "unknown keys: source")],
    "kto_unpaired.jsonl": [(1, "record", "unpaired preference rows (prompt/completion/label, as KTO trains on) are "
                                         "not supported: pair each prompt's preferred and rejected completion as "
                                         "prompt/chosen/rejected and set 'objective: dpo'"),
                           (2, "record", "unpaired preference rows (prompt/completion/label, as KTO trains on) are "
                                         "not supported: pair each prompt's preferred and rejected completion as "
                                         "prompt/chosen/rejected and set 'objective: dpo'")],
    "bad_role.jsonl": [(2, "messages[0].role", "unknown role \"customer\" (allowed: system, user, assistant, tool); "
                                               "did you mean \"user\"? (or map it in the manifest's roles:)")],
    "sharegpt_bad_speaker.jsonl": [(2, "conversations[1].from", "unknown role \"bot\" (allowed: human, user, gpt, "
                                                                "assistant, system, observation, function, tool, "
                                                                "function_call); did you mean \"assistant\"? (or map "
                                                                "it in the manifest's roles:)")],
    "tool_call_bad_arguments.jsonl": [(2, "messages[1].tool_calls[0].function.arguments",
                                       "not valid JSON: Expecting ',' delimiter at column 17")],
    "tool_call_unknown_function.jsonl": [(2, "messages[1].tool_calls[0].function.name",
                                          "\"get_time\" is not among the example's tools (get_weather)")],
    "image_content_part.jsonl": [(2, "messages[0].content[1].type", "\"image_url\" parts are not supported: the "
                                                                    "base models are text-only; keep the text parts "
                                                                    "only")],
    "empty_content.jsonl": [(3, "messages", "1 message(s) with empty content")],
    "no_assistant.jsonl": [(2, "messages", "no assistant turn")],
    "roles_out_of_order.jsonl": [(2, "messages[].role", "roles out of order: optional system first, then user, "
                                                        "..., ending with assistant")],
    "mixed_shapes.jsonl": [(3, "record", "shape 'prompt_completion' differs from the file's first example (chat); "
                                         "one shape per file")],
    "quoted_newlines.csv": [(4, "messages", "1 message(s) with empty content")],
    "bad_weight.jsonl": [(2, "messages[1].weight", "0.5 is not 0 or 1")],
    "weight_on_user.jsonl": [(3, "messages[0].weight", 'only assistant messages take a weight, not "user"')],
}


def _validate(name: str, tiny_model, min_examples: int = 1, max_len: int = 512):
    return validate_files({"train": BROKEN / name}, tiny_model.path, tiny_model.num_parameters, max_len=max_len,
                          epochs=1, pool_name="cpu", pool=POOL, min_examples=min_examples)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_error_names_file_line_and_field_and_stops_before_tokenization(name, tiny_model):
    result = _validate(name, tiny_model)
    errors = [(e.source_file, e.line, e.field, e.message) for e in result.check.outcome.errors]
    assert errors == [(name, line, field, message) for line, field, message in EXPECTED[name]]
    assert result.preflight is None and not result.passed


@pytest.mark.parametrize("name, line, column", [("not_utf8.jsonl", 2, 16), ("not_utf8.csv", 5, 5)])
def test_undecodable_bytes_name_the_likely_encoding(tiny_model, name, line, column):
    result = _validate(name, tiny_model)
    (error,) = result.check.outcome.errors
    assert (error.source_file, error.line, error.field) == (name, line, "record")
    assert error.message.startswith(f"not UTF-8 at column {column}: the file looks like cp125")
    assert result.preflight is None


def test_too_few_examples_is_a_dataset_error(tiny_model):
    result = _validate("invalid_json.jsonl", tiny_model, min_examples=100)
    assert "too few valid examples: 3 (at least 100 required)" in result.check.outcome.dataset_errors


def test_too_long_after_the_chat_template_is_an_error_from_the_preflight(tiny_model):
    result = _validate("too_long.jsonl", tiny_model, max_len=256)
    assert result.check.outcome.passed and result.preflight is not None and not result.passed
    (error,) = result.preflight.errors
    assert (error.source_file, error.line, error.field) == ("too_long.jsonl", 2, "messages")
    assert error.message.endswith("tokens after the chat template; max_seq_len is 256")
    assert result.preflight.stats["too_long"] == 1
