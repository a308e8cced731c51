from __future__ import annotations

import sys

from dagster import ConfigurableResource, PipesSubprocessClient
from dagster._core.pipes.client import PipesClientCompletedInvocation
from pydantic import Field

# The trainer never reaches a model hub at run time: weights come from the base-model registry.
_OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false"}


class TrainerLauncherResource(ConfigurableResource):
    """Launches GPU work (training, evaluation) as a separate process speaking Dagster Pipes.

    The local launcher starts a subprocess on the run worker's machine; the process streams logs and reports
    metadata back over Pipes, so the heavy ML imports and the GPU never live in the run worker itself.
    """

    python_executable: str = Field(default=sys.executable)
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the trainer process")
    stop_grace_seconds: float = Field(
        default=300, description="How long a terminated run waits for the trainer to checkpoint and exit")

    def run(self, context, module: str, extras: dict, devices: str | None = None) -> PipesClientCompletedInvocation:
        env = {**_OFFLINE_ENV, **self.env}
        if devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = devices
        client = PipesSubprocessClient(env=env, termination_timeout_seconds=self.stop_grace_seconds)
        return client.run(command=[self.python_executable, "-m", module], context=context, extras=extras)
