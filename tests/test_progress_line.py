import math

from ftpipe.training.progress_line import format_progress, parse_progress


def test_a_logged_step_reads_back_as_the_metrics_it_was_made_from():
    line = format_progress({"step": 3, "max_steps": 10, "loss": 1.23456, "learning_rate": 2e-3, "grad_norm": 0.5,
                            "tokens_per_second": 1234.4, "memory_mb": 300.2})
    assert parse_progress(line) == {"step": 3, "total_steps": 10, "train_loss": 1.2346, "learning_rate": 0.002,
                                    "grad_norm": 0.5, "tokens_per_second": 1234.0, "memory_mb": 300.0}
    assert parse_progress(format_progress({"step": 4, "max_steps": 10, "eval_loss": 0.5})) == {
        "step": 4, "total_steps": 10, "valid_loss": 0.5}


def test_non_finite_values_read_as_missing_and_other_lines_as_none():
    line = format_progress({"step": 2, "max_steps": 5, "loss": math.nan, "learning_rate": 1e-3,
                            "grad_norm": math.inf, "tokens_per_second": 1.0, "memory_mb": 1.0})
    parsed = parse_progress(line)
    assert parsed["train_loss"] is None and parsed["grad_norm"] is None and parsed["step"] == 2
    for other in ("training stops if process 12 exits", "step 3/10", "step x/10 loss=1", "checkpoint committed"):
        assert parse_progress(other) is None
