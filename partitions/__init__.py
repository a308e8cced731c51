"""Per-tenant job partitions: the key rules (``keys``, plain Python) and the Dagster definition (``tenant_jobs``)."""
