"""The vectorized MinHash: unbiased estimates, and no false alarms on templated data."""

import json
import random

import numpy as np
import polars as pl

from ftpipe.data.minhash import NearDuplicateFinder, exact_jaccard, signatures
from ftpipe.data.quality import data_warnings


def test_signature_agreement_estimates_the_shingle_jaccard():
    rng = random.Random(0)
    words = "a b c d e f g h i j k l m n o p q r s t".split()
    first = [" ".join(rng.choice(words) for _ in range(30)) for _ in range(300)]
    second = []
    for text in first:  # an edited copy: a few words replaced somewhere
        w = text.split()
        at = rng.randrange(28)
        second.append(" ".join(w[:at] + [rng.choice(words) for _ in range(rng.randrange(1, 6))] + w[at + 3:]))
    a, b = signatures(pl.Series(first)), signatures(pl.Series(second))
    estimate = (a == b).mean(axis=1)
    exact = np.array([exact_jaccard(x, y) for x, y in zip(first, second)])
    assert abs((estimate - exact).mean()) < 0.02  # unbiased
    assert np.abs(estimate - exact).mean() < 0.06  # about the 1/sqrt(64) of 64 hashes


def test_a_near_copy_is_a_candidate_whatever_chunk_it_arrives_in():
    finder = NearDuplicateFinder()
    text = ("Our refund policy allows returns of unused items within thirty days of delivery when you keep the "
            "original receipt and the packaging is undamaged")
    finder.add(pl.Series([text, "something else entirely, about shipping times"]))
    finder.add(pl.Series(["an unrelated question", text + " please"]))
    assert [1 + 2, 0] in finder.candidates().tolist()


def test_templated_rows_that_share_most_words_are_not_reported():
    # Each pair of these has a shingle Jaccard near 0.6: MinHash with 64 hashes estimates some of the
    # 2,000 x 2,000 pairs at 0.7 or more, and only the exact check keeps them out of the report.
    rng = random.Random(3)
    texts, messages = [], []
    for i in range(2_000):
        q = f"Ticket {i}: I have a question about billing for order {rng.randrange(10**6)} placed last week."
        a = (f"Thanks for asking. Your case {rng.randrange(10**6)} is open; "
             f"an agent replies in {rng.randrange(48)} hours.")
        texts.append(f"{q}\n{a}")
        messages.append(json.dumps([{"role": "user", "content": q}, {"role": "assistant", "content": a}]))
    finder = NearDuplicateFinder()
    finder.add(pl.Series(texts))
    assert len(finder.candidates()) > 0  # the estimate alone would have raised false alarms
    frame = pl.DataFrame({"source_file": "t.jsonl", "line": range(1, 2_001), "problem": None, "role": "train",
                          "messages": messages}, schema_overrides={"problem": pl.String})
    assert "near_duplicates" not in {w.kind for w in data_warnings(frame)}


def test_candidates_are_confirmed_in_one_pass_over_the_examples_fed_in_chunks():
    from ftpipe.data.quality import near_duplicates, row_features, with_text

    base = "the quick brown fox jumps over the lazy dog near the river bank at dawn"
    conversations = [base, "an unrelated question about invoices", base + " today", "totally different words here",
                     base + " again today", "well " + base]
    rows = [json.dumps([{"role": "user", "content": "q"}, {"role": "assistant", "content": c}]) for c in conversations]
    frame = pl.DataFrame({"source_file": "t.jsonl", "line": range(1, 8), "role": "train",
                          "messages": rows[:2] + [None] + rows[2:],  # line 3 did not parse: not a row of features
                          "problem": [None, None, "invalid JSON", None, None, None, None]})
    features = row_features(with_text(frame))
    # Rows 2, 4 and 5 each against row 0; row 4 also against row 2 and row 1 (no match).
    candidates = np.array([[2, 0], [4, 0], [4, 1], [4, 2], [5, 0], [5, 1]])
    chunks = [frame.slice(i, 2) for i in range(0, frame.height, 2)]
    warning = near_duplicates(features, candidates, chunks)
    assert warning.count == 3
    assert warning.locations == ["t.jsonl line 4 ~ t.jsonl line 1", "t.jsonl line 6 ~ t.jsonl line 1",
                                 "t.jsonl line 7 ~ t.jsonl line 1"]
    assert near_duplicates(features, np.array([[3, 1], [5, 3]]), chunks) is None  # estimates, not matches
