"""What a tick of the upload sensor lists: the tenants' jobs/ folders only, in installments whose cost does not
grow with data files, reports or finished jobs; a tenant with a huge folder delays only its own manifests."""

import json

import pytest
from dagster import instance_for_test

import sensors.uploads
from ftpipe.landing import api_file_key, job_file_key, manifest_key, results_key, statement_key
from ftpipe.landing_scan import scan
from ftpipe.objectstore import S3ObjectStore
from ftpipe.submission import submit_job
from tests.test_resubmission import DATA, MANIFEST, Sensor

pytestmark = pytest.mark.usefixtures("tiny_model")


class CountingStore:
    """The real store, with its listings counted (and, on S3, the ListObjectsV2 requests it really sent)."""

    def __init__(self, store):
        self.store, self.calls, self.requests = store, [], 0
        if isinstance(store, S3ObjectStore):
            store.client.meta.events.register("before-call.s3.ListObjectsV2", self._count)

    def _count(self, **_):
        self.requests += 1

    def list_children(self, prefix):
        self.calls.append(("children", prefix))
        return self.store.list_children(prefix)

    def list_page(self, prefix, start_after="", limit=1000):
        self.calls.append(("page", prefix))
        return self.store.list_page(prefix, start_after, limit)


def _fill(store, tenant: str, jobs: int, reports_per_job: int = 0):
    for j in range(jobs):
        submit_job(store, tenant, f"job-{j}", {"train.jsonl": DATA}, MANIFEST)
        for r in range(reports_per_job):
            store.write_bytes(results_key(tenant, f"job-{j}", f"report-{r}.md"), b"r")


def test_a_tick_lists_only_jobs_folders_and_its_cost_does_not_grow_with_reports_and_files(landing):
    store = landing.store()
    _fill(store, "acme", 3, reports_per_job=40)
    _fill(store, "initech", 2)
    for n in range(30):
        store.write_bytes(api_file_key("initech", f"file-{n}", "train.jsonl"), DATA)
    store.write_bytes(statement_key("acme", "2026-11"), b"bill")
    counting = CountingStore(store)
    found = scan(counting, {})
    assert sorted(o.key for o in found.objects) == sorted(
        [manifest_key(t, f"job-{j}") for t, n in (("acme", 3), ("initech", 2)) for j in range(n)]
        + [job_file_key(t, f"job-{j}", "train.jsonl") for t, n in (("acme", 3), ("initech", 2)) for j in range(n)])
    assert counting.calls == [("children", "tenants/"), ("page", "tenants/acme/jobs/"),
                              ("page", "tenants/initech/jobs/")]
    before = counting.requests
    # Many more reports and API files: the same listings, and on S3 the same number of requests.
    _fill(store, "acme", 0)
    for n in range(60):
        store.write_bytes(results_key("acme", "job-0", f"more-{n}.md"), b"r")
        store.write_bytes(api_file_key("acme", f"file-{n}", "x.jsonl"), DATA)
    counting.calls.clear()
    scan(counting, {})
    assert len(counting.calls) == 3 and counting.requests == 2 * before


def test_a_tenant_with_more_keys_than_a_ticks_budget_is_swept_over_several_ticks(landing):
    store = landing.store()
    _fill(store, "acme", 7)  # 14 keys: three ticks at 5 a tick
    _fill(store, "initech", 1)
    positions, seen, ticks = {}, [], 0
    while True:
        found = scan(store, positions, budget=5)
        ticks += 1
        assert manifest_key("initech", "job-0") in {o.key for o in found.objects}  # every tick, whole
        seen += [o.key for o in found.objects if o.key.startswith("tenants/acme/")]
        positions = found.positions()
        if "acme" not in positions:
            break
    assert ticks == 3 and sorted(seen) == sorted(o.key for o in store.list("tenants/acme/jobs/"))


def test_the_sensor_queues_a_flood_over_several_ticks_and_another_tenants_job_at_once(landing, platform_file,
                                                                                     monkeypatch):
    monkeypatch.setattr(sensors.uploads, "SCAN_BUDGET", 10)
    store = landing.store()
    _fill(store, "acme", 12)  # 24 keys: three ticks
    _fill(store, "initech", 1)
    with instance_for_test() as instance:
        sensor = Sensor(instance, landing, platform_file)
        first = sensor.queued()
        assert "initech__job-0" in first and len(first) == 1 + 5
        queued = first + sensor.queued() + sensor.queued()
        assert sorted(queued) == sorted([f"acme__job-{j}" for j in range(12)] + ["initech__job-0"])
        for _ in range(4):  # two full sweeps more: nothing is queued twice
            assert sensor.queued() == []

        # A deleted job is forgotten once the sweep has passed where it was, and is new when uploaded again.
        store.delete_prefix("tenants/acme/jobs/job-3/")
        for _ in range(3):
            sensor.queued()
        assert "acme__job-3" not in json.loads(sensor.cursor)
        assert "acme__job-4" in json.loads(sensor.cursor)
        submit_job(store, "acme", "job-3", {"train.jsonl": DATA}, MANIFEST)
        assert [k for _ in range(3) for k in sensor.queued()] == ["acme__job-3"]


class FailingFor:
    """The real store, except that listing one tenant's jobs fails (a bucket policy, a tenant's chmod)."""

    def __init__(self, store, prefix: str):
        self.store, self.prefix = store, prefix

    def __getattr__(self, name):
        return getattr(self.store, name)

    def list_page(self, prefix, start_after="", limit=1000):
        if prefix.startswith(self.prefix):
            raise PermissionError(13, "Permission denied", prefix)
        return self.store.list_page(prefix, start_after, limit)


def test_a_tenant_folder_that_cannot_be_listed_keeps_what_is_known_of_it_and_stops_no_one(landing, platform_file,
                                                                                         monkeypatch):
    store = landing.store()
    _fill(store, "acme", 1)
    _fill(store, "initech", 1)
    with instance_for_test() as instance:
        sensor = Sensor(instance, landing, platform_file)
        assert sensor.queued() == ["acme__job-0", "initech__job-0"]
        real_store = type(landing).store
        monkeypatch.setattr(type(landing), "store", lambda self: FailingFor(real_store(self), "tenants/acme/"))
        submit_job(store, "initech", "job-1", {"train.jsonl": DATA}, MANIFEST)
        assert sensor.queued() == ["initech__job-1"]
        assert sensor.said("could not list the jobs of tenant 'acme' (the others' go on): PermissionError") == 1
        assert "acme__job-0" in json.loads(sensor.cursor)  # not forgotten, so not queued again later

        # When no tenant can be listed, the tick fails where operators see it, and forgets nothing.
        monkeypatch.setattr(type(landing), "store", lambda self: FailingFor(real_store(self), "tenants/"))
        with pytest.raises(PermissionError):
            sensor.tick()
        monkeypatch.undo()
        assert sensor.queued() == []
