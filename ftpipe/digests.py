"""Content digests: the version identity of models, tokenizers, templates and datasets."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 20


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tree_sha256(root: str | Path, names: list[str] | None = None) -> str:
    """Digest of a directory: relative file names and contents, in a stable order."""
    root = Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file()) if names is None else [root / n for n in sorted(names)]
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(file_sha256(p).encode())
    return h.hexdigest()


def combine(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).hexdigest()
