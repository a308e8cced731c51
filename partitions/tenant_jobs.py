from dagster import DynamicPartitionsDefinition

# One partition per tenant job; keys come only from partitions.keys.partition_key.
tenant_jobs_partitions = DynamicPartitionsDefinition(name="tenant_jobs")
