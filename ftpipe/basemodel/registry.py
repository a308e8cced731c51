"""Resolve a base-model id to something ``from_pretrained`` loads, with a version digest.

Three kinds of id go through the same code: the built-in tiny model (built once, then cached), ids the
platform maps to a path or hub id in its configuration, and plain local directories or Hugging Face hub ids.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ftpipe.basemodel.tiny import TINY_MODEL_ID, TinyModelRecipe, build_tiny_model
from ftpipe.digests import combine, file_sha256, text_sha256, tree_sha256

_DIGEST_FILE = "ftpipe_digest.json"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json", ".jinja", ".model", ".txt")


class BaseModelNotFound(LookupError):
    pass


@dataclass(frozen=True)
class ResolvedBaseModel:
    model_id: str
    path: str
    digest: str
    tokenizer_digest: str
    chat_template_digest: str
    num_parameters: int

    def short(self) -> str:
        return f"{self.model_id}@{self.digest[:12]}"


def count_parameters(path: Path) -> int:
    """Parameters in a model's safetensors files, read from their headers without loading any weight."""
    total = 0
    for shard in sorted(path.glob("*.safetensors")):
        with open(shard, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        for name, info in header.items():
            if name != "__metadata__":
                total += math.prod(info["shape"])
    return total


def tokenizer_digests(path: str | Path) -> tuple[str, str]:
    """(tokenizer digest, chat-template digest) of a model or adapter directory; "" where it has none."""
    path = Path(path)
    tok_file = path / "tokenizer.json"
    template_file = path / "chat_template.jinja"
    template = template_file.read_text() if template_file.exists() else ""
    if not template and (path / "tokenizer_config.json").exists():
        template = json.loads((path / "tokenizer_config.json").read_text()).get("chat_template") or ""
    return (file_sha256(tok_file) if tok_file.exists() else "", text_sha256(template) if template else "")


def _local_digests(path: Path) -> dict:
    """Digests of a saved model directory, cached beside it (model files are immutable once written)."""
    cached = path / _DIGEST_FILE
    if cached.exists():
        digests = json.loads(cached.read_text())
        if "num_parameters" in digests:
            return digests
    names = [p.name for p in path.iterdir() if p.is_file() and p.suffix in _WEIGHT_SUFFIXES and p.name != _DIGEST_FILE]
    tokenizer_digest, chat_template_digest = tokenizer_digests(path)
    digests = {
        "digest": tree_sha256(path, names),
        "tokenizer_digest": tokenizer_digest,
        "chat_template_digest": chat_template_digest,
        "num_parameters": count_parameters(path),
    }
    try:
        cached.write_text(json.dumps(digests))
    except OSError:
        pass  # a read-only model directory still resolves; the digest is just recomputed next time
    return digests


class BaseModelRegistry:
    def __init__(self, cache_dir: str | Path, aliases: dict[str, str] | None = None,
                 tiny_recipe: TinyModelRecipe = TinyModelRecipe()):
        self.cache_dir = Path(cache_dir)
        self.aliases = dict(aliases or {})
        self.tiny_recipe = tiny_recipe

    def tiny_model_dir(self) -> Path:
        recipe_hash = combine(json.dumps(asdict(self.tiny_recipe), sort_keys=True))[:12]
        return self.cache_dir / f"tiny-llama-{recipe_hash}"

    def ensure_tiny_model(self, progress=None) -> Path:
        """Build the tiny model once; concurrent callers (several runs, several processes) wait on a lock."""
        target = self.tiny_model_dir()
        if (target / "config.json").exists():
            return target
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cache_dir / ".tiny-llama.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (target / "config.json").exists():
                build_tiny_model(target, self.tiny_recipe, progress=progress)
        return target

    def resolve(self, model_id: str) -> ResolvedBaseModel:
        source = self.aliases.get(model_id, model_id)
        if source == TINY_MODEL_ID:
            path = self.ensure_tiny_model()
        elif Path(source).is_dir():
            path = Path(source)
        else:
            path = self._from_hub(model_id, source)
        d = _local_digests(path)
        return ResolvedBaseModel(model_id=model_id, path=str(path), **d)

    def _from_hub(self, model_id: str, hub_id: str) -> Path:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HFValidationError

        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
        try:
            return Path(snapshot_download(hub_id, local_files_only=offline))
        except (HFValidationError, OSError, ValueError) as exc:
            raise BaseModelNotFound(
                f"base_model '{model_id}' is not registered, not a local directory, and could not be fetched "
                f"from the Hugging Face hub{' (offline)' if offline else ''}: {exc.__class__.__name__}"
            ) from exc
