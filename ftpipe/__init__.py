"""Pure fine-tuning logic: data, base models, training, evaluation and the catalog.

Nothing under this package imports Dagster; the orchestration layer (``ft_assets``, ``partitions``,
``resources``, ``sensors``) calls into it. The trainer and evaluator entry points speak the Dagster Pipes
protocol through the small ``dagster-pipes`` package only.
"""
