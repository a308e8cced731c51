"""The one Definitions object of the project (loaded by workspace.yaml)."""

from dagster import Definitions

from ft_assets.billing import billing_job, billing_schedule, monthly_billing
from ft_assets.datasets import raw_dataset, tokenized_dataset, validated_dataset
from ft_assets.evaluation import eval_report
from ft_assets.jobs import finetune_job, prepare_job
from ft_assets.lifecycle import (
    adapter_lifecycle,
    adapter_retention,
    checkpoint_retention,
    checkpoint_retention_schedule,
    delete_tenant_job,
    retention_schedule,
)
from ft_assets.monitoring import golden_reevaluation, golden_reevaluation_job, golden_reevaluation_schedule
from ft_assets.registry import registered_adapter
from ft_assets.serving import refresh_serving_job, serving_schedule, vllm_serving_config
from ft_assets.training import adapter
from resources import resources_from_env
from sensors.failures import resume_failed_runs
from sensors.notifications import notify_succeeded_jobs
from sensors.preemption import preempt_for_premium, requeue_preempted_runs
from sensors.stages import queue_finetune_runs
from sensors.status_files import status_files
from sensors.uploads import upload_sensor

ASSETS = [raw_dataset, validated_dataset, tokenized_dataset, adapter, eval_report, registered_adapter,
          vllm_serving_config, monthly_billing, golden_reevaluation]


def build_defs(resources: dict | None = None) -> Definitions:
    """The project's definitions, with resources from the environment unless given (tests pass their own)."""
    return Definitions(
        assets=ASSETS,
        jobs=[prepare_job, finetune_job, refresh_serving_job, adapter_lifecycle, adapter_retention, delete_tenant_job,
              billing_job, golden_reevaluation_job, checkpoint_retention],
        sensors=[upload_sensor, queue_finetune_runs, resume_failed_runs, notify_succeeded_jobs, preempt_for_premium,
                 requeue_preempted_runs, status_files],
        schedules=[serving_schedule, retention_schedule, billing_schedule, golden_reevaluation_schedule,
                   checkpoint_retention_schedule],
        resources=resources if resources is not None else resources_from_env(),
    )


defs = build_defs()
