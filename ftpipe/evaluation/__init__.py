"""Evaluation with lm-eval: custom tasks over local files, base model vs tuned adapter."""
