"""Validation speed and memory: ftpipe vs a plain-Python line loop vs a bare polars read, in one run.

    .venv/bin/python -m bench.validate [--rows 1000000] [--variants ftpipe_full,...] [--repeats 3]

It writes a JSONL file of chat rows (~260 characters, a few with PII, a few duplicates), then times, each in
its own process so that peak RSS is per variant:

- ``plain_loop``: the usual line-by-line checker (the style of the OpenAI cookbook's format checker):
  json.loads, keys, roles, empty content, an assistant turn, duplicates by a set, PII by regex + checksums;
- ``bare_polars``: ``polars.read_ndjson`` of the same file, the floor for any polars pipeline;
- ``ftpipe``: the same structural checks in ftpipe, and no more: vectorized chunks, the pandera model, exact
  duplicates and PII;
- ``ftpipe_full``: what the ``validated_dataset`` asset does, streamed: every error and warning kind
  (near-duplicates by MinHash included) and the normalized examples written to Parquet;
- ``minhash_datasketch`` / ``minhash_ftpipe``: near-duplicates alone over the first 100k examples'
  texts: datasketch's ``MinHash`` + ``MinHashLSH`` per row (what ftpipe did before) vs ftpipe's vectorized
  signatures and banding.

Goals: the structural checks at least 3x the plain loop and within 1.5x of the bare read; peak RSS under 4 GB
for 1M and 10M rows. With ``--shapes chat,sharegpt,alpaca,...`` it times the structural checks on the same rows
written in each accepted format instead. Results go to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

ROLES = {"system", "user", "assistant", "tool"}


SHAPES = ("chat", "sharegpt", "alpaca", "content_parts", "tool_calls", "json_array")
"""``--shapes``: the same rows written in each format (``json_array``: the chat rows as one JSON array)."""
_TOOLS = [{"type": "function", "function": {"name": "open_case", "parameters": {
    "type": "object", "properties": {"topic": {"type": "string"}}}}}]


def in_shape(row: dict, shape: str) -> dict:
    system, user, assistant = (m["content"] for m in row["messages"])
    if shape in ("chat", "json_array"):
        return row
    if shape == "sharegpt":
        return {"system": system,
                "conversations": [{"from": "human", "value": user}, {"from": "gpt", "value": assistant}]}
    if shape == "alpaca":
        return {"system": system, "instruction": user, "input": "", "output": assistant}
    if shape == "content_parts":
        return {"messages": [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]}
                             for m in row["messages"]]}
    if shape == "tool_calls":
        call = {"id": "c1", "type": "function", "function": {"name": "open_case", "arguments": '{"topic": "case"}'}}
        return {"tools": _TOOLS, "messages": [row["messages"][0], row["messages"][1],
                                              {"role": "assistant", "tool_calls": [call]},
                                              {"role": "tool", "tool_call_id": "c1", "content": "opened"},
                                              row["messages"][2]]}
    raise ValueError(shape)


def write_rows(path: Path, n: int, seed: int = 0, shape: str = "chat") -> None:
    rng = random.Random(seed)
    topics = ["billing", "shipping", "returns", "accounts", "security", "warranty", "orders", "refunds"]
    with open(path, "w") as f:
        if shape == "json_array":
            f.write("[\n")
        for i in range(n):
            topic = rng.choice(topics)
            q = f"Ticket {i}: I have a question about {topic} for order {rng.randrange(10**6)} placed last week."
            if i % 1000 == 7:
                q += " Reach me at jane.doe@example.com."
            a = (f"Thanks for asking about {topic}. Your case {rng.randrange(10**6)} is open and an agent will "
                 f"reply within {rng.randrange(1, 48)} hours.")
            row = {"messages": [{"role": "system", "content": "You are a support agent."},
                                {"role": "user", "content": q}, {"role": "assistant", "content": a}]}
            line = json.dumps(in_shape(row, shape))
            end = ",\n" if shape == "json_array" and i < n - 1 else "\n"
            f.write(line + end)
            if i % 5000 == 11:
                f.write(line + (",\n" if shape == "json_array" else "\n"))  # a duplicate
        if shape == "json_array":
            f.write("]\n")


def plain_loop(path: Path) -> dict:
    import re

    from ftpipe.data.pii import PREFILTER, find_pii

    prefilter = re.compile(PREFILTER)
    seen, errors, duplicates, pii = set(), 0, 0, 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                errors += 1
                continue
            messages = row.get("messages") if isinstance(row, dict) else None
            if not isinstance(messages, list) or set(row) - {"messages", "id", "metadata"}:
                errors += 1
                continue
            ok = any(m.get("role") == "assistant" for m in messages)
            for m in messages:
                if m.get("role") not in ROLES or not isinstance(m.get("content"), str) or not m["content"].strip():
                    ok = False
            errors += not ok
            key = hash(line)
            duplicates += key in seen
            seen.add(key)
            text = "\n".join(m.get("content") or "" for m in messages)
            if prefilter.search(text):
                pii += len(find_pii(text))
    return {"errors": errors, "duplicates": duplicates, "pii": pii}


def bare_polars(path: Path) -> dict:
    import polars as pl

    return {"rows": (pl.read_json(path) if path.suffix == ".json" else pl.read_ndjson(path)).height}


def ftpipe_validation(path: Path) -> dict:
    """The plain loop's checks and no more: the text-based warnings (near-duplicates, lengths, overlap) are
    ``ftpipe_full``'s."""
    import polars as pl

    from ftpipe.data.pipeline import example_chunks
    from ftpipe.data.quality import DUPLICATE_KEY, VALID_ROWS, WarningCollector, exact_duplicates
    from ftpipe.data.schema import RowValidator

    rows, keys, pii = RowValidator(), [], WarningCollector()
    for chunk in example_chunks({"train": path}, 0.1):
        rows.add(chunk)
        valid = chunk.filter(VALID_ROWS)
        keys.append(valid.select("source_file", "line", DUPLICATE_KEY))
        pii.collect_pii(valid)
    dups, found = exact_duplicates(pl.concat(keys)), pii.pii()
    return {"errors": rows.n_row_errors, "duplicates": dups.count if dups else 0, "pii": found.count if found else 0}


def ftpipe_full(path: Path) -> dict:
    from ftpipe.data.pipeline import validate_to_parquet

    out = path.with_suffix(f".{time.monotonic_ns()}.parquet")
    try:
        check = validate_to_parquet({"train": path}, 0.1, out, 1, None)
    finally:
        out.unlink(missing_ok=True)
    found = {w.kind: w.count for w in check.warnings}
    return {"errors": check.outcome.n_row_errors, "duplicates": found.get("exact_duplicates", 0),
            "pii": found.get("pii", 0), "near_duplicates": found.get("near_duplicates", 0)}


MINHASH_ROWS = 100_000


def _texts(path: Path) -> list[str]:
    with open(path) as f:
        return ["\n".join(m["content"] for m in json.loads(line)["messages"])
                for _, line in zip(range(MINHASH_ROWS), f)]


def minhash_datasketch(path: Path) -> dict:
    import re

    from datasketch import MinHash, MinHashLSH

    lsh, sketches, pairs = MinHashLSH(threshold=0.8, num_perm=64), {}, 0
    for i, text in enumerate(_texts(path)):
        words = re.findall(r"\w+", text.lower())
        m = MinHash(num_perm=64, seed=1)
        m.update_batch([" ".join(words[j:j + 3]).encode() for j in range(max(1, len(words) - 2))])
        pairs += any(m.jaccard(sketches[other]) >= 0.8 for other in lsh.query(m))
        lsh.insert(i, m)
        sketches[i] = m
    return {"near_duplicates": pairs}


def minhash_ftpipe(path: Path) -> dict:
    import polars as pl

    from ftpipe.data.minhash import THRESHOLD, NearDuplicateFinder, exact_jaccard

    texts = _texts(path)
    finder = NearDuplicateFinder()
    finder.add(pl.Series(texts))
    confirmed = {a for a, b in finder.candidates().tolist() if exact_jaccard(texts[a], texts[b]) >= THRESHOLD}
    return {"near_duplicates": len(confirmed)}


VARIANTS = {"plain_loop": plain_loop, "bare_polars": bare_polars, "ftpipe": ftpipe_validation,
            "ftpipe_full": ftpipe_full, "minhash_datasketch": minhash_datasketch, "minhash_ftpipe": minhash_ftpipe}


def run_variant(name: str, path: Path) -> dict:
    VARIANTS[name](Path(path).with_name("warmup" + Path(path).suffix))  # imports and first-use costs, untimed
    start = time.perf_counter()
    result = VARIANTS[name](path)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"variant": name, "seconds": seconds, "peak_rss_mb": round(peak_mb), **result}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=1, help="turns of every variant; medians are reported")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from: " + ", ".join(VARIANTS))
    parser.add_argument("--shapes", help="comma-separated, from: " + ", ".join(SHAPES) + ": time the structural "
                        "checks on the same rows in each format instead of the variants")
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:  # child process
        print(json.dumps(run_variant(args.variant, Path(args.file))))
        return
    if args.shapes:
        return compare_shapes(args.shapes.split(","), args.rows, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chat.jsonl"
        write_rows(path, args.rows)
        write_rows(path.with_name("warmup.jsonl"), 2000, seed=1)
        lines = sum(1 for _ in open(path))
        names = args.variants.split(",")
        turns = []  # this machine's speed drifts from minute to minute: the variants take turns
        for _ in range(args.repeats):
            turn = {}
            for name in names:
                out = subprocess.run([sys.executable, "-m", "bench.validate", "--variant", name, "--file", str(path)],
                                     cwd=REPO_ROOT, capture_output=True, text=True, check=True)
                turn[name] = json.loads(out.stdout.strip().splitlines()[-1])
                r = turn[name]
                print(f"{name:12s} {r['seconds']:7.2f} s  peak RSS {r['peak_rss_mb']:,} MB", flush=True)
            turns.append(turn)
    results = {}
    for name in names:
        r = dict(turns[0][name])
        r["seconds"] = round(statistics.median(t[name]["seconds"] for t in turns), 2)
        r["peak_rss_mb"] = max(t[name]["peak_rss_mb"] for t in turns)
        measured_rows = min(lines, MINHASH_ROWS) if name.startswith("minhash") else lines
        r["rows_per_second"] = round(measured_rows / r["seconds"])
        results[name] = r
    summary = {"rows": lines, "repeats": args.repeats, "variants": results}

    def ratio(name: str, a: str, b: str) -> None:
        """The median over turns of a's time / b's time."""
        if a in results and b in results:
            summary[name] = round(statistics.median(t[a]["seconds"] / t[b]["seconds"] for t in turns), 2)

    ratio("ftpipe_speedup_vs_plain_loop", "plain_loop", "ftpipe")
    ratio("ftpipe_time_vs_bare_polars", "ftpipe", "bare_polars")
    ratio("ftpipe_full_speedup_vs_plain_loop", "plain_loop", "ftpipe_full")
    ratio("minhash_speedup_vs_datasketch", "minhash_datasketch", "minhash_ftpipe")
    for checker in ("ftpipe", "ftpipe_full"):
        if checker in results and "plain_loop" in results:
            summary[f"{checker}_same_findings_as_plain_loop"] = all(
                results[checker][k] == results["plain_loop"][k] for k in ("errors", "duplicates", "pii"))
    for name, r in results.items():
        print(f"{name:12s} {r['seconds']:7.2f} s  {r['rows_per_second']:>9,} rows/s  peak RSS {r['peak_rss_mb']:,} MB")
    print(json.dumps({k: v for k, v in summary.items() if k != "variants"}, indent=2))
    out_dir = REPO_ROOT / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / f"validate-{lines}.json").write_text(json.dumps(summary, indent=2))


def compare_shapes(shapes: list[str], rows: int, repeats: int) -> None:
    """ftpipe's structural checks over the same rows in each format, each in its own process, in turns."""
    turns = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            turn = {}
            for shape in shapes:
                folder = Path(tmp) / shape
                suffix = ".json" if shape == "json_array" else ".jsonl"
                path = folder / f"data{suffix}"
                if not path.exists():
                    folder.mkdir()
                    write_rows(path, rows, shape=shape)
                    write_rows(folder / f"warmup{suffix}", 2000, seed=1, shape=shape)
                out = subprocess.run([sys.executable, "-m", "bench.validate", "--variant", "ftpipe", "--file",
                                      str(path)], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
                turn[shape] = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"{shape:14s} {turn[shape]['seconds']:7.2f} s  peak RSS {turn[shape]['peak_rss_mb']:,} MB",
                      flush=True)
            turns.append(turn)
    summary = {"rows": rows + rows // 5000, "repeats": repeats, "shapes": {}}
    for shape in shapes:
        seconds = statistics.median(t[shape]["seconds"] for t in turns)
        summary["shapes"][shape] = {
            **{k: turns[0][shape][k] for k in ("errors", "duplicates", "pii")},
            "seconds": round(seconds, 2), "rows_per_second": round(summary["rows"] / seconds),
            "peak_rss_mb": max(t[shape]["peak_rss_mb"] for t in turns),
            "time_vs_chat": round(statistics.median(t[shape]["seconds"] / t["chat"]["seconds"] for t in turns), 2)
            if "chat" in shapes else None}
    print(json.dumps(summary, indent=2))
    out_dir = REPO_ROOT / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / f"validate-shapes-{summary['rows']}.json").write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
