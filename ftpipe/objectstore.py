"""A minimal object-store interface with a local-folder and an S3 implementation.

The pipeline reads tenants' uploads and writes reports through this interface only, so that a local folder
(the default, and what tests use) and S3 behave the same. Writes never replace an existing object unless the
caller says so: nothing a tenant uploaded is ever overwritten by the platform.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class ObjectExists(FileExistsError):
    pass


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    version: str
    """Changes whenever the object's content changes (S3 ETag; size and mtime for a local file)."""


class ObjectStore(Protocol):
    url: str

    def list(self, prefix: str) -> list[ObjectInfo]: ...
    def read_bytes(self, key: str) -> bytes: ...
    def download(self, key: str, dest: str | Path) -> None: ...
    def write_bytes(self, key: str, data: bytes, overwrite: bool = False) -> None: ...
    def exists(self, key: str) -> bool: ...
    def delete_prefix(self, prefix: str) -> int: ...


def _check_key(key: str) -> str:
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid object key {key!r}")
    return key


class LocalObjectStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.url = str(self.root)

    def _path(self, key: str) -> Path:
        return self.root / _check_key(key)

    def list(self, prefix: str) -> list[ObjectInfo]:
        base = self.root / prefix if prefix else self.root
        if not base.exists():
            return []
        out = []
        for p in sorted(base.rglob("*")):
            if p.is_file() and not p.name.startswith(".ftpipe-tmp-"):
                st = p.stat()
                out.append(ObjectInfo(p.relative_to(self.root).as_posix(), st.st_size, f"{st.st_size}-{st.st_mtime_ns}"))
        return out

    def read_bytes(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def download(self, key: str, dest: str | Path) -> None:
        Path(dest).write_bytes(self.read_bytes(key))

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def write_bytes(self, key: str, data: bytes, overwrite: bool = False) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write beside the target, then link or rename: a reader (the upload sensor) never sees half a file.
        fd, tmp = tempfile.mkstemp(prefix=".ftpipe-tmp-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            if overwrite:
                os.replace(tmp, path)
            else:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise ObjectExists(f"{key} already exists; it is never overwritten") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (a folder: it ends in '/'); returns how many there were."""
        base = self._path(_check_prefix(prefix))
        if not base.exists():
            return 0
        count = sum(1 for p in base.rglob("*") if p.is_file())
        shutil.rmtree(base)
        return count


def _check_prefix(prefix: str) -> str:
    if not prefix.endswith("/"):
        raise ValueError(f"a prefix to delete must name a folder (end in '/'): {prefix!r}")
    return _check_key(prefix.rstrip("/"))


class S3ObjectStore:
    def __init__(self, client, bucket: str, prefix: str = ""):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}/{self.prefix}"

    def _key(self, key: str) -> str:
        return self.prefix + _check_key(key)

    def list(self, prefix: str) -> list[ObjectInfo]:
        out = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
            for obj in page.get("Contents", []):
                out.append(ObjectInfo(obj["Key"][len(self.prefix):], obj["Size"], obj["ETag"].strip('"')))
        return out

    def read_bytes(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()

    def download(self, key: str, dest: str | Path) -> None:
        self.client.download_file(self.bucket, self._key(key), str(dest))

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def write_bytes(self, key: str, data: bytes, overwrite: bool = False) -> None:
        extra = {} if overwrite else {"IfNoneMatch": "*"}  # S3 conditional write: refuse to replace
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **extra)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                raise ObjectExists(f"{key} already exists; it is never overwritten") from None
            raise

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``, every version of it on a versioned bucket included."""
        full = self._key(_check_prefix(prefix)) + "/"
        objects = 0
        paginator = self.client.get_paginator("list_object_versions")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=full):
            versions = page.get("Versions", []) + page.get("DeleteMarkers", [])
            objects += sum(1 for v in page.get("Versions", []) if v.get("IsLatest"))
            for start in range(0, len(versions), 1000):  # DeleteObjects takes at most 1,000 keys
                batch = [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in versions[start:start + 1000]]
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        return objects
