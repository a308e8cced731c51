"""The pod a trainer runs in on Kubernetes: GPUs of its pool's node group, shared storage, a large /dev/shm.

Pure data: ``resources.trainer`` hands it to dagster-k8s's ``PipesK8sClient`` as ``base_pod_spec``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PodSettings:
    image: str
    artifacts_claim: str
    """PersistentVolumeClaim holding FTPIPE_ARTIFACTS (snapshots, caches, checkpoints, adapters)."""
    artifacts_mount: str
    """Where the claim is mounted; the same path the run workers use, so spec paths resolve in the pod."""
    model_cache_claim: str | None = None
    model_cache_mount: str | None = None
    service_account: str | None = None
    shm_size_gb: int = 16
    cpu_per_gpu: int = 8
    memory_gb_per_gpu: int = 64
    image_pull_secrets: tuple[str, ...] = ()
    extra_labels: dict[str, str] = field(default_factory=dict)


def trainer_pod(settings: PodSettings, command: list[str], gpus: int, node_selector: dict[str, str],
                tolerations: list[dict], labels: dict[str, str]) -> tuple[dict, dict]:
    """(base_pod_meta, base_pod_spec) in the Kubernetes API's camelCase, as PipesK8sClient takes them."""
    volumes = [
        {"name": "artifacts", "persistentVolumeClaim": {"claimName": settings.artifacts_claim}},
        # NCCL and DataLoader workers exchange tensors through /dev/shm; the container default is 64 MB.
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{settings.shm_size_gb}Gi"}},
    ]
    mounts: list[dict] = [{"name": "artifacts", "mountPath": settings.artifacts_mount},
                          {"name": "dshm", "mountPath": "/dev/shm"}]
    if settings.model_cache_claim:
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": settings.model_cache_claim,
                                                                    "readOnly": True}})
        mounts.append({"name": "models", "mountPath": settings.model_cache_mount, "readOnly": True})
    resources = {
        "limits": {"nvidia.com/gpu": str(gpus), "memory": f"{settings.memory_gb_per_gpu * gpus}Gi"},
        "requests": {"nvidia.com/gpu": str(gpus), "cpu": str(settings.cpu_per_gpu * gpus),
                     "memory": f"{settings.memory_gb_per_gpu * gpus}Gi"},
    }
    container = {"name": "trainer", "image": settings.image, "command": command, "resources": resources,
                 "volumeMounts": mounts}
    spec = {
        "restartPolicy": "Never",  # a failed attempt is retried by Dagster, resuming from its checkpoint
        "containers": [container],
        "volumes": volumes,
        "nodeSelector": dict(node_selector),
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, *tolerations],
        # Time for the SIGTERM handshake: checkpoint at the next step, then exit.
        "terminationGracePeriodSeconds": 300,
    }
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in settings.image_pull_secrets]
    meta = {"labels": {"app.kubernetes.io/component": "ftpipe-trainer", **settings.extra_labels, **labels}}
    return meta, spec
