"""Each warning kind, with counts and line numbers, and secrets never echoed in full."""

import json
import re
import time

import polars as pl
import pytest

from ftpipe import synthetic
from ftpipe.data import pii
from ftpipe.data.pii import MAX_FINDINGS, find_pii, mask
from ftpipe.data.pipeline import load_examples
from ftpipe.data.preflight import run_preflight
from ftpipe.data.quality import data_warnings
from ftpipe.tenants import PoolConfig


def _chat(q: str, a: str) -> dict:
    return {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}


def _warnings(tmp_path, rows, eval_rows=None) -> dict:
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = {"train": tmp_path / "train.jsonl"}
    if eval_rows:
        (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in eval_rows))
        files["eval"] = tmp_path / "eval.jsonl"
    return {w.kind: w for w in data_warnings(load_examples(files, 0.1))}


def _distinct(n: int) -> list[dict]:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    return [_chat(f"Question {i}: tell me about {words[i % 10]} and {words[(i * 3) % 10]} {i}",
                  f"Answer {i} about {words[(i * 7) % 10]} in a sentence of usual length {i * 13}.") for i in range(n)]


def test_a_clean_dataset_has_no_warnings(tmp_path):
    assert _warnings(tmp_path, _distinct(40)) == {}


def test_exact_duplicates_are_grouped_with_their_lines(tmp_path):
    rows = _distinct(10)
    rows += [rows[2], rows[2], rows[5]]
    w = _warnings(tmp_path, rows)["exact_duplicates"]
    assert w.count == 3 and w.locations == ["train.jsonl lines 3, 11, 12", "train.jsonl lines 6, 13"]


def test_near_duplicates_are_found_by_minhash(tmp_path):
    base = ("Our refund policy allows returns of unused items within thirty days of delivery when you keep the "
            "original receipt and the packaging is undamaged")
    rows = _distinct(10) + [_chat(base, "Understood."), _chat(base + " please", "Understood.")]
    w = _warnings(tmp_path, rows)["near_duplicates"]
    assert w.count == 1 and w.locations == ["train.jsonl line 12 ~ train.jsonl line 11"]


@pytest.mark.parametrize("text, kind", [
    ("write to jane.doe@example.org", "email"),
    ("card 4111 1111 1111 1111 please", "card_number"),
    ("IBAN DE89 3704 0044 0532 0130 00", "iban"),
    ("my ssn is 123-45-6789", "ssn"),
    ("call me at (415) 555-0100", "phone"),
    ("key sk-proj0123456789abcdefghijKLMNOP", "secret"),
    ("aws AKIAIOSFODNN7EXAMPLE", "secret"),
])
def test_each_pii_kind_is_found_and_masked(text, kind):
    found = find_pii(text)
    assert [k for k, _ in found] == [kind]
    secret = text.split()[-1] if kind != "phone" else "555-0100"
    assert secret not in found[0][1] and "chars)" in found[0][1]


def test_numbers_that_fail_their_checksum_are_not_pii():
    assert find_pii("order 4111 1111 1111 1112 and IBAN DE89 3704 0044 0532 0130 01, 30 days") == []


MiB = 1 << 20
# A megabyte (the most one record holds) of the text that costs each pattern most: runs that a backtracking
# pattern would scan again from each of their positions, and candidates that need their checksum checked.
HOSTILE_TEXTS = {
    "email, a run of local-part characters": lambda: "a" * MiB + " a@b.co",  # 40,000 of them took 3.8 s
    "email, at signs": lambda: "a@" * (MiB // 2),
    "email, dots before an at sign": lambda: "a." * (MiB // 2) + "@",
    "email, a domain without a dot": lambda: "a@" + "b" * MiB,
    "card, a digit run": lambda: "1" * MiB,
    "card and phone, digits and spaces": lambda: "1 " * (MiB // 2),
    "card, digits and dashes": lambda: "1-" * (MiB // 2),
    "card, valid numbers": lambda: "4111 1111 1111 1111 " * (MiB // 20),
    "ssn, almost": lambda: "123-45-" * (MiB // 7),
    "phone, almost": lambda: "+1 415 " * (MiB // 7),
    "phone, parentheses": lambda: "(\n" * (MiB // 2),
    "iban, almost": lambda: "AB12 " * (MiB // 5),
    "iban, valid numbers": lambda: "DE89 3704 0044 0532 0130 00 " * (MiB // 28),
    "secret, a key that never ends": lambda: "sk-" + "a" * MiB + "é",
    "secret, dashes": lambda: "sk-" + "-" * MiB,
    "secret, github": lambda: "ghp_" + "a" * MiB + "_",
    "secret, slack": lambda: "xoxb-" + "-" * MiB,
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TEXTS))
def test_finding_pii_takes_linear_time_on_a_megabyte_of_hostile_text(case):
    text = HOSTILE_TEXTS[case]()
    # CPU time, not wall time: another process sharing the cores (a CI run beside it) must not fail the test.
    start = time.process_time()
    find_pii(text)
    # Under half a second here; the backtracking email pattern took half an hour on the first case.
    assert time.process_time() - start < 2.0


@pytest.mark.parametrize("text", ["a@b.co.c@d.co", "a@b.cox+y@mail.example.com", "x a@b.co,c@d.co _a@b.co.",
                                  "a@b@c.de", "@@a.b@c.de.f@g.hi", "a.b.c@d.e.fg.hi@j.kl", "é1+%@x.yz"])
def test_the_linear_email_search_finds_what_the_pattern_finds(text):
    assert [m.span() for m in pii._emails(text)] == [m.span() for m in re.finditer(pii._EMAIL.pattern, text)]


def test_a_text_is_searched_up_to_max_findings():
    assert len(find_pii(" ".join(f"user{i}@example.com" for i in range(MAX_FINDINGS + 500)))) == MAX_FINDINGS


def test_pii_warning_names_lines_and_never_echoes_a_secret(tmp_path):
    secret = "sk-proj0123456789abcdefghijKLMNOP"
    rows = _distinct(10) + [_chat(f"my key is {secret}", "Please rotate it.")]
    w = _warnings(tmp_path, rows)["pii"]
    assert w.locations == ["train.jsonl line 11 (secret)"]
    assert secret not in str(w) and all(secret not in s for s in w.samples)
    assert w.samples == [f"train.jsonl line 11: secret {mask(secret)}"]


def test_length_outliers(tmp_path):
    rows = _distinct(40) + [_chat("Summarize this: " + "lorem ipsum " * 300, "Done.")]
    w = _warnings(tmp_path, rows)["length_outliers"]
    assert w.locations == ["train.jsonl line 41"]


def test_overlap_between_training_and_evaluation_files(tmp_path):
    train = _distinct(20)
    evals = [_chat(train[4]["messages"][0]["content"], "A different answer."), _chat("Something new?", "Yes.")]
    w = _warnings(tmp_path, train, evals)["train_eval_overlap"]
    assert w.count == 1 and w.locations == ["eval.jsonl line 1"]


def _tokenized(n_trainable: list[int], learns_eos: list[bool]) -> pl.DataFrame:
    n = len(n_trainable)
    return pl.DataFrame({"source_file": ["t.jsonl"] * n, "line": list(range(1, n + 1)), "n_tokens": [20] * n,
                         "n_trainable": n_trainable, "learns_eos": learns_eos})


def test_empty_label_masks_and_missing_eos_are_warned_by_the_preflight():
    pool = PoolConfig(gpu="cpu", gpu_memory_gb=8, peak_tflops=1.0, mfu=1.0, price_per_gpu_hour=2.0)
    result = run_preflight(_tokenized([5, 0, 7, 6], [True, False, False, True]), 512, 2.0, 10**6, "cpu", pool)
    warnings = {w.kind: w for w in result.warnings}
    assert warnings["empty_label_mask"].locations == ["t.jsonl line 2"]
    assert warnings["no_eos"].locations == ["t.jsonl line 3"]
    assert result.passed and result.stats["train_tokens_x_epochs"] == 160
    assert result.stats["estimated_gpu_hours"] == pytest.approx(6 * 10**6 * 160 / 1e12 / 3600, rel=1e-2)


def test_a_template_that_never_emits_eos_is_caught_on_real_tokens(tiny_model):
    """A base model whose template drops the end-of-turn token would never learn to stop."""
    from transformers import AutoTokenizer

    from ftpipe.data.tokenize import tokenize_frame

    tokenizer = AutoTokenizer.from_pretrained(tiny_model.path)
    template = tokenizer.chat_template.replace("<|end|>{% endgeneration %}", "{% endgeneration %}")
    assert template != tokenizer.chat_template
    tokenizer.chat_template = template
    frame = pl.DataFrame({"source_file": "t.jsonl", "line": [1, 2],
                          "messages": [json.dumps(c) for c in synthetic.acme_support(2)]})
    table = tokenize_frame(tokenizer, frame, 512)
    assert table["learns_eos"].to_list() == [False, False]
    pool = PoolConfig(gpu="cpu", gpu_memory_gb=8, peak_tflops=1.0)
    assert [w.kind for w in run_preflight(table, 512, 1, 1, "cpu", pool).warnings] == ["no_eos"]
