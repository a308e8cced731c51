"""A minimal object-store interface with a local-folder and an S3 implementation.

The pipeline reads tenants' uploads and writes reports through this interface only, so that a local folder
(the default, and what tests use) and S3 behave the same. Writes never replace an existing object unless the
caller says so: nothing a tenant uploaded is ever overwritten by the platform.

The local landing zone is a folder that tenants can write into, so ``LocalObjectStore`` treats everything
below its root as hostile (``docs/security.md``):

- It never follows a symbolic link, in the object's name or in any folder on the way to it: every path is
  opened one component at a time from the root with ``O_NOFOLLOW``, so swapping a folder for a link between
  a check and a use gains nothing. The root itself is the operator's and may be a link.
- It reads only regular files with a single name: a hard link (another name of a file that may be another
  tenant's) and special files (FIFOs, sockets, devices) are refused, and so is a directory where a file is
  expected. The check is made on the opened file, not on its name.
- It writes through the same component-by-component walk, creating missing folders 0755 and files 0644
  whatever the process umask, so that a tenant's account can read its reports.

Public names:

``UnsafeObject(ValueError)``, constructed as ``UnsafeObject(message, key=None, path=None, kind=None)``
    Something other than a plain regular file is at a key, or on the way to it: a symbolic link, a hard link,
    a FIFO, a socket, a device, a directory. Raised by ``read_bytes``, ``download`` and ``stat``
    (reading), and by ``write_bytes``, ``delete_prefix`` and ``delete`` when a folder on the way is not a real folder.
    The message names the key and what is there, in words meant for the tenant; ``.key`` is the key asked
    for, ``.path`` the entry that is unsafe (the key itself or a folder on the way), and ``.kind`` one of
    ``ObjectInfo``'s kinds.
``ObjectTooLarge(ValueError)``
    The object is larger than the ``max_bytes`` the caller allowed. ``.key``, ``.size`` (the object's size,
    or a lower bound for a file that grew while it was read) and ``.limit``. Nothing beyond
    ``max_bytes + 1`` bytes is ever read.
``ObjectInfo(key, size, version, kind="file", modified="")``
    What ``list`` and ``stat`` return. ``kind`` is ``"file"``, ``"symlink"``, ``"hardlink"`` or
    ``"special"`` (FIFO, socket, device). S3 has no links: its objects are always ``"file"``. ``modified``
    is S3's LastModified, since an S3 version (the ETag) does not change when the same bytes are uploaded
    again; empty locally, where the version already holds the time of the last write.
``ObjectExists(FileExistsError)``
    A write without ``overwrite=True`` found the key taken (by anything, a link included).

Methods of both stores (``ObjectStore``):

``list(prefix)``
    Every entry under ``prefix`` with its kind, links and special files included, so that a caller can tell a
    tenant "your manifest.yaml is a symbolic link" instead of ignoring the file. A link to a folder is
    reported itself and never descended into (also when it is a folder on the way to ``prefix``).
``list_children(prefix)``
    The entries right under the folder ``prefix`` (ending in '/'): sub-folders as kind ``"folder"`` (S3's
    common prefixes), the rest as ``list`` reports them. What is below a sub-folder is not looked at.
``list_page(prefix, start_after="", limit=1000)``
    ``list(prefix)`` in installments: up to ``limit`` entries whose keys sort after ``start_after``, in key
    order, and whether more follow. On S3 it costs a request per 1,000 keys listed, whatever the prefix
    holds beyond them; locally the folders before ``start_after`` are skipped unread.
``read_bytes(key, max_bytes=None)``, ``download(key, dest, max_bytes=None)``
    The object's content, or a copy of it at ``dest`` streamed in 1 MiB blocks. ``FileNotFoundError`` when
    nothing is at ``key``; ``UnsafeObject``; ``ObjectTooLarge``.
``exists(key)``
    True only when a safe regular file is at ``key`` (False for a link, a FIFO, a directory, ...).
``stat(key)``
    ``ObjectInfo`` for a safe regular file, ``None`` when nothing is at ``key``, and ``UnsafeObject`` when
    something else is: how a caller tells "missing" from "a link".
``write_bytes(key, data, overwrite=False)``, ``delete_prefix(prefix)``
    As before; locally, a link is replaced or removed, never written or deleted through.
``delete(key)``
    Remove the one object at ``key``; nothing there is not an error. Locally a link at ``key`` is removed
    itself, and a link on the way (or a directory at ``key``) is ``UnsafeObject``.
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import os
import secrets
import shutil
import stat as st_
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, Protocol

_TMP_PREFIX = ".ftpipe-tmp-"
_BLOCK = 1 << 20
_FILE_MODE = 0o644
_DIR_MODE = 0o755
# No deeper than this below a listed folder: every level holds a file descriptor, and a tenant could
# otherwise nest folders until the process runs out of them. Real jobs are one level deep.
_MAX_LIST_DEPTH = 32
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO that slips past the name check must not block the open; O_NOCTTY: nor may a terminal
# device become the process's controlling terminal.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

FILE, SYMLINK, HARDLINK, SPECIAL, FOLDER = "file", "symlink", "hardlink", "special", "folder"


class ObjectExists(FileExistsError):
    pass


class UnsafeObject(ValueError):
    """Something other than a plain regular file is at a key or on the way to it (see the module doc)."""

    def __init__(self, message: str, key: str | None = None, path: str | None = None, kind: str | None = None):
        super().__init__(message)
        self.key = key
        self.path = path if path is not None else key
        self.kind = kind


class ObjectTooLarge(ValueError):
    """The object is larger than the caller's ``max_bytes``."""

    def __init__(self, key: str, size: int, limit: int, *, at_least: bool = False):
        self.key = key
        self.size = size
        self.limit = limit
        amount = f"at least {size:,}" if at_least else f"{size:,}"
        super().__init__(f"{key} is {amount} bytes, over the limit of {limit:,} bytes")


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    version: str
    """Changes whenever the object's content changes (S3 ETag; size and mtime for a local file, and for a
    local entry that is not a plain file also its link count and kind)."""
    kind: str = FILE
    """"file", "symlink", "hardlink" (a regular file with more than one name), "special", or "folder" (only
    from ``list_children``)."""
    modified: str = ""
    """S3's LastModified (UTC, ISO 8601): unlike the ETag it changes when identical bytes are uploaded again.
    Empty locally, where ``version`` already changes on every write."""


class ObjectStore(Protocol):
    url: str

    def list(self, prefix: str) -> list[ObjectInfo]: ...
    def list_children(self, prefix: str) -> builtins.list[ObjectInfo]: ...
    def list_page(self, prefix: str, start_after: str = "",
                  limit: int = 1000) -> tuple[builtins.list[ObjectInfo], bool]: ...
    def read_bytes(self, key: str, max_bytes: int | None = None) -> bytes: ...
    def download(self, key: str, dest: str | Path, max_bytes: int | None = None) -> None: ...
    def write_bytes(self, key: str, data: bytes, overwrite: bool = False) -> None: ...
    def exists(self, key: str) -> bool: ...
    def stat(self, key: str) -> ObjectInfo | None: ...
    def delete_prefix(self, prefix: str) -> int: ...
    def delete(self, key: str) -> None: ...


def _check_key(key: str) -> str:
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid object key {key!r}")
    if "\0" in key or "\\" in key:
        # NUL ends a C path early; a backslash is a separator to some S3 clients and to Windows tools.
        raise ValueError(f"invalid object key {key!r}: it contains a NUL byte or a backslash")
    if any(len(p.encode("utf-8", "surrogateescape")) > 255 for p in parts):
        raise ValueError(f"invalid object key {key!r}: a part of it is longer than 255 bytes")
    return key


def _check_prefix(prefix: str) -> str:
    if not prefix.endswith("/"):
        raise ValueError(f"a prefix must name a folder (end in '/'): {prefix!r}")
    return _check_key(prefix.rstrip("/"))


def _info(key: str, st: os.stat_result) -> ObjectInfo:
    """What a local listing reports of the entry at ``key``: its kind, and a version that changes with it."""
    kind = _kind(st)
    return ObjectInfo(key, st.st_size, _version(st, kind), kind)


def _listing_order(info: ObjectInfo) -> str:
    """A folder sorts as the keys below it do (``a.b`` < ``a/x`` < ``a0``): the order of S3's listing."""
    return info.key + "/" if info.kind == FOLDER else info.key


def _utc(when: datetime) -> str:
    return when.astimezone(timezone.utc).isoformat()


def _not_found(key: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "no such object", key)


def _kind(st: os.stat_result) -> str:
    if st_.S_ISLNK(st.st_mode):
        return SYMLINK
    if st_.S_ISREG(st.st_mode):
        return FILE if st.st_nlink == 1 else HARDLINK
    return SPECIAL


def _what(st: os.stat_result) -> str:
    mode = st.st_mode
    if st_.S_ISLNK(mode):
        return "a symbolic link"
    if st_.S_ISREG(mode):
        return f"a hard link (the file has {st.st_nlink} names)" if st.st_nlink > 1 else "a file, not a folder"
    for test, words in ((st_.S_ISDIR, "a directory"), (st_.S_ISFIFO, "a FIFO"), (st_.S_ISSOCK, "a socket"),
                        (st_.S_ISCHR, "a character device"), (st_.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return "not a regular file"


def _is_safe_file(st: os.stat_result) -> bool:
    return st_.S_ISREG(st.st_mode) and st.st_nlink == 1


def _version(st: os.stat_result, kind: str) -> str:
    # A plain file keeps the version format it always had, so that upgrading does not make the upload
    # sensor see every manifest as changed and queue it again; anything else also carries its link count
    # and kind, so that a file seen while it briefly had a second name is looked at again once it has one.
    base = f"{st.st_size}-{st.st_mtime_ns}"
    return base if kind == FILE else f"{base}-{st.st_nlink}-{kind}"


def _lstat(name: str, dir_fd: int) -> os.stat_result:
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


class _Blocked(Exception):
    """A folder on the way to a key is not a real folder (internal: each caller words its own error)."""

    def __init__(self, path: str, st: os.stat_result):
        self.path = path
        self.st = st


def _unsafe_read(key: str, path: str, st: os.stat_result | None) -> UnsafeObject:
    """``st`` None: a link, known only from O_NOFOLLOW's ELOOP."""
    what, kind = ("a symbolic link", SYMLINK) if st is None else (_what(st), _kind(st))
    where = f"{key} is" if path == key else f"{key}: {path} is"
    return UnsafeObject(f"{where} {what}; the landing zone accepts only regular files (upload the file itself)",
                        key, path, kind)


def _unsafe_write(key: str, path: str, st: os.stat_result, action: str = "write") -> UnsafeObject:
    return UnsafeObject(f"cannot {action} {key}: {path} is {_what(st)}; the platform never writes through "
                        "links or into anything but a folder", key, path, _kind(st))


_renameat2: Callable[..., int] | Literal[False] | None = None  # None: not looked up yet; False: not available


def _rename_noreplace(src: str, dst: str, dir_fd: int) -> bool:
    """Rename ``src`` to ``dst`` unless ``dst`` exists (FileExistsError); False where the system cannot.

    The fallback, link then unlink, gives the file two names for a moment, and a reader that looks then
    sees a hard link; renameat2's RENAME_NOREPLACE (Linux 3.15+, glibc 2.28+) never does.
    """
    global _renameat2
    if _renameat2 is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            _renameat2 = fn
        except (AttributeError, OSError):
            _renameat2 = False
    if not _renameat2:
        return False
    if _renameat2(dir_fd, os.fsencode(src), dir_fd, os.fsencode(dst), 1) == 0:  # 1: RENAME_NOREPLACE
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):  # kernel or filesystem lacks it
        return False
    raise OSError(err, os.strerror(err), dst)


class LocalObjectStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.url = str(self.root)

    # -- walking the tree without following links -------------------------------------------------------

    def _open_root(self, create: bool = False) -> int:
        if create:
            os.makedirs(self.root, mode=_DIR_MODE, exist_ok=True)
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def _open_dirs(self, key: str, parts: list[str], create: bool = False) -> int:
        """An fd of the folder ``parts`` below the root, each component opened without following links.

        Raises ``_Blocked`` for a component that is a link (or, when creating, anything but a folder) and
        FileNotFoundError when a component is missing (or, when reading, is a file: nothing is at the key).
        """
        try:
            fd = self._open_root(create)
        except (FileNotFoundError, NotADirectoryError):
            raise _not_found(key) from None
        try:
            for i, part in enumerate(parts):
                child = self._open_dir_at(fd, part, key, "/".join(parts[:i + 1]), create)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_dir_at(self, fd: int, part: str, key: str, path: str, create: bool) -> int:
        for _ in range(5):  # a tenant can make the entry appear and vanish; give up rather than spin
            try:
                return os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise _not_found(key) from None
                try:
                    os.mkdir(part, _DIR_MODE, dir_fd=fd)
                except FileExistsError:
                    continue
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP, errno.ENOENT):
                        raise
                    continue  # swapped since the mkdir: look at it again
                try:
                    st = os.fstat(child)
                    # mkdir's mode went through the umask; the tenant's account must be able to read the
                    # folder. Only a folder this process owns is changed (one swapped in is someone else's).
                    if st.st_uid == os.geteuid() and st_.S_IMODE(st.st_mode) != _DIR_MODE:
                        os.fchmod(child, _DIR_MODE)
                except BaseException:
                    os.close(child)
                    raise
                return child
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                try:
                    st = _lstat(part, fd)
                except FileNotFoundError:
                    continue
                if st_.S_ISDIR(st.st_mode):
                    continue  # was swapped back in the meantime: open it again
                if create or st_.S_ISLNK(st.st_mode):
                    raise _Blocked(path, st) from None
                raise _not_found(key) from None
        raise OSError(errno.EAGAIN, f"{path} keeps changing while it is opened", key)

    def _dir_of(self, key: str, create: bool = False) -> tuple[int, str]:
        """(fd of the key's folder, the key's last part); reading, a link on the way is UnsafeObject."""
        parts = _check_key(key).split("/")
        try:
            return self._open_dirs(key, parts[:-1], create), parts[-1]
        except _Blocked as blocked:
            raise (_unsafe_write(key, blocked.path, blocked.st) if create
                   else _unsafe_read(key, blocked.path, blocked.st)) from None

    def _open_file(self, key: str) -> tuple[int, os.stat_result]:
        """An fd open for reading on the regular, single-named file at ``key``, and its fstat."""
        dfd, name = self._dir_of(key)
        try:
            try:
                before = _lstat(name, dfd)
            except FileNotFoundError:
                raise _not_found(key) from None
            # Checked on the name first so that a FIFO or a device is never even opened; checked again on
            # the opened file below, which is what a swap after this point cannot get around.
            if not _is_safe_file(before):
                raise _unsafe_read(key, key, before)
            try:
                fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
            except FileNotFoundError:
                raise _not_found(key) from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link: one was swapped in after the check
                    raise _unsafe_read(key, key, None) from None
                try:
                    now = _lstat(name, dfd)
                except OSError:
                    raise exc from None
                if not _is_safe_file(now):
                    raise _unsafe_read(key, key, now) from None
                raise
            try:
                st = os.fstat(fd)
                if not _is_safe_file(st):
                    raise _unsafe_read(key, key, st)
            except BaseException:
                os.close(fd)
                raise
            return fd, st
        finally:
            os.close(dfd)

    def _walk(self, dfd: int, base: str, first: str, depth: int, out: list[ObjectInfo]) -> None:
        # A folder its tenant made unreadable (or readable but not searchable) holds nothing the platform can
        # use: it is skipped, never an error, since one tenant's chmod must not stop the listing for all.
        try:
            with os.scandir(dfd) as it:
                entries = [e for e in it if e.name.startswith(first)]
        except PermissionError:
            return
        for entry in entries:
            key = base + entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except (FileNotFoundError, PermissionError):
                continue
            if st_.S_ISDIR(st.st_mode):
                if depth >= _MAX_LIST_DEPTH:
                    continue
                try:
                    child = os.open(entry.name, _DIR_FLAGS, dir_fd=dfd)
                except (FileNotFoundError, PermissionError):
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                    try:  # swapped for a link or a file since the scan: report what is there now
                        st = _lstat(entry.name, dfd)
                    except FileNotFoundError:
                        continue
                    out.append(_info(key, st))
                    continue
                try:
                    self._walk(child, key + "/", "", depth + 1, out)
                finally:
                    os.close(child)
            elif not entry.name.startswith(_TMP_PREFIX):
                out.append(_info(key, st))

    # -- the ObjectStore interface -----------------------------------------------------------------------

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every entry under ``prefix`` (a folder, or as on S3 any start of a key), links included."""
        folder, _, first = prefix.rpartition("/")
        parts = _check_key(folder).split("/") if folder else []
        try:
            dfd = self._open_dirs(prefix, parts)
        except FileNotFoundError:
            return []
        except _Blocked as blocked:  # a link on the way: report it rather than hide the tenant's mistake
            return [_info(blocked.path, blocked.st)]
        out: list[ObjectInfo] = []
        try:
            self._walk(dfd, folder + "/" if folder else "", first, 0, out)
        finally:
            os.close(dfd)
        return sorted(out, key=lambda info: info.key)

    def list_children(self, prefix: str) -> builtins.list[ObjectInfo]:
        folder = _check_prefix(prefix)
        try:
            dfd = self._open_dirs(prefix, folder.split("/"))
        except FileNotFoundError:
            return []
        except _Blocked as blocked:
            return [_info(blocked.path, blocked.st)]
        out: list[ObjectInfo] = []
        try:
            try:
                with os.scandir(dfd) as it:
                    entries = list(it)
            except PermissionError:  # a tenant's chmod hides its own folder, never stops the caller
                return []
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except (FileNotFoundError, PermissionError):
                    continue
                key = f"{folder}/{entry.name}"
                if st_.S_ISDIR(st.st_mode):
                    out.append(ObjectInfo(key, 0, "", FOLDER))
                elif not entry.name.startswith(_TMP_PREFIX):
                    out.append(_info(key, st))
        finally:
            os.close(dfd)
        return sorted(out, key=_listing_order)

    def list_page(self, prefix: str, start_after: str = "",
                  limit: int = 1000) -> tuple[builtins.list[ObjectInfo], bool]:
        out: list[ObjectInfo] = []
        for child in self.list_children(prefix):
            if child.kind != FOLDER:
                out += [child] if child.key > start_after else []
            elif child.key + "/" > start_after or start_after.startswith(child.key + "/"):
                out += [info for info in self.list(child.key + "/") if info.key > start_after]
            if len(out) > limit:
                break
        return out[:limit], len(out) > limit

    def stat(self, key: str) -> ObjectInfo | None:
        """The info of the safe regular file at ``key``; None when nothing is there; else UnsafeObject."""
        try:
            dfd, name = self._dir_of(key)
        except FileNotFoundError:
            return None
        try:
            st = _lstat(name, dfd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        finally:
            os.close(dfd)
        if not _is_safe_file(st):
            raise _unsafe_read(key, key, st)
        return ObjectInfo(key, st.st_size, _version(st, FILE))

    def exists(self, key: str) -> bool:
        """True only for a safe regular file: a link or a FIFO at ``key`` does not count (see ``stat``)."""
        try:
            return self.stat(key) is not None
        except UnsafeObject:
            return False

    def read_bytes(self, key: str, max_bytes: int | None = None) -> bytes:
        fd, st = self._open_file(key)
        try:
            if max_bytes is not None and st.st_size > max_bytes:
                raise ObjectTooLarge(key, st.st_size, max_bytes)
            with os.fdopen(fd, "rb", closefd=False) as f:
                # The file may have grown since fstat: read one byte past the limit to notice, never more.
                data = f.read() if max_bytes is None else f.read(max_bytes + 1)
            if max_bytes is not None and len(data) > max_bytes:
                raise ObjectTooLarge(key, len(data), max_bytes, at_least=True)
            return data
        finally:
            os.close(fd)

    def download(self, key: str, dest: str | Path, max_bytes: int | None = None) -> None:
        """Copy the object to ``dest`` in 1 MiB blocks; on any failure no partial ``dest`` is left."""
        fd, st = self._open_file(key)
        try:
            if max_bytes is not None and st.st_size > max_bytes:
                raise ObjectTooLarge(key, st.st_size, max_bytes)
            buf = bytearray(_BLOCK)
            view = memoryview(buf)
            copied = 0
            out = open(dest, "wb")
            try:
                with out:
                    while n := os.readv(fd, [buf]):
                        copied += n
                        if max_bytes is not None and copied > max_bytes:
                            raise ObjectTooLarge(key, copied, max_bytes, at_least=True)
                        out.write(view[:n])
            except BaseException:
                Path(dest).unlink(missing_ok=True)
                raise
        finally:
            os.close(fd)

    def write_bytes(self, key: str, data: bytes, overwrite: bool = False) -> None:
        dfd, name = self._dir_of(key, create=True)
        try:
            # Write beside the target, then rename or link: a reader (the upload sensor) never sees half a file.
            tmp = f"{_TMP_PREFIX}{secrets.token_hex(8)}"
            tfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, _FILE_MODE,
                          dir_fd=dfd)
            try:
                with os.fdopen(tfd, "wb") as f:
                    os.fchmod(f.fileno(), _FILE_MODE)  # the umask must not hide reports from the tenant
                    f.write(data)
                self._commit(key, tmp, name, dfd, overwrite)
            finally:
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except FileNotFoundError:
                    pass
        finally:
            os.close(dfd)

    def _commit(self, key: str, tmp: str, name: str, dfd: int, overwrite: bool) -> None:
        try:
            if overwrite:
                # rename replaces a link at ``name`` itself; it never writes to where the link points.
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            elif not _rename_noreplace(tmp, name, dfd):
                os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            raise ObjectExists(f"{key} already exists; it is never overwritten") from None
        except IsADirectoryError as exc:
            try:
                st = _lstat(name, dfd)
            except OSError:
                raise exc from None
            raise _unsafe_write(key, key, st) from None

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (a folder: it ends in '/'); returns how many there were.

        A link at ``prefix`` is removed itself (counted as one object), never what it points to; links
        inside are removed the same way (shutil.rmtree's fd-based walk never follows them).
        """
        parts = _check_prefix(prefix).split("/")
        try:
            dfd = self._open_dirs(prefix, parts[:-1])
        except FileNotFoundError:
            return 0
        except _Blocked as blocked:
            raise _unsafe_write(prefix, blocked.path, blocked.st, action="delete") from None
        name = parts[-1]
        try:
            try:
                st = _lstat(name, dfd)
            except FileNotFoundError:
                return 0
            if not st_.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=dfd)
                return 1
            count = 0
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                os.unlink(name, dir_fd=dfd)  # swapped for a link since the lstat: remove the link
                return 1
            try:
                found: list[ObjectInfo] = []
                self._walk(child, prefix, "", 0, found)
                count = len(found)
            finally:
                os.close(child)
            shutil.rmtree(name, dir_fd=dfd)
            return count
        finally:
            os.close(dfd)

    def delete(self, key: str) -> None:
        """Remove the object at ``key`` if there is one: a link there is removed itself, never its target."""
        parts = _check_key(key).split("/")
        try:
            dfd = self._open_dirs(key, parts[:-1])
        except FileNotFoundError:
            return
        except _Blocked as blocked:
            raise _unsafe_write(key, blocked.path, blocked.st, action="delete") from None
        try:
            os.unlink(parts[-1], dir_fd=dfd)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            raise _unsafe_write(key, key, _lstat(parts[-1], dfd), action="delete") from None
        finally:
            os.close(dfd)


class S3ObjectStore:
    parallel_listings = 8
    """Listings worth running at once (``ftpipe.landing_scan``): each is a request; boto3's clients are
    thread-safe."""

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
            out += [self._info(obj) for obj in page.get("Contents", [])]
        return out

    def list_children(self, prefix: str) -> builtins.list[ObjectInfo]:
        out = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(_check_prefix(prefix)) + "/",
                                       Delimiter="/"):
            out += [ObjectInfo(p["Prefix"][len(self.prefix):].rstrip("/"), 0, "", FOLDER)
                    for p in page.get("CommonPrefixes", [])]
            out += [self._info(obj) for obj in page.get("Contents", [])]
        return sorted(out, key=_listing_order)

    def list_page(self, prefix: str, start_after: str = "",
                  limit: int = 1000) -> tuple[builtins.list[ObjectInfo], bool]:
        out: list[ObjectInfo] = []
        request = {"Bucket": self.bucket, "Prefix": self.prefix + prefix}
        if start_after:
            request["StartAfter"] = self.prefix + start_after
        while True:
            page = self.client.list_objects_v2(**request, MaxKeys=min(1000, limit + 1 - len(out)))
            out += [self._info(obj) for obj in page.get("Contents", [])]
            if len(out) > limit or not page.get("IsTruncated"):
                return out[:limit], len(out) > limit
            request["ContinuationToken"] = page["NextContinuationToken"]

    def _info(self, obj: dict) -> ObjectInfo:
        return ObjectInfo(obj["Key"][len(self.prefix):], obj["Size"], obj["ETag"].strip('"'),
                          modified=_utc(obj["LastModified"]))

    def _get(self, key: str) -> dict:
        from botocore.exceptions import ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise _not_found(key) from None
            raise

    def read_bytes(self, key: str, max_bytes: int | None = None) -> bytes:
        response = self._get(key)
        body = response["Body"]
        try:
            if max_bytes is None:
                return body.read()
            # The GET's own Content-Length: checked before a byte of the body is read, and it belongs to the
            # very version being read, so a concurrent overwrite cannot slip past it.
            size = response.get("ContentLength")
            if size is not None and size > max_bytes:
                raise ObjectTooLarge(key, size, max_bytes)
            data = body.read(max_bytes + 1)
            if len(data) > max_bytes:
                raise ObjectTooLarge(key, len(data), max_bytes, at_least=True)
            return data
        finally:
            body.close()

    def download(self, key: str, dest: str | Path, max_bytes: int | None = None) -> None:
        if max_bytes is not None:
            info = self.stat(key)
            if info is None:
                raise _not_found(key)
            if info.size > max_bytes:
                raise ObjectTooLarge(key, info.size, max_bytes)
        self.client.download_file(self.bucket, self._key(key), str(dest))
        # download_file sizes its ranged GETs from its own HEAD: an object replaced by a larger one since the
        # check above is caught here, after streaming to disk, never in memory.
        if max_bytes is not None and (size := Path(dest).stat().st_size) > max_bytes:
            Path(dest).unlink(missing_ok=True)
            raise ObjectTooLarge(key, size, max_bytes)

    def stat(self, key: str) -> ObjectInfo | None:
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return ObjectInfo(key, head["ContentLength"], head["ETag"].strip('"'), modified=_utc(head["LastModified"]))

    def exists(self, key: str) -> bool:
        return self.stat(key) is not None

    def write_bytes(self, key: str, data: bytes, overwrite: bool = False) -> None:
        extra = {} if overwrite else {"IfNoneMatch": "*"}  # S3 conditional write: refuse to replace
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **extra)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                raise ObjectExists(f"{key} already exists; it is never overwritten") from None
            raise

    def delete(self, key: str) -> None:
        """Remove the object at ``key`` (on a versioned bucket, hide it behind a delete marker)."""
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

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
