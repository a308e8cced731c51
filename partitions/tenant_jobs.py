from dagster import DynamicPartitionsDefinition

TENANT_JOBS_PARTITIONS = "tenant_jobs"
"""The partitions' name (``tenant_jobs_partitions.name``, which Dagster types as optional)."""

# One partition per tenant job; keys come only from partitions.keys.partition_key.
tenant_jobs_partitions = DynamicPartitionsDefinition(name=TENANT_JOBS_PARTITIONS)
