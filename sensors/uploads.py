"""The upload sensor: a new job manifest in the landing zone becomes a partition and a queued run of its
first stage, ``prepare`` (``sensors.stages`` queues the GPU stage once that has succeeded).

The manifest is written last, so its arrival is the submission. A manifest's version is its content, the
SHA-256 of its bytes: the same bytes written again (touched, or the same file uploaded again) start nothing
once that version is queued, while changed bytes queue a new run. The listing's own version of the object
(size and mtime locally; ETag and LastModified on S3) only tells the sensor when to read a manifest again. A
refused version is the exception: uploading it again, even unchanged, retries it, since what was wrong may
have been the data, the quota or the platform.

A manifest whose ``dataset`` or ``eval_dataset`` is not in the job folder yet waits: nothing queues, and
each tick looks for the files again (one stat each) until they are all there, then queues the job.
``DATA_WAIT_SECONDS`` after the sensor first saw that version it refuses it, naming the missing files and
their fields; uploading the manifest again retries. Waiting is logged once and writes nothing.

Admission routes each job to the smallest pool whose slot fits its memory estimate (``ftpipe.routing``; the
prepare run carries it as ``ftpipe/routed-pool``, the finetune run holds its slot); a job that fits no pool
is refused here, with the estimate, and never queues. So is a manifest that does not parse, names an
unknown base model, or asks for what could never be served (``ftpipe.admission``).

Quotas are checked here too, against the month's billable GPU-hours in the usage ledger: a tenant whose
tier has a hard quota that is used up is refused (the reason lands in its results area); a job over a
soft quota queues, tagged ``ftpipe/over-quota``, and its hours are billed as overage. The pre-flight checks
the hard quota again with the job's own estimate, still before any GPU time.

Every manifest is a stranger's input. Each one is admitted on its own (``ftpipe.admission``): whatever it
holds, and whatever goes wrong with it, costs that job a ``rejected.md`` and costs the other tenants nothing.
Its version is recorded in the cursor before it is looked at, so no manifest is tried twice, and a tick
that has spent its time budget leaves the rest for the next tick instead of timing out. When a job queues,
the ``rejected.md`` of an earlier version is removed, so that it never stands beside the new run's reports.

A tick lists only the tenants' ``jobs/`` folders, each in installments that go on from where the last tick
stopped (``ftpipe.landing_scan``): its cost does not grow with data files, reports or finished jobs, and a
tenant with a huge folder delays only its own manifests.

A job folder whose name breaks the naming rules is never read. If only the job name is wrong, the refusal
goes where the tenant reads it and no valid job's reports can be, ``tenants/{tenant}/results/_rejected/``
(``ftpipe.landing.rejected_name_key``), once per version of the manifest; if the tenant name is wrong, the
tenant's folder is not listed, no key is built from it, and the refusal is logged once.

The cursor is a JSON object with ``"_sweep"`` (where each tenant's listing goes on) and one entry per
manifest: ``{"v": listing version, "sha256": digest, "state": "queued" | "refused" | "waiting" | "ignored"}``,
and for a waiting one ``"since"`` (when the sensor first saw that version, epoch seconds) and ``"needs"``
(the missing files by field). Fields an entry does not know are ignored; an entry that is a plain string
(the listing version alone, from before content digests) stands for a version already decided, so an
upgrade queues nothing again.
"""

import hashlib
import json
import time
from datetime import datetime, timezone
from itertools import zip_longest

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    sensor,
)

from ft_assets.jobs import prepare_job
from ft_assets.partition import publish
from ftpipe.admission import admit
from ftpipe.basemodel.registry import BaseModelRegistry
from ftpipe.landing import (
    TENANTS_PREFIX,
    job_file_key,
    manifest_key,
    match_job_key,
    match_manifest_key,
    rejected_name_key,
    results_key,
)
from ftpipe.landing_scan import SCAN_BUDGET, Scan, scan
from ftpipe.manifest import MAX_MANIFEST_BYTES
from ftpipe.metering.ledger import month_of
from ftpipe.metering.quota import decide_for_tenant
from ftpipe.objectstore import FILE, ObjectInfo, ObjectStore, ObjectTooLarge, UnsafeObject
from ftpipe.tenants import PlatformConfig
from partitions.keys import InvalidName, parse_partition_key, partition_key, validate_name
from partitions.run_tags import MANIFEST_VERSION_TAG, OVER_QUOTA_TAG, run_tags
from partitions.tenant_jobs import TENANT_JOBS_PARTITIONS, tenant_jobs_partitions
from resources import (
    BaseModelsResource,
    CatalogResource,
    LandingZoneResource,
    PlatformResource,
)
from sensors.job_state import REJECTED, STATUS_FILE, rejected

TICK_BUDGET_SECONDS = 30.0
"""Half of Dagster's sensor timeout (60 s): manifests not reached by then wait for the next tick."""
DATA_WAIT_SECONDS = 600.0
"""How long a manifest waits for the data files it names, from when the sensor first saw its version."""

QUEUED, REFUSED, WAITING, IGNORED = "queued", "refused", "waiting", "ignored"
SWEEP_KEY = "_sweep"
"""The cursor's entry for where each tenant's sweep goes on (``ftpipe.landing_scan``); no key of a manifest
can start with '_'."""


Listed = tuple[str, str, str, ObjectInfo]
"""A listed manifest (or linked job folder): tenant, job, partition key (the object's key when a name is
invalid), the object."""


@sensor(job=prepare_job, minimum_interval_seconds=5, default_status=DefaultSensorStatus.RUNNING)
def upload_sensor(context: SensorEvaluationContext, landing: LandingZoneResource, platform: PlatformResource,
                  base_models: BaseModelsResource, catalog: CatalogResource) -> SensorResult:
    store = landing.store()
    seen, positions = _load_cursor(context.cursor)
    found = scan(store, positions, SCAN_BUDGET)
    listed, changed, waiting = _sort_listing(context, found, seen)
    intake = _Intake(context, store, platform.config(), base_models.registry(), catalog, seen)
    requests: list[RunRequest] = []
    deadline = time.monotonic() + TICK_BUDGET_SECONDS
    # Waiting manifests last: looking for their files again must not hold up anyone's new upload.
    turns = _one_per_tenant_in_turn(changed) + _one_per_tenant_in_turn(waiting)
    for decided, manifest in enumerate(turns):
        if decided and time.monotonic() > deadline:
            break  # not recorded: the next tick takes the rest (at least one per tick: it always progresses)
        request = intake.decide(*manifest)
        if request is not None:
            requests.append(request)
    known = set(context.instance.get_dynamic_partitions(TENANT_JOBS_PARTITIONS))
    requested = dict.fromkeys(r.partition_key for r in requests if r.partition_key)  # each once, in order
    new_keys = [key for key in requested if key not in known]
    # Forget manifests that are gone (a deleted tenant): the cursor stays as small as the landing zone, and
    # a job uploaded again after its deletion is new. Only what this tick's sweep covered can be known gone.
    seen = {key: entry for key, entry in seen.items() if key in listed or not _swept_away(key, found)}
    return SensorResult(
        cursor=json.dumps({**seen, SWEEP_KEY: found.positions()}, sort_keys=True, separators=(",", ":")),
        run_requests=requests,
        dynamic_partitions_requests=[tenant_jobs_partitions.build_add_request(new_keys)] if new_keys else [],
    )


def _sort_listing(context: SensorEvaluationContext, found: Scan,
                  seen: dict[str, dict | str]) -> tuple[set[str], list[Listed], list[Listed]]:
    """What this tick's sweep listed: every key it covered, the manifests whose listing version changed, and the
    unchanged ones still waiting for their data files. A tenant folder with an invalid name is logged once."""
    listed: set[str] = set()
    changed: list[Listed] = []
    waiting: list[Listed] = []
    for folder in found.invalid:
        listed.add(folder)
        if folder not in seen:  # said once, not every tick
            seen[folder] = {"v": "", "state": IGNORED}
            context.log.warning(f"ignoring {folder!r}: {_name_problem('tenant', folder[len(TENANTS_PREFIX):])}")
    for tenant, reason in found.unreadable.items():
        context.log.warning(f"could not list the jobs of tenant {tenant!r} (the others' go on): {reason}")
    for obj in found.objects:
        # A job folder that is a link is listed as one entry: refused like a linked manifest, never entered.
        match = match_manifest_key(obj.key) or (match_job_key(obj.key) if obj.kind != FILE else None)
        if match is None:
            continue
        tenant, job = match
        try:
            key = partition_key(tenant, job)
        except InvalidName:
            key = obj.key  # still remembered, so that it is refused once, not every tick
        listed.add(key)
        entry = seen.get(key)
        if isinstance(entry, str):  # from before content digests: the listing version of a decided manifest
            entry = seen[key] = {"v": _listing_version(obj) if entry == obj.version else entry}
        if entry is None or entry.get("v") != _listing_version(obj):
            changed.append((tenant, job, key, obj))
        elif entry.get("state") == WAITING:
            waiting.append((tenant, job, key, obj))
    return listed, changed, waiting


class _Intake:
    """One tick's decisions, manifest by manifest: each is recorded in ``seen`` (the cursor's entries) and
    ends as a run request, a refusal in the tenant's results, or a wait for its data files."""

    def __init__(self, context: SensorEvaluationContext, store: ObjectStore, config: PlatformConfig,
                 registry: BaseModelRegistry, catalog: CatalogResource, seen: dict[str, dict | str]):
        self.context, self.store, self.config, self.registry, self.catalog = context, store, config, registry, catalog
        self.seen = seen
        self.month = month_of(datetime.now(timezone.utc))
        self._used_hours: dict[str, float] | None = None  # read from the ledger once per tick, only when needed

    def used_hours(self, tenant: str) -> float:
        if self._used_hours is None:  # the platform's own state: if it cannot be read, the tick fails, is retried
            self._used_hours = self.catalog.ledger().charged_hours(self.month)
        return self._used_hours.get(tenant, 0.0)

    def decide(self, tenant: str, job: str, key: str, obj: ObjectInfo) -> RunRequest | None:
        version = _listing_version(obj)
        old = self.seen.get(key) or {}
        assert isinstance(old, dict)  # an entry from before content digests was made a dict when its key was listed
        if old.get("state") == WAITING and old.get("v") == version and _still_waiting(self.store, tenant, job, old):
            return None
        # Recorded first: whatever happens below, this version is not tried again (a refusal is retried only
        # when the manifest is uploaded again).
        entry = self.seen[key] = {"v": version, "state": REFUSED}
        if key == obj.key:
            entry["state"] = IGNORED
            _refuse_name(self.context, self.store, tenant, job, obj.key)
            return None
        if tenant not in self.config.tenants:
            _reject(self.context, self.store, tenant, job, f"tenant '{tenant}' is not configured on this platform")
            return None
        quota = decide_for_tenant(self.config, tenant, self.used_hours(tenant), self.month)
        missing: dict[str, str] = {}
        try:
            # Read only if it is a regular file of a manifest's size: never through a link, never gigabytes.
            manifest = self.store.read_bytes(obj.key, max_bytes=MAX_MANIFEST_BYTES)
            digest = entry["sha256"] = hashlib.sha256(manifest).hexdigest()
            if old.get("state") == QUEUED and old.get("sha256") == digest:
                entry["state"] = QUEUED  # the same bytes written again: this version has had its run
                return None
            admission = admit(manifest, obj.key, self.config, self.registry)
            refusal = admission.refusal or (None if quota.allowed else quota.message)
            if not refusal:
                missing = _missing(self.store, tenant, job, admission.files)
        except (UnsafeObject, ObjectTooLarge) as exc:
            refusal = str(exc)
        except Exception:  # noqa: BLE001 - one manifest must never stop the others' intake
            self.context.log.exception(f"admitting {obj.key} failed; the job is refused and the others go on")
            refusal = ("the platform could not admit this job because of an internal error; the operators have "
                       "been told. Submitting the manifest again retries it.")
        if missing and not refusal:
            refusal = self._wait(tenant, job, key, obj, old, entry, missing)
            if refusal is None:
                return None
        if refusal:
            _reject(self.context, self.store, tenant, job, refusal)
            return None
        entry["state"] = QUEUED
        assert admission.pool is not None  # admit() names a pool for every job it does not refuse
        if _has_refusal(self.store, tenant, job):
            _remove_old_refusal(self.context, self.store, tenant, job)
        return RunRequest(
            # The listing version too: a tenant who goes back to an earlier manifest (A, B, then A again) gets a
            # run, where Dagster would skip a run key it has seen.
            run_key=f"{key}@{digest}@{version}",
            partition_key=key,
            tags={**run_tags(self.config, tenant, job, admission.pool), MANIFEST_VERSION_TAG: digest,
                  **({OVER_QUOTA_TAG: "soft"} if quota.over_soft_quota else {})},
        )

    def _wait(self, tenant: str, job: str, key: str, obj: ObjectInfo, old: dict, entry: dict,
              missing: dict[str, str]) -> str | None:
        """Keeps waiting for the data files (None) until ``DATA_WAIT_SECONDS`` after the sensor first saw this
        version of the manifest; then the refusal, naming each missing file and its field."""
        again = old.get("state") == WAITING and old.get("sha256") == entry["sha256"]
        since = old.get("since", 0) if again else time.time()
        if time.time() - since < DATA_WAIT_SECONDS:
            self.seen[key] = {**entry, "state": WAITING, "since": since, "needs": missing}
            if not again:
                self.context.log.info(f"{tenant}/{job}: waiting up to {DATA_WAIT_SECONDS:.0f} s for "
                                      f"{', '.join(sorted(missing.values()))} before queueing it")
            return None
        return "; ".join(
            f"{obj.key}: field '{field}': names {name!r}, which is not in the job folder; waited "
            f"{DATA_WAIT_SECONDS / 60:g} minutes after the manifest arrived. Upload the data files, then "
            "the manifest again." for field, name in sorted(missing.items()))


def _load_cursor(cursor: str | None) -> tuple[dict[str, dict | str], dict[str, str]]:
    """The entries this sensor can read, and where each tenant's sweep goes on; anything else is forgotten
    (its manifest is looked at again, the tenant's folder swept from the start)."""
    try:
        entries = json.loads(cursor) if cursor else {}
    except ValueError:
        return {}, {}
    if not isinstance(entries, dict):
        return {}, {}
    positions = entries.pop(SWEEP_KEY, {})
    if not isinstance(positions, dict):
        positions = {}
    return ({key: entry for key, entry in entries.items() if isinstance(entry, str) or _readable(entry)},
            {t: p for t, p in positions.items() if isinstance(t, str) and isinstance(p, str)})


def _swept_away(key: str, found: Scan) -> bool:
    """True when this tick's scan covered where the manifest (or folder) remembered under ``key`` would be
    listed, and did not list it."""
    if key.startswith(TENANTS_PREFIX):  # remembered by its own key: a folder or manifest with an invalid name
        object_key = key
        tenant = key[len(TENANTS_PREFIX):].partition("/")[0]
        if key in found.invalid:
            return False
    else:
        try:
            tenant, job = parse_partition_key(key)
        except InvalidName:
            return True
        object_key = manifest_key(tenant, job)
    sweep = found.sweeps.get(tenant)
    return sweep is None or sweep.covers(object_key)


def _readable(entry: object) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("v"), str)
            and isinstance(entry.get("since", 0), int | float) and isinstance(entry.get("needs", {}), dict))


def _listing_version(obj: ObjectInfo) -> str:
    # An S3 ETag is the content's MD5: only LastModified tells that the same bytes were uploaded again.
    return f"{obj.version}@{obj.modified}" if obj.modified else obj.version


def _missing(store: ObjectStore, tenant: str, job: str, files: dict[str, str]) -> dict[str, str]:
    """The files, by manifest field, of which nothing is in the job folder. Something unsafe there (a link, a
    FIFO) is not missing: the run refuses it by name, as it refuses any bad data."""
    missing = {}
    for field, name in files.items():
        try:
            if store.stat(job_file_key(tenant, job, name)) is None:
                missing[field] = name
        except UnsafeObject:
            pass
    return missing


def _still_waiting(store: ObjectStore, tenant: str, job: str, entry: dict) -> bool:
    """True for a waiting manifest whose wait is not over and whose files are still missing: nothing to do or
    say. Otherwise the manifest is looked at in full, which queues or refuses it."""
    try:
        if time.time() - entry.get("since", 0) >= DATA_WAIT_SECONDS:
            return False
        return bool(_missing(store, tenant, job, entry.get("needs") or {}))
    except Exception:  # noqa: BLE001 - the full look refuses the job with the reason, like any other failure
        return False


def _one_per_tenant_in_turn(pending: list[tuple]) -> list[tuple]:
    """Each tenant's first new manifest, then each one's second, ..., the tenants with the fewest first: a tenant
    that uploads thousands of manifests, however slow, delays nobody's first by more than one admission, and
    when a tick runs out of time the flood is what waits."""
    by_tenant: dict[str, list[tuple]] = {}
    for item in pending:
        by_tenant.setdefault(item[0], []).append(item)
    rounds = zip_longest(*sorted(by_tenant.values(), key=len))
    return [item for round_ in rounds for item in round_ if item is not None]


def _reject(context: SensorEvaluationContext, store, tenant: str, job: str, reason: str) -> None:
    """The results area is the platform's: a refusal of a re-submitted manifest replaces the earlier one. A
    tenant that broke its own results area (a file or a link in its place) is told nothing, and only that."""
    context.log.warning(f"refused {tenant}/{job}: {reason[:500]}")
    try:
        publish(store, tenant, job, REJECTED, f"# Job rejected\n\n{reason}\n")
        publish(store, tenant, job, STATUS_FILE, json.dumps(rejected(reason).document(tenant, job), indent=2))
    except (OSError, ValueError) as exc:
        context.log.warning(f"could not write the refusal of {tenant}/{job} into its results area: {exc}")


def _refuse_name(context: SensorEvaluationContext, store, tenant: str, job: str, key: str) -> None:
    """A folder named against the rules is never read. Its tenant is told where it reads its reports, unless
    the tenant's own name is the wrong one: no key is ever built from an invalid tenant name."""
    tenant_problem = _name_problem("tenant", tenant)
    reason = tenant_problem or _name_problem("job", job)
    context.log.warning(f"ignoring {key!r}: {reason}")
    if tenant_problem:
        return
    text = (f"# Job rejected\n\n{key}: {reason}. Nothing in the folder was read; upload the job again into a "
            "folder with a valid name, its manifest last.\n")
    try:
        store.write_bytes(rejected_name_key(tenant, job), text.encode("utf-8", "backslashreplace"), overwrite=True)
    except (OSError, ValueError) as exc:
        context.log.warning(f"could not write the refusal of {key!r} into its tenant's results area: {exc}")


def _name_problem(kind: str, name: str) -> str | None:
    try:
        validate_name(kind, name)
    except InvalidName as exc:
        return str(exc)
    return None


def _has_refusal(store: ObjectStore, tenant: str, job: str) -> bool:
    try:
        return store.stat(results_key(tenant, job, REJECTED)) is not None
    except UnsafeObject:
        return True  # removed like a refusal: a link is deleted itself, never its target


def _remove_old_refusal(context: SensorEvaluationContext, store, tenant: str, job: str) -> None:
    """The refusal of an earlier version must not stand beside the reports of the run queued now."""
    try:
        store.delete(results_key(tenant, job, REJECTED))
    except Exception as exc:  # noqa: BLE001 - e.g. no s3:DeleteObject: a stale report must not stop the intake
        context.log.warning(f"could not remove the earlier refusal of {tenant}/{job}: {exc}")
