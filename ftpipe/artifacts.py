"""Where the platform keeps what it derives from tenants' data: snapshots, caches, training runs, adapters.

Everything of a tenant lives under ``tenants/{tenant}/``, so deleting a tenant is deleting one folder.
"""

from __future__ import annotations

from pathlib import Path

from partitions.keys import validate_name


class ArtifactLayout:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()

    def tenant_dir(self, tenant: str) -> Path:
        return self.root / "tenants" / validate_name("tenant", tenant)

    def job_dir(self, tenant: str, job: str) -> Path:
        return self.tenant_dir(tenant) / "jobs" / validate_name("job", job)

    def snapshot_dir(self, tenant: str, job: str, dataset_digest: str) -> Path:
        """An immutable copy of the uploaded files, by content: a later upload never changes it."""
        return self.job_dir(tenant, job) / "snapshots" / dataset_digest[:16]

    def tokenized_cache(self, tenant: str, cache_key: str) -> Path:
        return self.tenant_dir(tenant) / "cache" / "tokenized" / f"{cache_key[:24]}.parquet"

    def tokenized_holdout_cache(self, tenant: str, cache_key: str) -> Path:
        """The held-out split of the same cache entry, tokenized alike: the validation loss during training."""
        return self.tenant_dir(tenant) / "cache" / "tokenized" / f"{cache_key[:24]}.holdout.parquet"

    def training_dir(self, tenant: str, job: str, spec_hash: str) -> Path:
        """Keyed by the resolved spec, so a retried run of the same job finds its own checkpoints."""
        return self.job_dir(tenant, job) / "training" / spec_hash[:16]

    def run_dir(self, tenant: str, job: str, run_id: str) -> Path:
        return self.job_dir(tenant, job) / "runs" / run_id

    def registry_dir(self, tenant: str, adapter_id: str) -> Path:
        return self.tenant_dir(tenant) / "adapters" / adapter_id
