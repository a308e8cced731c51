"""The fine-tuning API on one tenant platform, as the ``platform`` fixture (tests/conftest.py) serves it."""

import json

import openai
from dagster import DagsterRunStatus, build_sensor_context
from dagster._core.test_utils import create_run_for_test

from partitions.run_tags import FINETUNE_JOB, PARTITION_TAG, PREPARE_JOB, ROUTED_POOL_TAG, finetune_tags
from sensors.status_files import status_files
from sensors.uploads import upload_sensor
from tests.helpers.origins import finetune_origin


class Platform:
    """The API on one tenant platform: its resources, its Dagster instance, and a client per tenant."""

    def __init__(self, url, api, resources, instance, keys):
        self.url, self.api, self.resources, self.instance, self.keys = url, api, resources, instance, keys
        self.store = resources["landing"].store()

    def client(self, tenant: str, **kwargs) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.keys[tenant], max_retries=0, **kwargs)

    def tick(self, cursor=None):
        context = build_sensor_context(instance=self.instance, cursor=cursor, resources={
            name: self.resources[name] for name in ("landing", "platform", "base_models", "catalog")})
        return upload_sensor(context)

    def status_file(self, tenant: str, job: str) -> dict:
        return json.loads(self.store.read_bytes(f"tenants/{tenant}/results/{job}/status.json"))

    def write_status_files(self, cursor=None):
        """One tick of the sensor that writes ``status.json``; its new cursor."""
        context = build_sensor_context(instance=self.instance, cursor=cursor, resources={
            name: self.resources[name] for name in ("landing", "catalog")})
        status_files(context)
        return context.cursor

    def prepare(self, request, status=DagsterRunStatus.QUEUED):
        """The upload sensor's run, as the daemon's sensor runner creates it: the job's first stage."""
        return create_run_for_test(self.instance, job_name=PREPARE_JOB, status=status,
                                   remote_job_origin=finetune_origin(PREPARE_JOB),
                                   tags={**request.tags, PARTITION_TAG: request.partition_key})

    def finetune(self, request, status=DagsterRunStatus.QUEUED, **tags):
        """The job's second stage, as the stage sensor queues it once the first has succeeded."""
        prepared = self.prepare(request, DagsterRunStatus.SUCCESS)
        stage_tags = finetune_tags(prepared.tags, request.tags[ROUTED_POOL_TAG], 60, prepared.run_id)
        return create_run_for_test(self.instance, job_name=FINETUNE_JOB, status=status,
                                   remote_job_origin=finetune_origin(),
                                   tags={**stage_tags, PARTITION_TAG: request.partition_key, **tags})

    def queue(self, result, status=DagsterRunStatus.QUEUED):
        """The job of the tick's one run request, prepared and at ``status`` in its GPU stage."""
        (request,) = result.run_requests
        return self.finetune(request, status)
