"""adapter: SFT in a separate trainer process launched through Dagster Pipes, resumable from checkpoints."""

import json
import re
import signal
import tempfile
from pathlib import Path
from typing import cast

from dagster import AssetExecutionContext, AssetKey, DagsterInstance, Failure, MetadataValue, Output, asset

# Not exported under a public name; PipesSubprocessClient raises it when the trainer process exits non-zero.
from dagster._core.errors import DagsterPipesExecutionError

from ft_assets.gpu import run_on_pool
from ft_assets.partition import ERROR_CLASS_KEY, PLATFORM_ERROR, publish
from ftpipe.catalog.adapters import now_utc
from ftpipe.digests import combine
from ftpipe.metering.classify import INTERRUPTED, LOST
from ftpipe.metering.ledger import UsageRecord
from ftpipe.records import TokenizedDataset, TrainedAdapter
from ftpipe.tenants import PoolConfig
from ftpipe.training.cost import estimate_cost
from ftpipe.training.plots import as_markdown, curve_from_record
from ftpipe.training.runner import TRAINING_RESULT, completed_training
from ftpipe.training.spec import TrainJobSpec
from ftpipe.training.validation import validation_metadata
from partitions.run_tags import ATTEMPT_TAG, PREEMPTED_TAG
from partitions.tenant_jobs import tenant_jobs_partitions
from resources import (
    ArtifactStoreResource,
    CatalogResource,
    LandingZoneResource,
    PlatformResource,
    TrainerLauncherResource,
)


def _unreported_outcome(context: AssetExecutionContext) -> str:
    """A trainer stopped by preemption may not get to report before the run worker is interrupted."""
    run = context.instance.get_run_by_id(context.run.run_id)
    return INTERRUPTED if run is not None and PREEMPTED_TAG in run.tags else LOST


@asset(partitions_def=tenant_jobs_partitions, group_name="training", kinds={"pytorch"})
def adapter(context: AssetExecutionContext, tokenized_dataset: TokenizedDataset, trainer: TrainerLauncherResource,
            artifacts: ArtifactStoreResource, landing: LandingZoneResource, platform: PlatformResource,
            catalog: CatalogResource) -> Output[TrainedAdapter]:
    """An adapter trained with TRL + PEFT; loss and throughput stream back as logs and metadata.

    The training directory is derived from the resolved spec, so a retried or resumed run of the same
    partition finds the checkpoints of the runs before it and continues from the newest valid one, and a run
    of a partition whose training already completed gets that training back, without a trainer or a bill.
    """
    tenant, job = tokenized_dataset.tenant, tokenized_dataset.job
    spec = tokenized_dataset.train_spec()  # the plan the pre-flight reported
    spec_hash = combine(json.dumps(spec.to_dict(), sort_keys=True), tokenized_dataset.base_model.digest)
    spec.output_dir = str(artifacts.layout().training_dir(tenant, job, spec_hash))
    finished = completed_training(spec)
    if finished is not None:
        return _reused_training(context, tokenized_dataset, spec, spec_hash, finished)
    context.log.info(f"training {spec.method} on {tokenized_dataset.base_model.model_id}: {spec.to_dict()}")
    pool_name = tokenized_dataset.pool
    pool = platform.config().pools[pool_name]
    started = now_utc()
    ending: dict = {}
    try:
        invocation = run_on_pool(context, trainer, catalog, pool_name, pool, "ftpipe.training.pipes_main",
                                 extras={"spec": spec.to_dict()},
                                 labels={"ftpipe.io/tenant": tenant, "ftpipe.io/job": job})
        ending = next((m for m in reversed(invocation.get_custom_messages()) if "outcome" in m), {})
    except DagsterPipesExecutionError as exc:
        raise Failure(description=f"the trainer process died without reporting ({_exit_status(exc)}); the next "
                                  "attempt resumes from its last checkpoint",
                      metadata={ERROR_CLASS_KEY: PLATFORM_ERROR}) from exc
    finally:
        # Metered however the trainer ended, even when the run is being terminated around it.
        usage = UsageRecord.measure(
            context.run.run_id, tenant, job, int(context.run.tags.get(ATTEMPT_TAG, "1")), pool_name, pool.gpus_per_slot,
            pool.price_per_gpu_hour, started, now_utc(), ending.get("outcome") or _unreported_outcome(context),
            ending.get("error_class"), ending.get("message") or ending.get("stop_reason")
            or "the trainer process ended without reporting how (killed, or its node lost)")
        catalog.ledger().record(usage)
        context.log.info(f"metered {usage.gpu_seconds:.1f} GPU-seconds on {pool_name}: {usage.category}"
                         f" ({'billed' if usage.billable else 'refunded'})")
    _fail_unless_completed(ending, landing, tenant, job)
    reported = invocation.get_materialize_result().metadata or {}
    training = json.loads((Path(spec.output_dir) / TRAINING_RESULT).read_text())
    return Output(
        _trained(tokenized_dataset, spec, spec_hash, training),
        metadata={**reported, "spec": MetadataValue.json(spec.to_dict()), "reused_training": False,
                  "gpu_seconds": round(usage.gpu_seconds, 3), "billed": usage.billable,
                  **_pace(tokenized_dataset.base_model.num_parameters, pool_name, pool, training,
                          tokenized_dataset.expected_seconds)},
    )


def _trained(tokenized_dataset: TokenizedDataset, spec: TrainJobSpec, spec_hash: str,
             training: dict) -> TrainedAdapter:
    """The record the adapter asset hands on; its spec names the output folder the trainer wrote to."""
    fields = dict(tokenized_dataset) | {"spec": spec.to_dict()}
    return TrainedAdapter(**fields, adapter_dir=f"{spec.output_dir}/adapter", spec_hash=spec_hash, training=training)


def _reused_training(context: AssetExecutionContext, tokenized_dataset: TokenizedDataset, spec: TrainJobSpec,
                     spec_hash: str, finished: dict) -> Output[TrainedAdapter]:
    """The output of a training that completed before, read back from its record: no trainer, no bill."""
    context.log.info(f"reusing the finished training in {spec.output_dir} ({finished['steps']} steps): "
                     "no trainer launched, nothing metered")
    with tempfile.TemporaryDirectory() as tmp:  # drawn again from the record: the folder may be read-only
        curve = as_markdown(curve_from_record(finished, Path(tmp) / "loss_curve.png"))
    return Output(
        _trained(tokenized_dataset, spec, spec_hash, finished),
        metadata={"reused_training": True, "steps": finished["steps"],
                  "final_loss": _sig(finished["final_loss"], 4), **validation_metadata(finished),
                  "loss_curve": MetadataValue.md(curve),
                  "spec": MetadataValue.json(spec.to_dict()), "gpu_seconds": 0.0, "billed": False},
    )


def _fail_unless_completed(ending: dict, landing: LandingZoneResource, tenant: str, job: str) -> None:
    """The step's failure for a trainer that did not complete: a failed training as the trainer classed it (with
    its advice in the tenant's results, never retried), a stopped or silent one as the platform's (resumed)."""
    outcome = ending.get("outcome")
    if outcome == "failed":
        report = "\n".join([ending["message"], *(f"- {line}" for line in ending["advice"])])
        publish(landing.store(), tenant, job, "training_failed.md",
                f"# Training of {tenant}/{job} failed\n\n{report}\n")
        raise Failure(description=report, metadata={ERROR_CLASS_KEY: ending["error_class"]}, allow_retries=False)
    if outcome == "interrupted":
        raise Failure(
            description=f"trainer stopped at step {ending['steps']}/{ending['max_steps']} ({ending['stop_reason']});"
                        f" a new run resumes from {ending['last_checkpoint']}",
            metadata={ERROR_CLASS_KEY: PLATFORM_ERROR},
        )
    if outcome != "completed":
        raise Failure(description="the trainer process ended without saying how",
                      metadata={ERROR_CLASS_KEY: PLATFORM_ERROR})


def _exit_status(exc: Exception) -> str:
    """``killed by SIGKILL`` or ``exit code 1`` from Pipes' "External execution process failed with code N"."""
    found = re.search(r"code (-?\d+)", str(exc))
    if not found:
        return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    code = int(found.group(1))
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _sig(x: float, digits: int = 3) -> float:
    return float(f"{x:.{digits}g}")


def _pace(num_parameters: int, pool_name: str, pool: PoolConfig, training: dict,
          expected: float | None) -> dict:
    """This run's training time against the pre-flight's ``expected`` seconds (the GPU run's
    ``ftpipe/expected-seconds``, what preemption reads), and the pair that calibrates that expectation
    (``pool_calibration``): the training time over the FLOP estimate of the same tokens, and the trainer's
    time outside training."""
    seconds, steps = training["seconds"], training["steps_run"]
    if steps <= 0 or seconds <= 0:
        return {}
    # The pre-flight's formula; trained_tokens counts one process's share of each step.
    estimate = 3600 * estimate_cost(num_parameters, training["trained_tokens"] * pool.gpus_per_slot, pool_name,
                                    pool.peak_tflops, pool.mfu, pool.gpus_per_slot, 0.0).wall_hours
    pace = {"pool": pool_name, "measured_seconds": _sig(seconds), "measured_steps": steps,
            "seconds_per_step": _sig(seconds / steps), "measured_over_estimate": _sig(seconds / estimate),
            "overhead_seconds": _sig(max(0.0, training["process_seconds"] - seconds))}
    if expected:
        whole_job = seconds / steps * training["steps"]  # a resumed run extrapolates its pace to every step
        pace.update(expected_seconds=_sig(float(expected)), expected_over_measured=_sig(float(expected) / whole_job))
    return pace


def pool_calibration(instance: DagsterInstance, pool_name: str, last: int = 20) -> list[tuple[float, float]]:
    """(measured_over_estimate, overhead_seconds) of the pool's latest trainings, newest first, for
    ``ftpipe.training.cost.calibrated_seconds``; a reused training measured nothing and is not among them."""
    runs = []
    for record in instance.fetch_materializations(AssetKey("adapter"), limit=10 * last).records:
        materialization = record.asset_materialization
        assert materialization is not None  # fetch_materializations returns materializations only
        metadata = materialization.metadata
        if "measured_over_estimate" in metadata and metadata["pool"].value == pool_name:
            # Written by _pace as floats; Dagster types a metadata value's .value as any value metadata holds.
            measured, overhead = metadata["measured_over_estimate"].value, metadata["overhead_seconds"].value
            runs.append((cast(float, measured), cast(float, overhead)))
    return runs[:last]
