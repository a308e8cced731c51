"""The tenant-facing HTTP API: OpenAI's fine-tuning API in front of the landing zone (``ftpipe serve-api``)."""
