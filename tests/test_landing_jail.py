"""The local landing zone is a jail: a tenant who can write its own folder reaches nothing outside it.

Each test plants what a hostile tenant ("evil") can make in its own folder — links to another tenant's
("victim") upload, to a file outside the landing zone, to /etc/passwd; hard links; FIFOs; folders where files
are expected — and checks that the store refuses it by name and that nothing outside was read or written.
"""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import boto3
import pytest

from ftpipe import objectstore
from ftpipe.objectstore import LocalObjectStore, ObjectExists, ObjectTooLarge, S3ObjectStore, UnsafeObject

REPO_ROOT = Path(__file__).resolve().parents[1]
VICTIM_TRAIN = "tenants/victim/jobs/j/train.jsonl"
EVIL_JOB = "tenants/evil/jobs/j"
EVIL_TRAIN = f"{EVIL_JOB}/train.jsonl"
REPORT = "tenants/evil/results/j/rejected.md"


@pytest.fixture
def landing_dir(tmp_path) -> Path:
    """The local landing zone's folder, where a test plants what a hostile tenant can make on disk."""
    return tmp_path / "landing"


@pytest.fixture
def store(landing_dir) -> LocalObjectStore:
    store = LocalObjectStore(landing_dir)
    store.write_bytes(VICTIM_TRAIN, b'{"text": "victim data"}\n')
    store.write_bytes("tenants/victim/results/j/validation.md", b"victim report")
    (landing_dir / EVIL_JOB).mkdir(parents=True)
    return store


@pytest.fixture
def outside(tmp_path):
    """A read-only tree outside the landing zone that nothing may touch."""
    root = tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    (root / "secret.txt").write_text("the host's secret")
    (root / "sub" / "deep.txt").write_text("deeper secret")
    for p in (root / "secret.txt", root / "sub" / "deep.txt"):
        p.chmod(0o444)
    for d in (root / "sub", root):
        d.chmod(0o555)
    yield root
    for d in (root, root / "sub"):
        d.chmod(0o755)


def snapshot(*roots: Path) -> dict:
    """Every entry under ``roots`` with its content, mode and mtime, links not followed."""
    out = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                st = p.lstat()
                content = p.read_bytes() if stat.S_ISREG(st.st_mode) else os.readlink(p) if p.is_symlink() else None
                out[str(p)] = (content, stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_nlink)
    return out


def kinds(store, prefix="tenants/") -> dict[str, str]:
    return {info.key: info.kind for info in store.list(prefix)}


def assert_refused_read(store, key, tmp_path, words):
    with pytest.raises(UnsafeObject, match=f"^{key} is {words}") as exc:
        store.read_bytes(key)
    assert exc.value.key == key
    dest = tmp_path / "downloaded"
    with pytest.raises(UnsafeObject, match=f"^{key} is {words}"):
        store.download(key, dest)
    assert not dest.exists()
    with pytest.raises(UnsafeObject, match=f"^{key} is {words}"):
        store.stat(key)
    assert store.exists(key) is False


# -- links in the tenant's uploads ------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["victim", "victim-relative", "outside", "/etc/passwd", "dangling"])
def test_a_symlinked_upload_is_refused_and_listed_as_a_link(store, landing_dir, outside, tmp_path, target):
    link = landing_dir / EVIL_TRAIN
    link.symlink_to({"victim": str(landing_dir / VICTIM_TRAIN), "victim-relative": "../../../victim/jobs/j/train.jsonl",
                     "outside": str(outside / "secret.txt"), "/etc/passwd": "/etc/passwd",
                     "dangling": str(tmp_path / "nothing")}[target])
    assert_refused_read(store, EVIL_TRAIN, tmp_path, "a symbolic link; the landing zone accepts only regular files")
    assert kinds(store)[EVIL_TRAIN] == "symlink"
    assert kinds(store)[VICTIM_TRAIN] == "file"  # the victim's own upload stays readable
    assert store.read_bytes(VICTIM_TRAIN) == b'{"text": "victim data"}\n'


def test_a_symlinked_manifest_is_refused_with_the_tenants_words(store, landing_dir, outside):
    (landing_dir / EVIL_JOB / "manifest.yaml").symlink_to(outside / "secret.txt")
    with pytest.raises(UnsafeObject) as exc:
        store.read_bytes(f"{EVIL_JOB}/manifest.yaml")
    assert str(exc.value) == ("tenants/evil/jobs/j/manifest.yaml is a symbolic link; the landing zone accepts only "
                              "regular files (upload the file itself)")
    assert (exc.value.kind, exc.value.path) == ("symlink", f"{EVIL_JOB}/manifest.yaml")


@pytest.mark.parametrize("target", ["victim-job", "outside"])
def test_a_symlinked_folder_is_neither_read_through_nor_descended_into(store, landing_dir, outside, tmp_path, target):
    if target == "victim-job":
        (landing_dir / EVIL_JOB).rmdir()
        (landing_dir / EVIL_JOB).symlink_to(landing_dir / "tenants/victim/jobs/j")
        link, key = EVIL_JOB, EVIL_TRAIN
    else:
        evil = landing_dir / "tenants/evil"
        (evil / "jobs/j").rmdir()
        (evil / "jobs").rmdir()
        evil.rmdir()
        evil.symlink_to(outside)
        link, key = "tenants/evil", "tenants/evil/secret.txt"
    with pytest.raises(UnsafeObject, match=f"^{key}: {link} is a symbolic link") as exc:
        store.read_bytes(key)
    assert exc.value.path == link
    with pytest.raises(UnsafeObject, match=f"{link} is a symbolic link"):
        store.download(key, tmp_path / "d")
    with pytest.raises(UnsafeObject, match=f"{link} is a symbolic link"):
        store.stat(key)
    assert not store.exists(key)
    listed = kinds(store)
    assert listed[link] == "symlink"
    assert not [k for k in listed if k.startswith(link + "/")]
    assert list(listed).count(VICTIM_TRAIN) == 1
    # A prefix that goes through the link reports the link itself, not what is behind it.
    assert [(i.key, i.kind) for i in store.list(link + "/")] == [(link, "symlink")]


def test_a_hard_link_to_another_tenants_file_is_refused(store, landing_dir, tmp_path):
    before = {i.key: i.version for i in store.list("tenants/")}
    os.link(landing_dir / VICTIM_TRAIN, landing_dir / EVIL_TRAIN)
    assert_refused_read(store, EVIL_TRAIN, tmp_path, r"a hard link \(the file has 2 names\)")
    listed = {i.key: i for i in store.list("tenants/")}
    assert listed[EVIL_TRAIN].kind == "hardlink"
    # The victim's file has two names now too: its version changes, so a reader looks at it again.
    assert listed[VICTIM_TRAIN].kind == "hardlink" and listed[VICTIM_TRAIN].version != before[VICTIM_TRAIN]
    (landing_dir / EVIL_TRAIN).unlink()
    assert store.list(VICTIM_TRAIN)[0].version == before[VICTIM_TRAIN]


def _within(seconds, fn, *args):
    """Run fn in a daemon thread: a hang fails the test instead of blocking the suite."""
    result = {}

    def target():
        try:
            result["value"] = fn(*args)
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__} blocked for more than {seconds} s"
    return result


def test_a_fifo_is_refused_without_blocking(store, landing_dir, tmp_path):
    os.mkfifo(landing_dir / EVIL_TRAIN)
    for fn, args in ((store.read_bytes, (EVIL_TRAIN,)), (store.download, (EVIL_TRAIN, tmp_path / "d")),
                     (store.exists, (EVIL_TRAIN,))):
        result = _within(5, fn, *args)
        if fn == store.exists:
            assert result["value"] is False
        else:
            assert isinstance(result["error"], UnsafeObject) and "is a FIFO" in str(result["error"])
    assert kinds(store)[EVIL_TRAIN] == "special"


def test_the_check_is_made_on_the_opened_file(store, landing_dir, monkeypatch, tmp_path):
    """A swap between the name check and the open (simulated: the name check sees a plain file) is caught."""
    real = os.stat(landing_dir / VICTIM_TRAIN)
    monkeypatch.setattr(objectstore, "_lstat", lambda name, dir_fd: real)
    cases = {"fifo": lambda p: os.mkfifo(p), "dir": lambda p: p.mkdir(),
             "hardlink": lambda p: os.link(landing_dir / VICTIM_TRAIN, p),
             "symlink": lambda p: p.symlink_to(landing_dir / VICTIM_TRAIN)}
    for name, make in cases.items():
        make(landing_dir / EVIL_JOB / name)
        result = _within(5, store.read_bytes, f"{EVIL_JOB}/{name}")
        assert isinstance(result.get("error"), UnsafeObject), name


def test_a_directory_where_a_file_is_expected_is_refused(store, landing_dir, tmp_path):
    (landing_dir / EVIL_TRAIN).mkdir()
    assert_refused_read(store, EVIL_TRAIN, tmp_path, "a directory")
    assert EVIL_TRAIN not in kinds(store)


def test_a_file_where_a_folder_is_expected_means_nothing_is_there(store, landing_dir):
    (landing_dir / EVIL_JOB).rmdir()
    (landing_dir / EVIL_JOB).write_text("not a folder")
    with pytest.raises(FileNotFoundError):
        store.read_bytes(EVIL_TRAIN)
    assert store.stat(EVIL_TRAIN) is None and not store.exists(EVIL_TRAIN)
    assert store.list(EVIL_JOB + "/") == []


# -- the platform's writes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("trap", ["results->victim", "results->outside", "results-is-a-file", "results/j->outside"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_writes_never_go_through_a_link_or_into_a_file(store, landing_dir, outside, trap, overwrite):
    results = landing_dir / "tenants/evil/results"
    if trap == "results->victim":
        results.symlink_to(landing_dir / "tenants/victim/results")
        blocked = "tenants/evil/results is a symbolic link"
    elif trap == "results->outside":
        results.symlink_to(outside)
        blocked = "tenants/evil/results is a symbolic link"
    elif trap == "results-is-a-file":
        results.write_text("a file")
        blocked = "tenants/evil/results is a file, not a folder"
    else:
        results.mkdir()
        (results / "j").symlink_to(outside / "sub")
        blocked = "tenants/evil/results/j is a symbolic link"
    before = snapshot(outside, landing_dir / "tenants/victim")
    with pytest.raises(UnsafeObject) as exc:
        store.write_bytes(REPORT, b"# Job rejected\n", overwrite=overwrite)
    assert str(exc.value).startswith(f"cannot write {REPORT}: {blocked}; ")
    assert snapshot(outside, landing_dir / "tenants/victim") == before
    assert not list(outside.rglob("rejected.md")) and not list((landing_dir / "tenants/victim").rglob("rejected.md"))


@pytest.mark.parametrize("target", ["victim", "outside"])
def test_overwriting_a_link_replaces_the_link_never_its_target(store, landing_dir, outside, target):
    victim_report = landing_dir / "tenants/victim/results/j/validation.md"
    (landing_dir / "tenants/evil/results/j").mkdir(parents=True)
    link = landing_dir / REPORT
    link.symlink_to(victim_report if target == "victim" else outside / "secret.txt")
    before = snapshot(outside, landing_dir / "tenants/victim")
    with pytest.raises(ObjectExists):
        store.write_bytes(REPORT, b"first")  # without overwrite a link is a taken name, not a way through
    store.write_bytes(REPORT, b"# Job rejected\n", overwrite=True)
    assert not link.is_symlink() and link.read_bytes() == b"# Job rejected\n"
    assert store.read_bytes(REPORT) == b"# Job rejected\n"
    assert snapshot(outside, landing_dir / "tenants/victim") == before


def test_a_hard_link_at_the_target_is_replaced_not_written_through(store, landing_dir):
    victim_report = landing_dir / "tenants/victim/results/j/validation.md"
    (landing_dir / "tenants/evil/results/j").mkdir(parents=True)
    os.link(victim_report, landing_dir / REPORT)
    store.write_bytes(REPORT, b"mine", overwrite=True)
    assert victim_report.read_bytes() == b"victim report" and victim_report.stat().st_nlink == 1


def test_a_directory_at_the_target_is_refused(store, landing_dir):
    (landing_dir / REPORT).mkdir(parents=True)
    with pytest.raises(UnsafeObject, match=f"^cannot write {REPORT}: {REPORT} is a directory"):
        store.write_bytes(REPORT, b"x", overwrite=True)
    with pytest.raises(ObjectExists):
        store.write_bytes(REPORT, b"x")


def test_reports_are_readable_by_the_tenant_whatever_the_umask(tmp_path):
    store = LocalObjectStore(tmp_path / "landing")
    old = os.umask(0o077)
    try:
        store.write_bytes(REPORT, b"r")
        store.write_bytes("tenants/evil/billing/2025-01.md", b"b", overwrite=True)
    finally:
        os.umask(old)
    root = tmp_path / "landing"
    for d in ("tenants", "tenants/evil", "tenants/evil/results", "tenants/evil/results/j", "tenants/evil/billing"):
        assert stat.S_IMODE((root / d).stat().st_mode) == 0o755, d
    for f in (REPORT, "tenants/evil/billing/2025-01.md"):
        assert stat.S_IMODE((root / f).stat().st_mode) == 0o644, f
    assert not [p for p in root.rglob(".ftpipe-tmp-*")]


def test_writes_without_renameat2_still_never_overwrite(tmp_path, monkeypatch):
    monkeypatch.setattr(objectstore, "_rename_noreplace", lambda src, dst, dir_fd: False)
    store = LocalObjectStore(tmp_path / "landing")
    store.write_bytes(REPORT, b"one")
    with pytest.raises(ObjectExists):
        store.write_bytes(REPORT, b"two")
    assert store.read_bytes(REPORT) == b"one"
    assert kinds(store) == {REPORT: "file"}  # the temporary second name is gone


# -- deletion ------------------------------------------------------------------------------------------------


def test_deleting_a_tenant_whose_folder_is_a_link_removes_only_the_link(store, landing_dir, outside):
    evil = landing_dir / "tenants/evil"
    for p in (evil / "jobs/j", evil / "jobs"):
        p.rmdir()
    evil.rmdir()
    evil.symlink_to(landing_dir / "tenants/victim")
    before = snapshot(outside, landing_dir / "tenants/victim")
    assert store.delete_prefix("tenants/evil/") == 1
    assert not evil.exists() and not evil.is_symlink()
    assert snapshot(outside, landing_dir / "tenants/victim") == before


def test_deleting_a_tenant_never_follows_links_inside_it(store, landing_dir, outside):
    (landing_dir / EVIL_JOB / "out").symlink_to(outside)
    (landing_dir / EVIL_JOB / "victim").symlink_to(landing_dir / "tenants/victim")
    (landing_dir / EVIL_TRAIN).write_text("x")
    before = snapshot(outside, landing_dir / "tenants/victim")
    assert store.delete_prefix("tenants/evil/") == 3
    assert not (landing_dir / "tenants/evil").exists()
    assert snapshot(outside, landing_dir / "tenants/victim") == before


# -- sizes ---------------------------------------------------------------------------------------------------


def test_max_bytes_refuses_a_large_local_file_without_reading_it(store, landing_dir, tmp_path):
    path = landing_dir / EVIL_TRAIN
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # a sparse 1 GiB: reading it all would show in time and memory
    with pytest.raises(ObjectTooLarge, match=f"^{EVIL_TRAIN} is 1,073,741,824 bytes, over the limit of 1,000 bytes"):
        store.read_bytes(EVIL_TRAIN, max_bytes=1000)
    with pytest.raises(ObjectTooLarge) as exc:
        store.download(EVIL_TRAIN, tmp_path / "d", max_bytes=1000)
    assert (exc.value.key, exc.value.size, exc.value.limit) == (EVIL_TRAIN, 1 << 30, 1000)
    assert not (tmp_path / "d").exists()
    assert store.read_bytes(VICTIM_TRAIN, max_bytes=len(b'{"text": "victim data"}\n')) == b'{"text": "victim data"}\n'


def test_max_bytes_holds_for_a_file_that_grows_while_it_is_read(store, landing_dir, monkeypatch):
    (landing_dir / EVIL_TRAIN).write_bytes(b"x" * 5000)
    real_fstat = os.fstat

    def shrunk(fd):  # the size seen at open is small, the file then grows
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 10,
                               st.st_atime, st.st_mtime, st.st_ctime))

    monkeypatch.setattr(objectstore.os, "fstat", shrunk)
    with pytest.raises(ObjectTooLarge, match="at least 1,001 bytes"):
        store.read_bytes(EVIL_TRAIN, max_bytes=1000)


def test_max_bytes_on_s3_reads_no_more_than_the_limit(s3_endpoint, s3_bucket, tmp_path):
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    store = S3ObjectStore(client, s3_bucket, "landing")
    store.write_bytes(EVIL_TRAIN, b"y" * 100_000)
    read = []
    real_get = client.get_object

    def spying_get(**kwargs):
        response = real_get(**kwargs)
        body_read = response["Body"].read
        response["Body"].read = lambda amt=None: read.append(len(data := body_read(amt))) or data
        return response

    client.get_object = spying_get
    with pytest.raises(ObjectTooLarge, match=f"^{EVIL_TRAIN} is 100,000 bytes, over the limit of 1,000 bytes"):
        store.read_bytes(EVIL_TRAIN, max_bytes=1000)
    assert sum(read) <= 1001
    assert store.read_bytes(EVIL_TRAIN, max_bytes=100_000) == b"y" * 100_000
    with pytest.raises(ObjectTooLarge):
        store.download(EVIL_TRAIN, tmp_path / "d", max_bytes=99_999)
    assert not (tmp_path / "d").exists()
    store.download(EVIL_TRAIN, tmp_path / "d", max_bytes=100_000)
    assert (tmp_path / "d").read_bytes() == b"y" * 100_000
    with pytest.raises(FileNotFoundError):
        store.read_bytes("tenants/evil/jobs/j/missing", max_bytes=10)


_DOWNLOAD_RSS = """
import resource, sys
from ftpipe.objectstore import LocalObjectStore
store = LocalObjectStore(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
store.download(sys.argv[2], sys.argv[3], max_bytes=int(sys.argv[4]))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)  # KiB on Linux
"""


def test_download_streams_instead_of_holding_the_object(store, landing_dir, tmp_path):
    size = 200 * 1024 * 1024
    with open(landing_dir / EVIL_TRAIN, "wb") as f:
        f.truncate(size)
        f.write(b"start")
        f.seek(size - 3)
        f.write(b"end")
    dest = tmp_path / "copy"
    out = subprocess.run([sys.executable, "-c", _DOWNLOAD_RSS, str(landing_dir), EVIL_TRAIN, str(dest), str(size)],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True)
    growth_kib = int(out.stdout.strip())
    assert growth_kib < 100 * 1024, f"download grew the process by {growth_kib} KiB"
    assert dest.stat().st_size == size
    with open(dest, "rb") as f:
        assert f.read(5) == b"start"
        f.seek(size - 3)
        assert f.read() == b"end"


# -- keys ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["tenants/evil/jobs/j/a\0b", "tenants/evil/jobs/j/..\\..\\x",
                                 "tenants/evil/jobs/j/" + "a" * 300, "tenants/evil/jobs/" + "é" * 128 + "/x"])
def test_keys_with_nul_backslash_or_overlong_parts_are_refused(store, key):
    for call in (lambda: store.read_bytes(key), lambda: store.write_bytes(key, b""), lambda: store.exists(key),
                 lambda: store.stat(key), lambda: store.download(key, "/dev/null")):
        with pytest.raises(ValueError, match="invalid object key"):
            call()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
                    reason="drops to another account: needs root and setpriv")
def test_a_folder_its_tenant_made_unsearchable_is_skipped_not_fatal_to_the_listing():
    """The platform does not run as root: a tenant's chmod on its own folder (readable, not searchable, or
    neither) hides that folder from the listing and nothing else. Run as 'nobody', with the system Python,
    since permission bits do not bind root."""
    # Everything 'nobody' runs lies in a world-readable folder of its own: the checkout may not be readable.
    root = Path(tempfile.mkdtemp(prefix="ftpipe-jail-", dir="/tmp"))
    try:
        root.chmod(0o755)
        shutil.copy(REPO_ROOT / "ftpipe" / "objectstore.py", root / "objectstore.py")
        landing_dir = root / "landing"
        store = LocalObjectStore(landing_dir)
        for tenant in ("aaa", "bbb", "zzz"):
            store.write_bytes(f"tenants/{tenant}/jobs/j1/manifest.yaml", b"x")
        (landing_dir / "tenants/aaa/jobs/j1").chmod(0o744)  # readable, not searchable
        (landing_dir / "tenants/bbb/jobs").chmod(0o000)
        script = ("import sys; sys.path.insert(0, sys.argv[1]); from objectstore import LocalObjectStore; "
                  "print(sorted(o.key for o in LocalObjectStore(sys.argv[2]).list('tenants/')))")
        listed = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3",
                                 "-I", "-c", script, str(root), str(landing_dir)], capture_output=True, text=True,
                                timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.strip() == "['tenants/zzz/jobs/j1/manifest.yaml']"
    finally:
        for path in root.rglob("*"):
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(root)
