"""The run-failure sensor: the platform's failures are resumed, the tenant's are not."""

import json

import pytest
from dagster import (
    DagsterEventType,
    RunRequest,
    SkipReason,
    build_run_status_sensor_context,
    instance_for_test,
)

from ft_assets.definitions import build_defs
from ftpipe import synthetic
from ftpipe.submission import default_manifest, submit_job
from resources import CatalogResource, TrainerLauncherResource
from sensors.failures import failure_reason, meter_lost_attempt, resume_failed_runs
from tests.helpers.stages import execute_stages
from tests.helpers.webhook_receiver import SECRET

pytestmark = pytest.mark.slow


def _failed_run(instance, resources, tenant, job, sensor_catalog=None):
    key = f"{tenant}__{job}"
    instance.add_dynamic_partitions("tenant_jobs", [key])
    result = execute_stages(build_defs(resources), instance, key, tags={
        "ftpipe/tenant": tenant, "ftpipe/job": job, "ftpipe/attempt": "1", "dagster/priority": "10"})
    assert not result.success
    run = instance.get_run_by_id(result.run_id)
    event = next(iter(instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE))).dagster_event
    return run, build_run_status_sensor_context(sensor_name=resume_failed_runs.name, dagster_instance=instance,
                                                dagster_run=run, dagster_event=event,
                                                resources={"platform": resources["platform"],
                                                           "artifacts": resources["artifacts"],
                                                           "catalog": sensor_catalog or resources["catalog"]},
                                                ).for_run_failure()


def test_a_crashed_trainer_is_a_platform_failure_and_is_resumed(local_resources, tiny_model, tmp_path):
    # The trainer process dies at once, as on a lost node: nothing about the tenant's data is wrong.
    resources = {**local_resources, "trainer": TrainerLauncherResource(python_executable="/bin/false")}
    submit_job(resources["landing"].store(), "acme", "crash-v1",
               {"t.jsonl": synthetic.to_jsonl(synthetic.acme_support(100)).encode()}, default_manifest("t.jsonl"))
    with instance_for_test() as instance:
        run, context = _failed_run(instance, resources, "acme", "crash-v1")
        assert failure_reason(instance, run) == ("platform", "the trainer process died without reporting (exit code "
                                                             "1); the next attempt resumes from its last checkpoint")
        request = resume_failed_runs(context)
        # The training step metered the attempt as lost (refunded) even though its trainer never reported.
        (usage,) = resources["catalog"].ledger().records()
        assert (usage.run_id, usage.attempt, usage.category, usage.billable) == (run.run_id, 1, "lost", False)
        assert usage.reason == "the trainer process ended without reporting how (killed, or its node lost)"
        # A run worker that died before it could write: the sensor meters the attempt, and only once.
        other = CatalogResource(location=str(tmp_path / "other.duckdb"))
        lost = meter_lost_attempt(instance, run, resources["platform"], other)
        assert lost is not None and lost.category == "lost" and not lost.billable
        assert meter_lost_attempt(instance, run, resources["platform"], other) is None
        assert len(other.ledger().records()) == 1
    assert isinstance(request, RunRequest)
    # The GPU stage again, holding its pool's slot; the prepared data is not prepared twice.
    assert (request.job_name, request.partition_key, request.tags["ftpipe/pool"]) == (
        "finetune", "acme__crash-v1", "cpu-local")
    assert request.tags["ftpipe/attempt"] == "2" and request.tags["dagster/priority"] == "10"


def test_bad_data_is_the_tenants_failure_and_is_not_retried(local_resources, platform_file, receiver,
                                                            monkeypatch):
    url, received, _ = receiver
    platform_file.write_text(platform_file.read_text().replace(
        "acme: {tier: premium}", f"acme: {{tier: premium, webhook_url: '{url}', webhook_secret_env: ACME_HOOK}}"))
    monkeypatch.setenv("ACME_HOOK", SECRET)
    submit_job(local_resources["landing"].store(), "acme", "bad-v1", {"t.jsonl": b'{"text": ""}\n'},
               default_manifest("t.jsonl", min_examples=1))
    with instance_for_test() as instance:
        run, context = _failed_run(instance, local_resources, "acme", "bad-v1")
        result = resume_failed_runs(context)
    assert isinstance(result, SkipReason) and "failed on the tenant's input" in result.skip_message
    (delivery,) = received  # the tenant hears of the final failure, signed with its secret
    assert delivery["verified"] and delivery["headers"]["X-Ftpipe-Event"] == "job.failed"
    body = json.loads(delivery["body"])
    assert body["tenant"] == "acme" and body["error_class"] == "user" and "t.jsonl line 1" in body["reason"]
