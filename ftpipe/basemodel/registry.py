"""Resolve a base-model id to something ``from_pretrained`` loads, with a version digest.

Only ids the platform registered resolve: the built-in tiny model (built once, then cached) and the ids the
platform maps to a local path or a hub id (``base_models`` in tenants.yaml, or the resource's aliases). A
tenant names an id, never a path, so nothing on the host outside the registered models is ever read as a
model. Local paths and hub ids go through the same code once registered.

Digests are computed by the platform and cached in its own model cache, keyed by the directory and each
file's size and modification time: nothing is read from, or written into, the model's own directory but its
model files.
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

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json", ".jinja", ".model", ".txt")
_DIGEST_VERSION = 1
"""Bump when what a digest covers changes, so that cached digests are recomputed."""
_LEGACY_DIGEST_FILE = "ftpipe_digest.json"
"""Older versions cached digests inside the model directory; such a file is never read, nor hashed."""


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


def _model_files(path: Path) -> list[os.DirEntry]:
    return sorted((e for e in os.scandir(path) if e.is_file(follow_symlinks=True)
                   and e.name.endswith(_WEIGHT_SUFFIXES) and e.name != _LEGACY_DIGEST_FILE), key=lambda e: e.name)


def _digests(path: Path, cache_dir: Path) -> dict:
    """Digests of a saved model directory, cached under the platform's ``cache_dir`` by the files' stat."""
    entries = _model_files(path)
    stats = [(e.name, e.stat()) for e in entries]
    fingerprint = combine(_DIGEST_VERSION, str(path.resolve()),
                          *(f"{name}:{st.st_size}:{st.st_mtime_ns}" for name, st in stats))
    cached = cache_dir / "digests" / f"{fingerprint[:32]}.json"
    try:
        return json.loads(cached.read_text())
    except (OSError, ValueError):
        pass
    tokenizer_digest, chat_template_digest = tokenizer_digests(path)
    digests = {
        "digest": tree_sha256(path, [e.name for e in entries]),
        "tokenizer_digest": tokenizer_digest,
        "chat_template_digest": chat_template_digest,
        "num_parameters": count_parameters(path),
    }
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}")
        tmp.write_text(json.dumps(digests))
        tmp.replace(cached)
    except OSError:
        pass  # a read-only cache still resolves; the digest is just recomputed next time
    return digests


class BaseModelRegistry:
    def __init__(self, cache_dir: str | Path, models: dict[str, str] | None = None,
                 tiny_recipe: TinyModelRecipe = TinyModelRecipe()):
        """``models``: registered id -> local directory or hub id, besides the built-in tiny model."""
        self.cache_dir = Path(cache_dir)
        self.models = {TINY_MODEL_ID: TINY_MODEL_ID, **(models or {})}
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
        """A registered id; anything else, a path above all, is refused."""
        source = self.models.get(model_id) if isinstance(model_id, str) else None
        if source is None:
            shown = repr(model_id)[:100]
            raise BaseModelNotFound(f"base_model {shown} is not registered on this platform; registered: "
                                    f"{', '.join(sorted(self.models))}")
        return self.resolve_source(model_id, source)

    def resolve_source(self, model_id: str, source: str) -> ResolvedBaseModel:
        """The platform's side: a local directory or hub id it trusts (registration, ``ftpipe validate``)."""
        if source == TINY_MODEL_ID:
            path = self.ensure_tiny_model()
        elif Path(source).is_dir():
            path = Path(source)
        else:
            path = self._from_hub(model_id, source)
        return ResolvedBaseModel(model_id=model_id, path=str(path), **_digests(path, self.cache_dir))

    def _from_hub(self, model_id: str, hub_id: str) -> Path:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HFValidationError

        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
        try:
            return Path(snapshot_download(hub_id, local_files_only=offline))
        except (HFValidationError, OSError, ValueError) as exc:
            raise BaseModelNotFound(
                f"base_model '{model_id}' is registered as '{hub_id}', which is not a local directory and could "
                f"not be fetched from the Hugging Face hub{' (offline)' if offline else ''}: {exc.__class__.__name__}"
            ) from exc
