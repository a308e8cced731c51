"""Where Dagster keeps asset values between steps: inside each tenant's own artifact folder, as JSON.

The values passed between the fine-tuning assets (``ftpipe.records``) carry a tenant's manifest, data statistics
and report samples. Dagster's default IO manager would pickle them under ``$DAGSTER_HOME/storage/<asset>/
<partition>``, outside the tenant's folder; this one writes a partition's records as JSON under
``tenants/{tenant}/jobs/{job}/dagster-io/``, so that deleting a tenant's folder deletes them too, and a value
written by another version of the code is refused by name rather than unpickled into the wrong shape.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from dagster import ConfigurableIOManager, InputContext, OutputContext
from pydantic import Field

from ftpipe.artifacts import ArtifactLayout
from ftpipe.records import AssetRecord, StaleRecord
from partitions.keys import parse_partition_key


class TenantIOManager(ConfigurableIOManager):
    root: str = Field(description="The artifact store's root folder (the same as ArtifactStoreResource.root)")

    def _path(self, context: InputContext | OutputContext) -> Path:
        name = "__".join(context.asset_key.path) if context.has_asset_key else "__".join(context.get_identifier())
        if context.has_asset_partitions:
            tenant, job = parse_partition_key(context.asset_partition_key)
            return ArtifactLayout(self.root).job_dir(tenant, job) / "dagster-io" / f"{name}.json"
        return Path(self.root) / "dagster-io" / f"{name}.json"

    def handle_output(self, context: OutputContext, obj) -> None:
        if obj is None:
            return
        if not isinstance(obj, AssetRecord):
            raise TypeError(f"{type(obj).__name__} is not an ftpipe.records.AssetRecord: the values passed between "
                            "assets are records, stored as JSON")
        path = self._path(context)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(obj.to_json())
        os.replace(tmp, path)  # a reader never sees half a value

    def load_input(self, context: InputContext) -> AssetRecord:
        path = self._path(context)
        if not path.exists() and path.with_suffix(".pickle").exists():
            raise StaleRecord(f"{path.with_suffix('.pickle')} was written by an earlier version of the platform, "
                              "which pickled the values between assets; materialize the asset again for this "
                              "partition")
        return AssetRecord.from_json(path.read_text(encoding="utf-8"), source=str(path))
