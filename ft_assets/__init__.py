"""Dagster assets of the fine-tuning pipeline; ``ft_assets.definitions.defs`` is what workspace.yaml loads."""
