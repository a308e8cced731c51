"""The asset graph materialized in process, on the tiny model: the good path and the blocked path."""

import json
from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterRunStatus, build_run_status_sensor_context, instance_for_test, materialize

from ft_assets.datasets import raw_dataset, tokenized_dataset, validated_dataset
from ft_assets.definitions import build_defs
from ftpipe import synthetic
from ftpipe.landing import results_key
from ftpipe.submission import default_manifest, submit_job
from partitions.keys import partition_key
from sensors.failures import failure_reason, resume_failed_runs
from tests.helpers.stages import execute_stages
from tests.helpers.webhook_receiver import SECRET

pytestmark = pytest.mark.slow


def _run(instance, resources, tenant, job):
    key = partition_key(tenant, job)
    instance.add_dynamic_partitions("tenant_jobs", [key])
    result = execute_stages(build_defs(resources), instance, key)
    return result, instance.get_run_by_id(result.run_id)


@pytest.mark.quality
def test_good_upload_becomes_an_evaluated_registered_adapter(local_resources, tiny_model, platform_file):
    # What this tests is the path to a promoted adapter. Its gates are on the continuous metrics, which this
    # short training meets clearly (held-out answers' perplexity x0.80, interval x0.69 to x0.92, gate < 1);
    # exact match on its 17 held-out questions moves by 0.06 a question.
    with platform_file.open("a") as f:
        f.write("evaluation:\n  quality_gates: {holdout_perplexity_ratio: '< 1', golden_perplexity_ratio: '<= 1.5'}\n")
    store = local_resources["landing"].store()
    rows = synthetic.to_jsonl(synthetic.acme_support(150)).encode()
    submit_job(store, "acme", "support-v1", {"train.jsonl": rows},
               default_manifest("train.jsonl", hyperparameters={"epochs": 4}))
    with instance_for_test() as instance:
        result, run = _run(instance, local_resources, "acme", "support-v1")
        assert run.status == DagsterRunStatus.SUCCESS
        adapter_meta = result.asset_materializations_for_node("adapter")[0].metadata
        assert adapter_meta["final_loss"].value < adapter_meta["train_loss"].value * 2
        assert "data:image/png;base64," in adapter_meta["loss_curve"].value
        # The validation loss on the held-out split, measured while training; the adapter is its best step's.
        assert adapter_meta["checkpoint_selection"].value == "best" and adapter_meta["evaluations"].value >= 5
        assert adapter_meta["best_eval_loss"].value <= adapter_meta["eval_loss"].value
        assert adapter_meta["tokens_per_second"].value > 0
        (serving,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "serving_compatible"]
        assert serving.passed
        scores = result.asset_materializations_for_node("eval_report")[0].metadata["scores"].value.records
        assert {(r.data["task"], r.data["metric"]) for r in scores} == {
            ("holdout", "exact_match"), ("holdout", "perplexity"), ("golden", "exact_match"), ("golden", "perplexity")}
        for score in (r.data for r in scores):
            assert score["change_low"] <= score["change_high"]
            if score["metric"] == "exact_match":
                assert score["change"] == pytest.approx(score["tuned"] - score["base"])

    (record,) = local_resources["catalog"].adapters().list("acme")
    assert record.run_id == run.run_id and record.base_digest == tiny_model.digest
    # Exact match on 17 questions is scored for both models but not compared: one question is 0.06, and a build
    # under default kernels scored the tuned model a question below the base (the perplexity, below, is the gate).
    assert all(0 <= record.metrics[f"holdout_exact_match_{m}"] <= 1 for m in ("base", "tuned"))
    assert record.status == "promoted"
    args = (Path(local_resources["artifacts"].root) / "serving" / "ftpipe__tiny-llama.args").read_text()
    assert f"--lora-modules {record.adapter_id}={record.path}" in args  # handed to vLLM on promotion
    served = Path(record.path)
    assert sorted(p.name for p in served.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert json.loads((served / "adapter_config.json").read_text())["base_model_name_or_path"] == "ftpipe/tiny-llama"
    report = store.read_bytes(results_key("acme", "support-v1", "eval_report.md")).decode()
    assert "| holdout | exact_match |" in report
    # The answers got likelier, and the general skills were scored on the shipped golden set for both models.
    assert record.metrics["holdout_perplexity_tuned"] < record.metrics["holdout_perplexity_base"]
    assert record.metrics["golden_exact_match_base"] > 0.2  # the pre-trained skills are measurable
    assert "| golden | exact_match |" in report and "| golden | perplexity |" in report
    gates = store.read_bytes(results_key("acme", "support-v1", "quality_gates.md")).decode()
    assert "is **promoted**" in gates and "| `holdout_perplexity_ratio < 1` | platform |" in gates
    assert "meets `holdout_perplexity_ratio < 1` with 95% confidence" in gates
    estimates = json.loads(store.read_bytes(results_key("acme", "support-v1", "eval_report.json")))["estimates"]
    held_out, golden = estimates["holdout_perplexity_ratio"], estimates["golden_perplexity_ratio"]
    assert held_out["high"] < 0.99  # the margin, not just the verdict (0.92 measured)
    assert golden["high"] < 1.5 - 0.3
    # The report says how sure it is, and shows the training and validation curves it was picked from.
    assert "95% interval" in report and "Validation loss on the held-out split" in report
    assert "![training and validation loss](loss_curve.png)" in report
    assert store.read_bytes(results_key("acme", "support-v1", "loss_curve.png")).startswith(b"\x89PNG")
    published = store.read_bytes(results_key("acme", "support-v1", "eval_report.json")).decode()
    assert local_resources["artifacts"].root not in published and tiny_model.path not in published  # no paths
    assert json.loads(published)["base_model"] == "ftpipe/tiny-llama"
    smoke = json.loads(published)["smoke"]
    assert smoke["passed"] and all(s["tuned_stopped"] for s in smoke["samples"])
    assert "Smoke generation" in report
    validation = store.read_bytes(results_key("acme", "support-v1", "validation.md")).decode()
    assert "Validation passed" in validation
    assert "| epochs | 4 | manifest | set by the tenant |" in validation  # the plan the trainer ran
    assert "| learning_rate | 0.002 | automatic |" in validation
    assert "| eval_steps |" in validation and "| checkpoint_selection | best | default |" in validation


def test_broken_rows_block_the_run_before_any_training(local_resources):
    store = local_resources["landing"].store()
    lines = synthetic.to_jsonl(synthetic.acme_support(120)).splitlines()
    lines.insert(4, synthetic.broken_rows()[1])
    submit_job(store, "initech", "helpdesk-v1", {"t.jsonl": ("\n".join(lines) + "\n").encode()},
               default_manifest("t.jsonl"))
    with instance_for_test() as instance:
        result, run = _run(instance, local_resources, "initech", "helpdesk-v1")
        assert run.status == DagsterRunStatus.FAILURE
        error_class, reason = failure_reason(instance, run)
        assert error_class == "user" and reason.startswith("validation found 1 error(s) in the upload")
        assert reason.endswith("t.jsonl line 5, messages: no assistant turn")
        assert run.tags["ftpipe/outcome"].startswith("[user] validation found 1 error(s)")
        assert not result.asset_materializations_for_node("adapter")
    job_dir = Path(local_resources["artifacts"].root) / "tenants" / "initech" / "jobs" / "helpdesk-v1"
    assert not (job_dir / "training").exists()  # no GPU time spent
    report = store.read_bytes(results_key("initech", "helpdesk-v1", "validation.md")).decode()
    assert "| t.jsonl | 5 | messages | no assistant turn |" in report


def test_bad_manifest_is_a_user_error_reported_to_the_tenant(local_resources):
    store = local_resources["landing"].store()
    submit_job(store, "acme", "j2", {"t.jsonl": b"{}\n"}, default_manifest("t.jsonl"))
    store.write_bytes("tenants/acme/jobs/j3/manifest.yaml", b"base_model: ftpipe/tiny-llama\ndataset: missing.jsonl\n")
    with instance_for_test() as instance:
        _, run = _run(instance, local_resources, "acme", "j3")
        error_class, reason = failure_reason(instance, run)
    assert error_class == "user" and "names 'missing.jsonl', which is not in the job folder" in reason
    assert b"missing.jsonl" in store.read_bytes(results_key("acme", "j3", "rejected.md"))


def test_second_job_on_the_same_data_reuses_the_tokenized_cache(local_resources, tiny_model):
    store = local_resources["landing"].store()
    rows = synthetic.to_jsonl(synthetic.acme_support(100)).encode()
    for job in ("a1", "a2"):
        submit_job(store, "acme", job, {"train.jsonl": rows}, default_manifest("train.jsonl"))
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", ["acme__a1", "acme__a2"])
        hits = []
        for job in ("a1", "a2"):
            result = materialize([raw_dataset, validated_dataset, tokenized_dataset], partition_key=f"acme__{job}",
                                 resources=local_resources, instance=instance)
            hits.append(result.asset_materializations_for_node("tokenized_dataset")[0].metadata["cache_hit"].value)
    assert hits == [False, True]


def test_message_weights_on_a_template_without_generation_spans_are_the_tenants_error(local_resources, tiny_model,
                                                                                      tmp_path):
    import shutil

    # A local base model whose template, like many on the hub, marks no generation spans.
    base = tmp_path / "no-spans-model"
    shutil.copytree(tiny_model.path, base)
    template = (base / "chat_template.jinja").read_text()
    (base / "chat_template.jinja").write_text(
        template.replace("{% generation %}", "").replace("{% endgeneration %}", ""))
    rows = synthetic.acme_support(100)
    rows[30] = [*rows[30][:2], {**rows[30][2], "weight": 0}, {"role": "user", "content": "And?"},
                {"role": "assistant", "content": "That is all."}]
    store = local_resources["landing"].store()
    submit_job(store, "acme", "weights-v1", {"t.jsonl": synthetic.to_jsonl(rows).encode()},
               default_manifest("t.jsonl", base_model="acme/no-spans"))
    from resources import BaseModelsResource

    registered = BaseModelsResource(cache_dir=local_resources["base_models"].cache_dir,
                                    aliases={"acme/no-spans": str(base)})
    with instance_for_test() as instance:
        _, run = _run(instance, {**local_resources, "base_models": registered}, "acme", "weights-v1")
        error_class, reason = failure_reason(instance, run)
    assert error_class == "user"
    assert reason.startswith("messages[].weight: the chat template marks 0 generation span(s) "
                             "for 2 assistant message(s)")
    assert b"cannot honour message weights" in store.read_bytes(results_key("acme", "weights-v1", "rejected.md"))
    tenant_dir = Path(local_resources["artifacts"].root) / "tenants" / "acme"
    assert (not list((tenant_dir / "cache").rglob("*.parquet*"))
            and not (tenant_dir / "jobs/weights-v1/training").exists())


def test_assets_read_uploads_and_write_reports_over_s3(local_resources, s3_endpoint, s3_bucket):
    from resources import LandingZoneResource

    landing = LandingZoneResource(url=f"s3://{s3_bucket}/landing", endpoint_url=s3_endpoint, region_name="us-east-1")
    store = landing.store()
    submit_job(store, "acme", "s3-v1", {"train.jsonl": synthetic.to_jsonl(synthetic.acme_support(100)).encode()},
               default_manifest("train.jsonl"))
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("tenant_jobs", ["acme__s3-v1"])
        result = materialize([raw_dataset, validated_dataset], partition_key="acme__s3-v1",
                             resources={**local_resources, "landing": landing}, instance=instance)
    assert result.success
    assert result.asset_materializations_for_node("validated_dataset")[0].metadata["records"].value == 100
    assert result.asset_materializations_for_node("validated_dataset")[0].metadata["dagster/row_count"].value == 100
    assert b"Validation passed" in store.read_bytes(results_key("acme", "s3-v1", "validation.md"))


def test_unknown_base_model_is_the_tenants_error_and_costs_no_training(local_resources):
    store = local_resources["landing"].store()
    submit_job(store, "acme", "nobase-v1", {"t.jsonl": synthetic.to_jsonl(synthetic.acme_support(100)).encode()},
               default_manifest("t.jsonl", base_model="nobody/no-such-model"))
    with instance_for_test() as instance:
        _, run = _run(instance, local_resources, "acme", "nobase-v1")
        error_class, reason = failure_reason(instance, run)
    assert error_class == "user"
    assert reason.startswith("manifest.yaml: field 'base_model': base_model 'nobody/no-such-model' is not registered")
    assert not (Path(local_resources["artifacts"].root) / "tenants/acme/jobs/nobase-v1/training").exists()


def test_preflight_blocks_examples_too_long_for_the_template_and_warnings_do_not(local_resources):
    store = local_resources["landing"].store()
    rows = synthetic.acme_support(100)
    rows.append(rows[0])  # a duplicate: a warning only
    rows[10] = [{"role": "user", "content": "Please help. " * 40}, {"role": "assistant", "content": "Sure."}]
    submit_job(store, "acme", "long-v1", {"t.jsonl": synthetic.to_jsonl(rows).encode()},
               default_manifest("t.jsonl", hyperparameters={"max_seq_len": 64}))
    with instance_for_test() as instance:
        result, run = _run(instance, local_resources, "acme", "long-v1")
        checks = {e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
                  for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
        error_class, reason = failure_reason(instance, run)
    assert checks["schema"].passed and not checks["exact_duplicates"].passed  # the warning did not block
    assert not checks["fits_max_seq_len"].passed
    assert error_class == "user" and reason.startswith("1 example(s) do not fit max_seq_len=64")
    assert "t.jsonl line 11, messages: " in reason
    assert "tokens after the chat template; max_seq_len is 64" in reason
    assert not (Path(local_resources["artifacts"].root) / "tenants/acme/jobs/long-v1/training").exists()
    report = json.loads(store.read_bytes(results_key("acme", "long-v1", "validation.json")))
    assert report["stage"] == "preflight" and report["preflight"]["too_long"] == 1
    assert {w["kind"] for w in report["warnings"]} >= {"exact_duplicates"}


@pytest.mark.quality
def test_preference_pairs_become_a_dpo_adapter_that_prefers_the_chosen_answers(local_resources):
    store = local_resources["landing"].store()
    rows = "".join(json.dumps(r) + "\n" for r in synthetic.acme_preferences(150, seed=6)).encode()
    submit_job(store, "acme", "prefs-v1", {"pairs.jsonl": rows},
               default_manifest("pairs.jsonl", objective="dpo", hyperparameters={"epochs": 4}))
    with instance_for_test() as instance:
        result, run = _run(instance, local_resources, "acme", "prefs-v1")
        spec = result.asset_materializations_for_node("adapter")[0].metadata["spec"].value
        assert spec["objective"] == "dpo"
    (record,) = local_resources["catalog"].adapters().list("acme")
    base, tuned = (record.metrics[f"holdout_preference_accuracy_{side}"] for side in ("base", "tuned"))
    assert tuned > base + 0.1
    report = store.read_bytes(results_key("acme", "prefs-v1", "eval_report.md")).decode()
    assert "| holdout | preference_accuracy |" in report
    # Four epochs of style-only pairs at the automatic learning rate teach the preference and cost the tiny
    # model its general skills: the golden set shows it, and the platform's gate keeps the adapter a draft.
    golden_base, golden_tuned = (record.metrics[f"golden_exact_match_{side}"] for side in ("base", "tuned"))
    assert golden_base - golden_tuned > 0.1
    assert run.status == DagsterRunStatus.FAILURE and record.status == "draft"
    gates = store.read_bytes(results_key("acme", "prefs-v1", "quality_gates.md")).decode()
    assert "| `golden_regression <= 0.1` | platform |" in gates and "General skills regressed" in gates
    # The continuous golden metric decides it by a wide margin: the golden answers became several times as
    # perplexing (measured x9.1, interval x6.6 to x12.2), where the gate allows x1.5.
    ratio = json.loads(store.read_bytes(results_key("acme", "prefs-v1", "eval_report.json")))["estimates"][
        "golden_perplexity_ratio"]
    assert ratio["low"] > 3 and "misses `golden_perplexity_ratio <= 1.5` with 95% confidence" in gates


def test_sft_manifest_over_preference_pairs_is_refused_before_training(local_resources):
    store = local_resources["landing"].store()
    rows = "".join(json.dumps(r) + "\n" for r in synthetic.acme_preferences(120)).encode()
    submit_job(store, "acme", "mixed-up", {"pairs.jsonl": rows}, default_manifest("pairs.jsonl"))
    with instance_for_test() as instance:
        _, run = _run(instance, local_resources, "acme", "mixed-up")
        error_class, reason = failure_reason(instance, run)
    assert error_class == "user"
    assert "pairs.jsonl line 1 is a preference pair ('preference'): set 'objective: dpo'" in reason


def test_an_adapter_that_fails_its_gates_or_cannot_be_served_stays_a_draft_with_advice(
        local_resources, platform_file, receiver, monkeypatch):
    """One run fails both gates, to spend one training run: a manifest gate it cannot meet, and target modules
    the serving fleet does not load (a fleet that serves attention projections only). The draft is registered,
    the run fails as the tenant's error, and the tenant reads why and what to try."""
    url, received, _ = receiver
    platform_file.write_text(platform_file.read_text().replace(
        "acme: {tier: premium}", f"acme: {{tier: premium, webhook_url: '{url}', webhook_secret_env: ACME_HOOK}}")
        + "serving: {target_modules: [q_proj, k_proj, v_proj, o_proj]}\n")
    monkeypatch.setenv("ACME_HOOK", SECRET)
    store = local_resources["landing"].store()
    rows = synthetic.to_jsonl(synthetic.acme_support(150)).encode()
    submit_job(store, "acme", "dora-v1", {"train.jsonl": rows},
               default_manifest("train.jsonl", hyperparameters={"epochs": 4},
                                quality_gates={"holdout_exact_match": ">= 0.99"}))
    with instance_for_test() as instance:
        result, run = _run(instance, local_resources, "acme", "dora-v1")
        assert run.status == DagsterRunStatus.FAILURE
        checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
        assert not checks["serving_compatible"].passed
        assert "target modules ['down_proj', 'gate_proj', 'up_proj'] are not served" in \
            checks["serving_compatible"].description
        assert not checks["quality_gates"].passed
        gates = {r.data["gate"]: r.data for r in checks["quality_gates"].metadata["gates"].value.records}
        assert gates["holdout_exact_match >= 0.99"]["passed"] is False
        assert gates["holdout_exact_match >= 0.99"]["source"] == "manifest"
        error_class, reason = failure_reason(instance, run)
        assert not received  # nothing is sent from inside the run, which holds a slot
        # The failure sensor, after the run: the tenant's failure is final, and the run's notice goes out.
        event = next(iter(instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE))).dagster_event
        sensor_resources = {k: local_resources[k] for k in ("platform", "catalog", "artifacts")}
        for _ in range(2):  # a second evaluation (another attempt, a sensor retry) repeats the delivery id
            resume_failed_runs(build_run_status_sensor_context(
                sensor_name=resume_failed_runs.name, dagster_instance=instance, dagster_run=run, dagster_event=event,
                resources=sensor_resources).for_run_failure())
    assert error_class == "user" and "holdout_exact_match >= 0.99" in reason  # not retried
    (record,) = local_resources["catalog"].adapters().list("acme")
    assert record.status == "draft" and record.method == "lora"
    serving_args = Path(local_resources["artifacts"].root) / "serving" / "ftpipe__tiny-llama.args"
    assert not serving_args.exists() or record.adapter_id not in serving_args.read_text()
    gates = store.read_bytes(results_key("acme", "dora-v1", "quality_gates.md")).decode()
    assert "is **draft**" in gates and "| `holdout_exact_match >= 0.99` | manifest |" in gates
    assert "target modules ['down_proj', 'gate_proj', 'up_proj'] are not served" in gates
    assert "What to try:" in gates
    delivery, again = received  # the tenant's endpoint hears why, signed
    assert delivery["verified"] and delivery["headers"]["X-Ftpipe-Event"] == "job.gate_failed"
    assert delivery["headers"]["X-Ftpipe-Delivery"] == again["headers"]["X-Ftpipe-Delivery"]  # dropped as a repeat
    body = json.loads(delivery["body"])
    assert body["adapter_id"] == record.adapter_id and body["status"] == "draft" and body["advice"]


def test_an_unservable_adapter_launched_by_hand_is_refused_before_training(local_resources):
    """Admission refuses DoRA on a fleet that loads none; a run started by hand from the UI skips admission,
    and the pre-flight refuses it the same way, before any GPU time."""
    store = local_resources["landing"].store()
    submit_job(store, "acme", "dora-v1", {"train.jsonl": synthetic.to_jsonl(synthetic.acme_support(100)).encode()},
               default_manifest("train.jsonl", method="dora"))
    with instance_for_test() as instance:
        result, run = _run(instance, local_resources, "acme", "dora-v1")
        error_class, reason = failure_reason(instance, run)
    assert (error_class, reason) == ("user", "manifest.yaml: field 'method': the serving fleet does not load DoRA "
                                             "adapters; use lora or rslora")
    assert not result.asset_materializations_for_node("tokenized_dataset")
    assert b"does not load DoRA" in store.read_bytes(results_key("acme", "dora-v1", "rejected.md"))
