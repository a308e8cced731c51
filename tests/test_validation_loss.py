"""The validation loss during training: measured on the held-out split, the best weights kept, early stopping.

The runs train a LoRA adapter on 8 "codes" (ten random words each) and score 16 held-out codes of other things.
The adapter first learns what a code looks like (the held-out loss falls), then memorises the training
codes' word sequences, and predicts them confidently where the held-out codes go elsewhere: its held-out loss
rises while its training loss keeps falling. Every run here takes a few seconds.
"""

import dataclasses
import json
import math
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import torch

from ftpipe.data.tokenize import tokenize_frame
from ftpipe.training.checkpoints import CheckpointArea, step_of
from ftpipe.training.runner import TRAINING_RESULT, completed_training, run_training, save_completed
from ftpipe.training.spec import TrainJobSpec
from tests.helpers.training import tiny_spec

HARNESS = Path(__file__).parent / "helpers" / "trainer_harness.py"
REPO = Path(__file__).resolve().parents[1]

WORDS = ["lamp", "river", "garden", "bridge", "engine", "window", "mountain", "library", "kettle", "harbor",
         "violin", "tower", "meadow", "compass", "ladder", "lantern", "canyon", "market", "station", "orchard",
         "red", "blue", "green", "tall", "small", "seven", "twelve", "old", "new", "heavy", "light", "gold",
         "silver", "north", "south", "alpha", "beta", "gamma", "delta", "omega", "color", "height", "age",
         "price", "size", "weight", "code", "owner", "zero", "one", "two", "three", "four", "five", "six",
         "eight", "nine", "ten", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "sun", "moon", "star"]
# Measured on this data (see test_the_best_weights_score_better_on_the_held_out_split_than_the_last) with base
# models built under AVX512 and default kernels: the held-out loss of the best weights (step 8 on both) is 1.5
# nats below the last weights'. The turn is steep on purpose: at 3e-3 for 24 steps one build's held-out loss
# kept falling to the end, another's turned at step 8.
MARGIN = 0.5
STEPS = 40  # 8 training examples, one micro-batch of 8: a step an epoch
EVAL_STEPS = list(range(4, STEPS + 1, 4))


def _codes(things: list[str], seed: int) -> list[list[dict]]:
    rng = random.Random(seed)
    return [[{"role": "user", "content": f"What is the code for the {thing}?"},
             {"role": "assistant", "content": " ".join(rng.choice(WORDS) for _ in range(10))}] for thing in things]


def _tokenized(tokenizer, conversations, path: Path) -> Path:
    frame = pl.DataFrame({"source_file": "t.jsonl", "line": list(range(1, len(conversations) + 1)),
                          "messages": [json.dumps(c) for c in conversations]})
    tokenize_frame(tokenizer, frame, 128).write_parquet(path)
    return path


@pytest.fixture(scope="module")
def codes(tokenizer, tmp_path_factory) -> tuple[Path, Path]:
    """(train, held-out): 8 training codes and 16 held-out codes of things the training set never names."""
    root = tmp_path_factory.mktemp("codes")
    train = _tokenized(tokenizer, _codes(WORDS[:8], seed=1), root / "train.parquet")
    held_out = _tokenized(tokenizer, _codes(WORDS[20:36], seed=2), root / "holdout.parquet")
    return train, held_out


# The overfitting run's settings (a spec trains on codes[0] and is evaluated on codes[1]).
OVERFIT = dict(learning_rate=7e-3, epochs=STEPS, micro_batch_size=8, warmup_ratio=0.0, logging_steps=2, eval_steps=4,
               save_steps=6, save_minutes=600, keep_checkpoints=2)


@pytest.fixture(scope="module")
def best_run(tiny_model, codes, tmp_path_factory):
    """The overfitting run with checkpoint_selection best: (spec, result, everything the sink received)."""
    spec = tiny_spec(tiny_model, codes[0], tmp_path_factory.mktemp("best"), OVERFIT, eval_file=codes[1])
    seen = []
    return spec, run_training(spec, sink=seen.append), seen


def _weights(directory) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(directory) / "adapter_model.safetensors"))


def _same_weights(a, b, tolerance: float = 0.0) -> bool:
    a, b = _weights(a), _weights(b)
    return a.keys() == b.keys() and all((a[k] - b[k]).abs().max().item() <= tolerance for k in a)


def _held_out_loss(tiny_model, adapter_dir, held_out: Path) -> float:
    """Mean over the held-out examples of the answer tokens' negative log-likelihood, by a plain forward pass."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model.path), str(adapter_dir)).eval()
    losses = []
    with torch.no_grad():
        for ids, mask in pl.read_parquet(held_out).select("input_ids", "assistant_masks").iter_rows():
            labels = torch.tensor([[i if m else -100 for i, m in zip(ids, mask)]])
            losses.append(model(input_ids=torch.tensor([ids]), labels=labels).loss.item())
    return sum(losses) / len(losses)


def test_the_validation_loss_is_logged_every_eval_steps_and_recorded(best_run, tmp_path):
    from ftpipe.training.plots import curve_from_record, curve_series

    spec, result, seen = best_run
    evaluations = [m for m in seen if "eval_loss" in m]
    assert [m["step"] for m in evaluations] == EVAL_STEPS and evaluations[0]["max_steps"] == STEPS
    assert [s for s, _ in result.eval_history] == EVAL_STEPS
    assert [loss for _, loss in result.eval_history] == [m["eval_loss"] for m in evaluations]
    assert all(math.isfinite(loss) for _, loss in result.eval_history)
    # The training loss is logged as before, and nothing of the evaluation is mistaken for it.
    assert [s for s, _ in result.loss_history] == list(range(2, STEPS + 1, 2))

    record = save_completed(spec, result)
    saved = json.loads((Path(spec.output_dir) / TRAINING_RESULT).read_text())
    assert saved["eval_history"] == [list(p) for p in result.eval_history] == [list(p) for p in record["eval_history"]]
    assert (saved["best_step"], saved["best_eval_loss"]) == min(result.eval_history, key=lambda p: p[1])
    assert saved["checkpoint_selection"] == "best" and saved["selected_step"] == saved["best_step"]
    assert saved["early_stopped"] is False

    # The plot draws both curves on the same axes and marks the step whose weights the adapter holds.
    png = curve_from_record(saved, tmp_path / "curve.png")
    assert png.stat().st_size > 0
    series = curve_series(result.loss_history, result.eval_history, result.selected_step)
    assert series["training"] == result.loss_history and series["validation"] == result.eval_history
    assert series["chosen"] == [(result.best_step, result.best_eval_loss)]


@pytest.mark.quality  # rests on where the tiny model's held-out loss turns (make test-kernels)
def test_the_best_weights_score_better_on_the_held_out_split_than_the_last(tiny_model, codes, best_run):
    spec, result, _ = best_run
    losses = [loss for _, loss in result.eval_history]
    # The run overfits: the validation loss falls, then rises well above its minimum while training goes on.
    assert result.best_step < STEPS and losses[-1] > min(losses) + MARGIN
    training = dict(result.loss_history)
    assert training[STEPS] < training[result.best_step]
    assert result.checkpoint_selection == "best" and result.selected_step == result.best_step
    assert _same_weights(result.adapter_dir, Path(spec.output_dir) / "best" / f"step-{result.best_step}")

    # The last weights, as the final save wrote them.
    last = Path(spec.output_dir) / "checkpoints" / f"checkpoint-{STEPS}"
    best_loss, last_loss = (_held_out_loss(tiny_model, d, codes[1]) for d in (result.adapter_dir, last))
    print(f"held-out loss: best (step {result.best_step}) {best_loss:.7f}, last {last_loss:.7f}, "
          f"margin {last_loss - best_loss:.4f}")
    assert last_loss - best_loss > MARGIN


def test_selection_last_keeps_the_last_weights(tiny_model, codes, best_run, tmp_path):
    spec = tiny_spec(tiny_model, codes[0], tmp_path / "last", OVERFIT, eval_file=codes[1],
                     checkpoint_selection="last")
    result = run_training(spec)
    assert result.checkpoint_selection == "last" and result.selected_step == STEPS
    assert result.best_step == best_run[1].best_step  # measured all the same
    assert _same_weights(result.adapter_dir, tmp_path / "last" / "checkpoints" / f"checkpoint-{STEPS}")
    assert _same_weights(result.adapter_dir, Path(best_run[0].output_dir) / "checkpoints" / f"checkpoint-{STEPS}")
    assert not list((tmp_path / "last" / "best").glob("*"))  # nothing kept that the adapter will not be


@pytest.mark.quality  # rests on where the tiny model's held-out loss turns (make test-kernels)
def test_early_stopping_stops_before_max_steps_and_counts_as_completed(tiny_model, codes, best_run, tmp_path):
    spec = tiny_spec(tiny_model, codes[0], tmp_path / "early", OVERFIT, eval_file=codes[1],
                     early_stopping_patience=2, save_steps=4)
    result = run_training(spec)
    # Where the curve turns differs between builds (step 8 on most, 4 on an avx2 build at one thread); what is
    # asserted is relative to the full run's curve: two evaluations without improvement after its best, then stop.
    best_step = best_run[1].best_step
    stop = best_step + 2 * spec.eval_steps
    assert result.outcome == "completed" and result.early_stopped
    assert result.steps == stop < result.max_steps == STEPS
    assert result.eval_history == [p for p in best_run[1].eval_history if p[0] <= stop]
    assert _same_weights(result.adapter_dir, best_run[1].adapter_dir)
    # No checkpoint of the stopping step, though one was due: resuming from it would train on past the stop.
    committed = sorted(step_of(p) for p in (tmp_path / "early" / "checkpoints").glob("checkpoint-*"))
    assert committed == [stop - 2 * spec.save_steps, stop - spec.save_steps]

    save_completed(spec, result)
    record = completed_training(spec)  # a later run of the same spec reuses it
    assert record is not None and record["early_stopped"] and record["steps"] < record["max_steps"]


def test_a_stopped_training_short_of_max_steps_is_not_taken_for_a_finished_one(tmp_path):
    from ftpipe.training.runner import TrainResult

    spec = TrainJobSpec(base_model_path="base", train_file="train.parquet", output_dir=str(tmp_path), max_steps=20)
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_model.safetensors").write_bytes(b"w" * 10)
    result = TrainResult(outcome="completed", adapter_dir=str(tmp_path / "adapter"), steps=12, max_steps=20,
                         train_loss=1.0, final_loss=1.0, trained_tokens=10, seconds=1.0, tokens_per_second=10.0,
                         loss_history=[(12, 1.0)], resumed_from=None, last_checkpoint=None, micro_batch_size=1,
                         gradient_accumulation_steps=1, oom_retries=0)
    save_completed(spec, result)
    assert completed_training(spec) is None
    save_completed(spec, dataclasses.replace(result, early_stopped=True))
    assert completed_training(spec)["early_stopped"] is True


def test_retention_removes_the_best_weights_once_the_training_is_finished(tmp_path):
    from datetime import datetime, timedelta

    from ftpipe.training.retention import apply_retention

    for name, finished in (("done", True), ("open", False)):
        training = tmp_path / "tenants" / "acme" / "jobs" / "j" / "training" / name
        for folder in ("best/step-4", "checkpoints/checkpoint-6", *(["adapter"] if finished else [])):
            (training / folder).mkdir(parents=True)
            (training / folder / "adapter_model.safetensors").write_bytes(b"w" * 10)
        if finished:
            (training / TRAINING_RESULT).write_text("{}")
    report = apply_retention(tmp_path, keep=1, idle=timedelta(minutes=1), now=datetime.now() + timedelta(hours=1))
    training = tmp_path / "tenants" / "acme" / "jobs" / "j" / "training"
    assert not (training / "done" / "best").exists() and str(training / "done" / "best") in report.removed
    assert (training / "open" / "best" / "step-4").is_dir()  # a resume of it may still need them


def _harness(spec: TrainJobSpec, *flags: str) -> subprocess.CompletedProcess:
    out = Path(spec.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(dataclasses.asdict(spec)))
    return subprocess.run([sys.executable, str(HARNESS), str(out / "spec.json"), str(out / "result.json"), *flags],
                          env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True,
                          timeout=300)


@pytest.mark.quality  # rests on the held-out loss falling at first (make test-kernels)
def test_a_resumed_run_keeps_the_right_best_weights(tiny_model, codes, tmp_path):
    # Evaluated every 2 steps, so that the case below needs only the held-out loss's first fall, which every build
    # shows, not where it turns, which differs between builds.
    spec = tiny_spec(tiny_model, codes[0], tmp_path / "job", OVERFIT, eval_file=codes[1], eval_steps=2)
    reference = run_training(dataclasses.replace(spec, output_dir=str(tmp_path / "reference")))
    first = reference.eval_history[0]
    # The case needs an improvement on an earlier best between two checkpoints: checkpoint c knows the best
    # of step 2, the evaluation of step c + 1 improves on it, and the run is killed before the next checkpoint.
    improved = next(step for step, loss in reference.eval_history if loss < first[1])
    spec = dataclasses.replace(spec, save_steps=improved - 1)
    killed = _harness(spec, "--sigkill-at-step", str(improved + 1))
    assert killed.returncode == -signal.SIGKILL
    assert sorted(p.name for p in (tmp_path / "job" / "checkpoints").glob("checkpoint-*")) == \
        [f"checkpoint-{improved - 1}"]
    assert _best_steps(tmp_path / "job") == [first[0], improved]

    # The resumed run knows the evaluations up to its checkpoint (best: step 2), sets aside the weights of the
    # step it has not reached yet, trains on from the checkpoint, and finds the same best step once more.
    resumed = _harness(spec)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = json.loads((tmp_path / "job" / "result.json").read_text())
    assert result["resumed_from"].endswith(f"checkpoint-{improved - 1}")
    assert [s for s, _ in result["eval_history"]] == list(range(2, STEPS + 1, 2))
    # The same run as the uninterrupted one (which trained in this process, so only nearly bitwise).
    for (_, got), (_, want) in zip(result["eval_history"], reference.eval_history):
        assert abs(got - want) <= 1e-4
    assert result["best_step"] == reference.best_step and result["checkpoint_selection"] == "best"
    assert _same_weights(result["adapter_dir"], reference.adapter_dir, tolerance=1e-4)
    assert _best_steps(tmp_path / "job") == [reference.best_step]


def _best_steps(output_dir: Path) -> list[int]:
    return sorted(int(p.name.removeprefix("step-")) for p in (output_dir / "best").iterdir())


@pytest.mark.slow
# Two workers sum the gradients in another order; Adam's normalised updates carry that rounding into the weights.
# The rates turn the held-out loss before step 12 on every base
# model build measured (full at 1e-3 did not on one; LoRA at 5e-3 tied its last two evaluations on one, and at
# 8e-3 turns at step 8, 0.13 below step 10, and passed on the default-kernel build too), so that the best
# weights are not the last.
@pytest.mark.parametrize("method, lr", [("lora", 8e-3), ("full", 2e-3)])
def test_two_workers_keep_the_same_best_weights_as_one_process(tiny_model, codes, tmp_path, method, lr):
    """Under torchrun every rank evaluates its share and takes the same decisions; FSDP gathers the best
    weights collectively. Each worker's eval batches hold half the examples, so the losses differ a little
    (the Trainer averages per-batch means), not the steps."""
    from ftpipe.launch.command import worker_command

    base = tiny_spec(tiny_model, codes[0], tmp_path / "single", OVERFIT, eval_file=codes[1], method=method,
                     learning_rate=lr, max_steps=12, eval_steps=2)
    single = run_training(base)
    spec = dataclasses.replace(base, output_dir=str(tmp_path / "double"), micro_batch_size=4)
    (tmp_path / "double").mkdir()
    (tmp_path / "double" / "spec.json").write_text(json.dumps(dataclasses.asdict(spec)))
    done = subprocess.run([*worker_command(sys.executable, "ftpipe.training.local", 2),
                           str(tmp_path / "double" / "spec.json"), str(tmp_path / "double" / "result.json")],
                          text=True, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    double = json.loads((tmp_path / "double" / "result.json").read_text())
    assert single.best_step < 12 and double["best_step"] == single.best_step
    assert [s for s, _ in double["eval_history"]] == [s for s, _ in single.eval_history]
    for (_, got), (_, want) in zip(double["eval_history"], single.eval_history):
        assert abs(got - want) < 0.05
    name = "adapter_model.safetensors" if method == "lora" else "model.safetensors"
    from safetensors.torch import load_file

    best, kept = (load_file(str(Path(d) / name)) for d in (single.adapter_dir, double["adapter_dir"]))
    last = load_file(str(CheckpointArea(tmp_path / "single" / "checkpoints").committed()[0] / name))

    def mean_distance(x, y):
        return sum((x[k] - y[k]).abs().sum().item() for k in x) / sum(x[k].numel() for k in x)

    # The workers kept the best step's weights: far nearer the single process's best than its last. (Measured
    # with one thread per process, LoRA: 1.1e-4 from the best, whose distance to the last is 3.9e-3; a single
    # weight can differ by far more, 3.3e-3, where the two orders of summation gave a near-zero gradient
    # opposite signs and Adam's normalised step moved it a whole learning rate each way.)
    assert mean_distance(kept, best) <= 0.25 * mean_distance(best, last)


def test_dpo_measures_its_validation_loss_on_held_out_pairs(tiny_model, tokenizer, tmp_path):
    from ftpipe import synthetic
    from ftpipe.data.tokenize import tokenize_preferences

    def pairs(rows):
        return tokenize_preferences(tokenizer, synthetic.preference_frame(rows), 256)

    pairs(synthetic.acme_preferences(32, seed=5)).write_parquet(tmp_path / "train.parquet")
    pairs(synthetic.acme_preferences(8, seed=99)).write_parquet(tmp_path / "holdout.parquet")
    seen = []
    result = run_training(tiny_spec(
        tiny_model, tmp_path / "train.parquet", tmp_path / "out", eval_file=tmp_path / "holdout.parquet",
        objective="dpo", learning_rate=2e-3, max_steps=8, micro_batch_size=8, logging_steps=4, eval_steps=4),
        sink=seen.append)
    assert [s for s, _ in result.eval_history] == [4, 8] == [m["step"] for m in seen if "eval_loss" in m]
    assert result.eval_history[1][1] < result.eval_history[0][1]  # the held-out pairs are learned too
    assert result.best_step == 8 and result.checkpoint_selection == "best"


def test_automatic_eval_steps_give_about_ten_evaluations(tiny_model, codes, tmp_path):
    spec = tiny_spec(tiny_model, codes[0], tmp_path / "auto", OVERFIT, eval_file=codes[1], eval_steps=0, epochs=5,
                     logging_steps=5)
    result = run_training(spec)
    assert [s for s, _ in result.eval_history] == [1, 2, 3, 4, 5]  # a tenth of 5 steps, rounded up


def test_the_held_out_split_is_tokenized_beside_the_train_split(tokenizer, tmp_path):
    from ftpipe import synthetic
    from ftpipe.data.pipeline import tokenize_to_parquet, validate_to_parquet

    (tmp_path / "t.jsonl").write_text(synthetic.to_jsonl(synthetic.acme_support(120, seed=4)))
    examples = tmp_path / "examples.parquet"
    assert validate_to_parquet({"train": tmp_path / "t.jsonl"}, 0.2, examples, 1, None).outcome.passed
    written = tokenize_to_parquet(tokenizer, examples, tmp_path / "train.parquet", 64, "sft", slice_rows=25,
                                  eval_file=tmp_path / "holdout.parquet")
    splits = pl.read_parquet(examples)
    holdout = splits.filter(pl.col("split") == "holdout")
    assert written == splits.height - holdout.height and holdout.height > 5
    assert pl.read_parquet(tmp_path / "holdout.parquet").equals(tokenize_frame(tokenizer, holdout, 64))
    assert pl.read_parquet(tmp_path / "holdout.parquet").columns == pl.read_parquet(tmp_path / "train.parquet").columns


def test_the_scored_held_out_rows_have_a_token_to_score_and_are_capped(tmp_path, monkeypatch):
    from ftpipe.training import validation

    pl.DataFrame({"input_ids": [[1, 2, 3]] * 6, "assistant_masks": [[0, 1, 1]] * 5 + [[0, 0, 0]]},
                 schema={"input_ids": pl.List(pl.Int32), "assistant_masks": pl.List(pl.Int8)}
                 ).write_parquet(tmp_path / "h.parquet")
    columns = ["input_ids", "assistant_masks"]
    assert validation.read_eval_table(str(tmp_path / "h.parquet"), columns).height == 5  # 0/0 would be NaN
    monkeypatch.setattr(validation, "EVAL_MAX_EXAMPLES", 3)
    assert validation.read_eval_table(str(tmp_path / "h.parquet"), columns).height == 3
    assert validation.read_eval_table("", columns) is None  # no held-out split: no evaluation


@pytest.mark.parametrize("field, value, message", [
    ("eval_steps", ".nan", "'eval_steps': must be a whole number"),
    ("eval_steps", "often", "'eval_steps': must be a whole number, not 'often'"),
    ("eval_steps", "1e400", "'eval_steps': must be a whole number"),
    ("eval_steps", "-1", "'eval_steps': must be between 0 and 1,000,000"),
    ("eval_steps", "2.5", "'eval_steps': must be a whole number"),
    ("eval_steps", "10000000000", "'eval_steps': must be between 0 and 1,000,000"),
    ("checkpoint_selection", "worst", "'checkpoint_selection': must be best or last, not 'worst'"),
    ("checkpoint_selection", "1", "'checkpoint_selection': must be best or last"),
    ("checkpoint_selection", "true", "'checkpoint_selection': must be best or last"),
    ("checkpoint_selection", "[best]", "'checkpoint_selection': must be best or last"),
    ("early_stopping_patience", "-3", "'early_stopping_patience': must be between 0 and 1,000"),
    ("early_stopping_patience", ".inf", "'early_stopping_patience': must be a whole number"),
    ("early_stopping_patience", "1e9", "'early_stopping_patience': must be between 0 and 1,000"),
    ("early_stopping_patience", "'two'", "'early_stopping_patience': must be a whole number, not 'two'"),
])
def test_hostile_validation_settings_are_refused_by_name(field, value, message):
    from ftpipe.manifest import ManifestError, parse_manifest

    with pytest.raises(ManifestError, match=message.replace("[", r"\[")):
        parse_manifest(f"base_model: x\ndataset: t.jsonl\nhyperparameters: {{{field}: {value}}}\n".encode())


def test_validation_settings_are_overridable_and_explained(tiny_model):
    from ftpipe.manifest import parse_manifest
    from ftpipe.tenants import PoolConfig
    from ftpipe.training.plan import plan_training

    manifest = parse_manifest(b"base_model: x\ndataset: t.jsonl\nhyperparameters: "
                              b"{eval_steps: 7, checkpoint_selection: last, early_stopping_patience: 3}\n")
    pool = PoolConfig(gpu="cpu", gpu_memory_gb=8, peak_tflops=0.046)
    plan = plan_training(tiny_model.path, tiny_model.num_parameters, "lora", "sft", manifest.hyperparameters,
                         "t.parquet", 135, 180, pool, eval_file="h.parquet")
    assert (plan.spec.eval_steps, plan.spec.checkpoint_selection, plan.spec.early_stopping_patience) == (7, "last", 3)
    assert plan.spec.eval_file == "h.parquet"
    rows = {r["name"]: r for r in plan.rows}
    assert [rows[n]["shown"] for n in ("eval_steps", "checkpoint_selection", "early_stopping_patience")] == \
        ["7", "last", "3"]
    assert all(rows[n]["source"] == "manifest" for n in ("eval_steps", "checkpoint_selection",
                                                         "early_stopping_patience"))
    defaults = {r["name"]: r for r in plan_training(tiny_model.path, tiny_model.num_parameters, "lora", "sft", {},
                                                    "t.parquet", 135, 180, pool).rows}
    assert defaults["checkpoint_selection"]["shown"] == "best" and defaults["early_stopping_patience"]["shown"] == "0"
    assert defaults["eval_steps"]["source"] == "automatic"


def _summary(loss_history, eval_history, **kw):
    from ftpipe.evaluation.advice import TrainingSummary

    defaults = dict(epochs=8.0, learning_rate=2e-3, lora_r=16, method="lora", n_train=500)
    return TrainingSummary(loss_history=loss_history, eval_history=eval_history, **{**defaults, **kw})


def test_advice_names_the_step_after_which_the_model_overfit():
    from ftpipe.evaluation.advice import TrainingSummary, advise
    from ftpipe.evaluation.gates import evaluate_gates, parse_gate
    from ftpipe.evaluation.intervals import Estimate

    metrics = {"holdout_delta": 0.1}
    gate = parse_gate("holdout_delta", "> 0.5")
    failed = [r for r in evaluate_gates([gate], {"holdout_delta": Estimate.point(0.1)}) if not r.passed]
    training = [(s, 3.0 - 0.025 * s) for s in range(10, 101, 10)]  # falls all along
    overfit = _summary(training, [(20, 2.0), (40, 1.5), (60, 1.7), (80, 2.1), (100, 2.4)], max_steps=100)
    advice = advise(failed, metrics, overfit)
    (said,) = [a for a in advice if "overfit" in a]
    assert "lowest at step 40" in said and "overfit after step 40" in said
    assert "epochs: 3.2" in said and "early_stopping_patience" in said  # 8 epochs x 40 / 100 steps
    assert not any("memorised" in a for a in advice)  # one diagnosis, the more precise one

    # As the registry reads it: from the training's record, where the adapter already holds the best step.
    record = {"loss_history": training, "eval_history": overfit.eval_history, "checkpoint_selection": "best",
              "max_steps": 100}
    spec = {"epochs": 8.0, "learning_rate": 2e-3, "lora_r": 16, "method": "lora"}
    (said,) = [a for a in advise(failed, metrics, TrainingSummary.from_record(record, spec, 500)) if "overfit" in a]
    assert "epochs: 3.2" in said and "holds the step-40 weights" in said

    # A validation loss still falling, within noise of its minimum, or rising together with the training loss
    # (a learning-rate problem) is not overfitting.
    for history, train in [([(20, 2.0), (40, 1.5), (60, 1.4)], training),
                           ([(20, 2.0), (40, 1.5), (60, 1.55)], training),
                           ([(20, 2.0), (40, 1.5), (60, 2.5)], [(20, 1.0), (40, 0.8), (60, 2.0)])]:
        assert not any("overfit" in a for a in advise(failed, metrics, _summary(train, history)))
