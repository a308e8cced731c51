"""The checkpoint commit protocol on its own: whole or absent, verified, pruned, broken ones set aside."""

from pathlib import Path

import pytest

from ftpipe.training import checkpoints
from ftpipe.training.checkpoints import CheckpointArea


def _stage(area: CheckpointArea, step: int, payload: bytes = b"weights") -> Path:
    staged = area.staging / f"checkpoint-{step}"
    staged.mkdir(parents=True)
    (staged / "adapter_model.safetensors").write_bytes(payload * 100)
    (staged / "trainer_state.json").write_text('{"global_step": %d}' % step)
    return staged


@pytest.fixture
def area(tmp_path) -> CheckpointArea:
    area = CheckpointArea(tmp_path / "checkpoints")
    area.reset_staging()
    return area


def test_commit_moves_a_sealed_checkpoint_out_of_staging_and_keeps_the_newest(area):
    for step in (10, 20, 30):
        committed = checkpoints.commit(area, _stage(area, step), keep=2)
        assert committed == area.root / f"checkpoint-{step}" and checkpoints.verify(committed) is None
    assert [p.name for p in area.committed()] == ["checkpoint-30", "checkpoint-20"]
    assert list(area.staging.iterdir()) == []


def test_steps_sort_numerically_not_as_text(area):
    for step in (9, 10, 100):
        checkpoints.commit(area, _stage(area, step), keep=5)
    assert [checkpoints.step_of(p) for p in area.committed()] == [100, 10, 9]


@pytest.mark.parametrize("damage, reason", [
    (lambda d: (d / "adapter_model.safetensors").write_bytes(b"weights" * 50), "bytes"),
    (lambda d: (d / "adapter_model.safetensors").write_bytes(b"WEIGHTS" * 100), "checksum"),
    (lambda d: (d / "trainer_state.json").unlink(), "missing"),
    (lambda d: (d / checkpoints.MANIFEST_NAME).unlink(), "never finished"),
])
def test_a_damaged_newest_checkpoint_is_set_aside_and_the_previous_one_used(area, damage, reason):
    checkpoints.commit(area, _stage(area, 10), keep=3)
    newest = checkpoints.commit(area, _stage(area, 20), keep=3)
    damage(newest)
    assert reason in checkpoints.verify(newest)
    messages = []
    assert checkpoints.latest_valid(area, messages.append) == area.root / "checkpoint-10"
    assert "checkpoint-20" in messages[0] and reason in messages[0]
    assert [p.name for p in area.rejected.iterdir()] == ["checkpoint-20-corrupt"]


def test_a_save_killed_halfway_is_never_resumed_from(area):
    checkpoints.commit(area, _stage(area, 10), keep=3)
    _stage(area, 20)  # written, never committed: the process died before the rename
    area.reset_staging()  # what the next attempt does first
    assert checkpoints.latest_valid(area) == area.root / "checkpoint-10"
    assert list(area.staging.iterdir()) == []


def test_recommitting_a_step_replaces_the_old_one_without_losing_it(area):
    checkpoints.commit(area, _stage(area, 10, b"first"), keep=3)
    checkpoints.commit(area, _stage(area, 10, b"second"), keep=3)
    assert (area.root / "checkpoint-10" / "adapter_model.safetensors").read_bytes().startswith(b"second")
    assert (area.rejected / "checkpoint-10-superseded").is_dir()


def test_no_checkpoint_at_all(area):
    assert checkpoints.latest_valid(area) is None
