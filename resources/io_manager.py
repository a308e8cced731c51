"""Where Dagster keeps asset values between steps: inside each tenant's own artifact folder.

The values passed between the fine-tuning assets carry a tenant's manifest, data statistics and report
samples. Dagster's default IO manager would keep them under ``$DAGSTER_HOME/storage/<asset>/<partition>``,
outside the tenant's folder; this one keeps a partition's values under
``tenants/{tenant}/jobs/{job}/dagster-io/``, so that deleting a tenant's folder deletes them too.
Unpartitioned values (the serving configuration) go to ``dagster-io/`` at the artifact root.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path

from dagster import ConfigurableIOManager, InputContext, OutputContext
from pydantic import Field

from ftpipe.artifacts import ArtifactLayout
from partitions.keys import parse_partition_key


class TenantIOManager(ConfigurableIOManager):
    root: str = Field(description="The artifact store's root folder (the same as ArtifactStoreResource.root)")

    def _path(self, context: InputContext | OutputContext) -> Path:
        name = "__".join(context.asset_key.path) if context.has_asset_key else "__".join(context.get_identifier())
        if context.has_asset_partitions:
            tenant, job = parse_partition_key(context.asset_partition_key)
            return ArtifactLayout(self.root).job_dir(tenant, job) / "dagster-io" / f"{name}.pickle"
        return Path(self.root) / "dagster-io" / f"{name}.pickle"

    def handle_output(self, context: OutputContext, obj) -> None:
        if obj is None:
            return
        path = self._path(context)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            pickle.dump(obj, f)
        os.replace(tmp, path)  # a reader never sees half a value

    def load_input(self, context: InputContext):
        with open(self._path(context), "rb") as f:
            return pickle.load(f)
