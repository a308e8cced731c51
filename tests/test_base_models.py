import json
import shutil

import pytest

from ftpipe.basemodel.registry import BaseModelNotFound, BaseModelRegistry
from ftpipe.basemodel.tiny import TINY_MODEL_ID


def test_tiny_model_is_registered_with_digests_and_loads_like_any_checkpoint(tiny_model):
    from transformers import AutoConfig, AutoTokenizer

    assert tiny_model.model_id == TINY_MODEL_ID and len(tiny_model.digest) == 64
    assert tiny_model.tokenizer_digest and tiny_model.chat_template_digest
    assert AutoConfig.from_pretrained(tiny_model.path).model_type == "llama"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model.path)
    assert tokenizer.eos_token == "<|end|>" and "{% generation %}" in tokenizer.chat_template


def test_registered_local_paths_resolve_through_the_same_code(tiny_model, tmp_path):
    copy = tmp_path / "my-model"
    shutil.copytree(tiny_model.path, copy, ignore=shutil.ignore_patterns("ftpipe_digest.json"))
    registry = BaseModelRegistry(tmp_path / "cache", {"acme/base": str(copy)})
    by_alias = registry.resolve("acme/base")
    assert by_alias.digest == tiny_model.digest  # same files, same version
    assert by_alias.model_id == "acme/base" and by_alias.path == str(copy)


@pytest.mark.parametrize("named", ["{copy}", "", ".", "/", "../x", "{copy}/../my-model"])
def test_a_path_is_never_resolved_however_it_is_written(tiny_model, tmp_path, named):
    copy = tmp_path / "my-model"
    shutil.copytree(tiny_model.path, copy)
    with pytest.raises(BaseModelNotFound, match="is not registered on this platform; registered: ftpipe/tiny-llama"):
        BaseModelRegistry(tmp_path / "cache").resolve(named.format(copy=copy))


def test_digests_are_computed_by_the_platform_never_read_from_or_written_into_the_model(tiny_model, tmp_path):
    copy = tmp_path / "my-model"
    shutil.copytree(tiny_model.path, copy, ignore=shutil.ignore_patterns("ftpipe_digest.json"))
    (copy / "ftpipe_digest.json").write_text(json.dumps({"digest": "forged", "tokenizer_digest": "x",
                                                         "chat_template_digest": "y", "num_parameters": 1}))
    before = sorted((p.name, p.stat().st_mtime_ns) for p in copy.iterdir())
    copy.chmod(0o555)  # a registered model directory may well be read-only
    try:
        resolved = BaseModelRegistry(tmp_path / "cache", {"acme/base": str(copy)}).resolve("acme/base")
    finally:
        copy.chmod(0o755)
    assert (resolved.digest, resolved.num_parameters) == (tiny_model.digest, tiny_model.num_parameters)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in copy.iterdir()) == before


def test_changed_weights_change_the_digest(tiny_model, tmp_path):
    copy = tmp_path / "m"
    shutil.copytree(tiny_model.path, copy, ignore=shutil.ignore_patterns("ftpipe_digest.json"))
    config = json.loads((copy / "config.json").read_text())
    config["rms_norm_eps"] = 1e-5 if config.get("rms_norm_eps") != 1e-5 else 1e-6
    (copy / "config.json").write_text(json.dumps(config))
    assert BaseModelRegistry(tmp_path, {"m": str(copy)}).resolve("m").digest != tiny_model.digest


def test_unknown_model_offline_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BaseModelNotFound, match="base_model 'nobody/no-such-model' is not registered on this"):
        BaseModelRegistry(tmp_path).resolve("nobody/no-such-model")
    registered = BaseModelRegistry(tmp_path, {"acme/llama": "nobody/no-such-model"})
    with pytest.raises(BaseModelNotFound, match="'acme/llama' is registered as 'nobody/no-such-model'.*offline"):
        registered.resolve("acme/llama")


def test_the_build_is_deterministic(tmp_path):
    """Two builds from the same recipe give the same files (checked on a small recipe to keep CI fast)."""
    from ftpipe.basemodel.tiny import TinyModelRecipe

    recipe = TinyModelRecipe(vocab_size=400, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             corpus_conversations=800, pretrain_steps=5, batch_size=4)
    a = BaseModelRegistry(tmp_path / "a", tiny_recipe=recipe).resolve(TINY_MODEL_ID)
    b = BaseModelRegistry(tmp_path / "b", tiny_recipe=recipe).resolve(TINY_MODEL_ID)
    assert a.digest == b.digest and a.tokenizer_digest == b.tokenizer_digest
