"""The trainer's pod on Kubernetes, as dagster-k8s's PipesK8sClient will create it."""

import pytest
from dagster_k8s.pipes import build_pod_body
from kubernetes.client import V1Pod

from ftpipe.tenants import load_platform_config
from resources import TrainerLauncherResource
from resources.settings import REPO_ROOT

LAUNCHER = TrainerLauncherResource(
    backend="kubernetes", image="registry.example.com/ftpipe:1.0", namespace="ftpipe",
    artifacts_claim="ftpipe-artifacts", artifacts_mount="/data/artifacts", model_cache_claim="ftpipe-models",
    model_cache_mount="/data/models", service_account="ftpipe-trainer", shm_size_gb=32,
)


def _pod(pool_name: str) -> V1Pod:
    pool = load_platform_config(REPO_ROOT / "tenants.yaml").pools[pool_name]
    meta, spec = LAUNCHER.pod_for("ftpipe.training.pipes_main", pool, pool.gpus_per_slot,
                                  {"ftpipe.io/tenant": "acme", "ftpipe.io/job": "support-v1"})
    # What PipesK8sClient.run builds from base_pod_meta / base_pod_spec: a typed V1Pod, built strictly (an
    # unknown or misspelt field raises instead of vanishing).
    return build_pod_body("dagster-pipes-abc", image=None, command=None,
                          env_vars={"DAGSTER_PIPES_CONTEXT": "x", "HF_HUB_OFFLINE": "1"},
                          base_pod_meta=meta, base_pod_spec=spec)


def test_a_four_gpu_slot_gets_four_gpus_on_its_node_group_and_one_torchrun():
    pod = _pod("h100x4")
    (container,) = pod.spec.containers
    assert container.image == "registry.example.com/ftpipe:1.0"
    assert container.resources.limits["nvidia.com/gpu"] == container.resources.requests["nvidia.com/gpu"] == "4"
    assert container.command[:5] == ["python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4"]
    assert container.command[-2:] == ["-m", "ftpipe.training.pipes_main"]
    assert pod.spec.node_selector == {"ftpipe.io/pool": "h100x4"}
    assert any(t.key == "nvidia.com/gpu" and t.effect == "NoSchedule" for t in pod.spec.tolerations)
    assert pod.spec.restart_policy == "Never" and pod.spec.termination_grace_period_seconds >= 60
    assert pod.spec.service_account_name == "ftpipe-trainer"
    assert pod.metadata.labels["ftpipe.io/tenant"] == "acme"
    assert {e.name for e in container.env} >= {"DAGSTER_PIPES_CONTEXT", "HF_HUB_OFFLINE"}


def test_shared_memory_and_the_platform_volumes_are_mounted_where_the_run_worker_has_them():
    pod = _pod("h100x1")
    volumes = {v.name: v for v in pod.spec.volumes}
    mounts = {m.name: m for m in pod.spec.containers[0].volume_mounts}
    assert volumes["dshm"].empty_dir.medium == "Memory" and volumes["dshm"].empty_dir.size_limit == "32Gi"
    assert mounts["dshm"].mount_path == "/dev/shm"
    assert volumes["artifacts"].persistent_volume_claim.claim_name == "ftpipe-artifacts"
    assert mounts["artifacts"].mount_path == "/data/artifacts"
    assert volumes["models"].persistent_volume_claim.read_only and mounts["models"].read_only
    assert pod.spec.containers[0].command == ["python", "-m", "ftpipe.training.pipes_main"]  # one GPU: no torchrun


def test_the_kubernetes_backend_refuses_to_start_without_image_and_storage():
    with pytest.raises(ValueError, match="needs image, artifacts_claim, artifacts_mount"):
        TrainerLauncherResource(backend="kubernetes").pod_settings()


def test_the_launcher_hands_its_pod_to_pipes_k8s_client(monkeypatch):
    """No cluster here: capture what the resource passes to PipesK8sClient.run."""
    import dagster_k8s

    seen = {}
    monkeypatch.setattr(dagster_k8s.PipesK8sClient, "run", lambda self, **kwargs: seen.update(kwargs) or "done")
    pool = load_platform_config(REPO_ROOT / "tenants.yaml").pools["h100x8"]
    assert LAUNCHER.run("ctx", "ftpipe.training.pipes_main", {"spec": {}}, pool=pool, labels={}) == "done"
    assert seen["namespace"] == "ftpipe" and seen["extras"] == {"spec": {}} and seen["env"]["HF_HUB_OFFLINE"] == "1"
    assert seen["base_pod_spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "CUDA_VISIBLE_DEVICES" not in seen["env"]  # the device plugin assigns a pod's GPUs
