from __future__ import annotations

import sys
from typing import Literal

from dagster import ConfigurableResource, PipesClientCompletedInvocation, PipesSubprocessClient
from pydantic import Field

from ftpipe.launch.command import THREAD_ENV, cpu_thread_env, worker_command
from ftpipe.launch.k8s import PodSettings, trainer_pod
from ftpipe.tenants import PoolConfig

# The trainer never reaches a model hub at run time: weights come from the base-model registry.
_OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false"}


class TrainerLauncherResource(ConfigurableResource):
    """Launches GPU work (training, evaluation) as a separate process speaking Dagster Pipes.

    ``local``: a subprocess on the run worker's machine, pinned to its devices by ``CUDA_VISIBLE_DEVICES``.
    ``kubernetes``: a pod on the pool's node group through dagster-k8s's ``PipesK8sClient``. Either way the
    process streams logs and reports metadata back over Pipes, and the heavy ML imports and the GPU never
    live in the run worker itself.
    """

    backend: Literal["local", "kubernetes"] = "local"
    python_executable: str = Field(default=sys.executable)
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the trainer process")
    stop_grace_seconds: float = Field(
        default=300, description="How long a terminated run waits for the trainer to checkpoint and exit")
    # Kubernetes settings (backend: kubernetes)
    image: str | None = Field(default=None, description="Image with this project installed")
    namespace: str | None = None
    artifacts_claim: str | None = Field(default=None, description="PVC holding FTPIPE_ARTIFACTS")
    artifacts_mount: str | None = Field(default=None, description="Its mount path, the same as the run workers'")
    model_cache_claim: str | None = None
    model_cache_mount: str | None = None
    service_account: str | None = None
    shm_size_gb: int = 16

    def run(self, context, module: str, extras: dict, pool: PoolConfig | None = None, devices: str | None = None,
            labels: dict[str, str] | None = None, processes: int | None = None) -> PipesClientCompletedInvocation:
        """``processes``: one per GPU of the slot unless given (evaluation runs as one process)."""
        gpus = processes or (pool.gpus_per_slot if pool else 1)  # on a CPU pool: worker processes per slot
        env = {**_OFFLINE_ENV, **self.env}
        if self.backend == "kubernetes":
            return self._run_pod(context, module, extras, pool, gpus, env, labels or {})
        if devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = devices
        if pool is not None and pool.gpu == "cpu" and not set(THREAD_ENV) & set(self.env):
            # The pool's slots share this machine's cores; an operator's own thread settings (env) win.
            env |= cpu_thread_env(pool.slots, gpus)
        client = PipesSubprocessClient(env=env, termination_timeout_seconds=self.stop_grace_seconds)
        return client.run(command=worker_command(self.python_executable, module, gpus), context=context,
                          extras=extras)

    def pod_settings(self) -> PodSettings:
        if not (self.image and self.artifacts_claim and self.artifacts_mount):
            missing = [n for n in ("image", "artifacts_claim", "artifacts_mount") if not getattr(self, n)]
            raise ValueError(f"the kubernetes trainer backend needs {', '.join(missing)}")
        return PodSettings(image=self.image, artifacts_claim=self.artifacts_claim,
                           artifacts_mount=self.artifacts_mount, model_cache_claim=self.model_cache_claim,
                           model_cache_mount=self.model_cache_mount, service_account=self.service_account,
                           shm_size_gb=self.shm_size_gb)

    def pod_for(self, module: str, pool: PoolConfig | None, gpus: int, labels: dict[str, str]) -> tuple[dict, dict]:
        return trainer_pod(self.pod_settings(), worker_command("python", module, gpus), gpus,
                           pool.node_selector if pool else {}, pool.tolerations if pool else [], labels)

    def _run_pod(self, context, module, extras, pool, gpus, env, labels) -> PipesClientCompletedInvocation:
        from dagster_k8s import PipesK8sClient

        meta, spec = self.pod_for(module, pool, gpus, labels)
        return PipesK8sClient().run(context=context, extras=extras, namespace=self.namespace, env=env,
                                    base_pod_meta=meta, base_pod_spec=spec)
