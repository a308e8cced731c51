"""The fine-tuning API driven by the official OpenAI SDK over HTTP on loopback, against a real Dagster
instance, the real upload sensor and the real landing zone."""

import json

import httpx2 as httpx
import openai
import pytest
import yaml
from dagster import DagsterRunStatus
from dagster._core.test_utils import create_run_for_test

from ftpipe.landing import manifest_key
from partitions.run_tags import PARTITION_TAG, PREPARE_JOB
from tests.helpers.origins import finetune_origin

GOOD = "".join(json.dumps({"prompt": f"What is {i} plus {i}?", "completion": str(2 * i)}) + "\n" for i in range(40))
PAIRS = "".join(json.dumps({"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}"}) + "\n"
                for i in range(40))


def _auth(platform, tenant):
    return {"Authorization": f"Bearer {platform.keys[tenant]}", "Content-Type": "application/json"}


def _upload(client, text: str | bytes = GOOD, name="train.jsonl"):
    return client.files.create(file=(name, text.encode() if isinstance(text, str) else text), purpose="fine-tune")


def test_a_job_created_through_the_sdk_is_what_ftpipe_submit_writes_and_the_sensor_queues_it(platform):
    client = platform.client("acme")
    uploaded = _upload(client)
    assert (uploaded.filename, uploaded.bytes, uploaded.purpose) == ("train.jsonl", len(GOOD), "fine-tune")
    assert client.files.retrieve(uploaded.id).id == uploaded.id
    job = client.fine_tuning.jobs.create(
        model="ftpipe/tiny-llama", training_file=uploaded.id, suffix="support", seed=7, metadata={"team": "cx"},
        method={"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 2}}},
        extra_body={"ftpipe": {"adapter": "rslora", "hyperparameters": {"lora_r": 4}, "min_examples": 10}})
    assert job.id.startswith("ftjob-") and job.status == "validating_files"
    assert (job.model, job.training_file, job.suffix, job.seed, job.metadata) == (
        "ftpipe/tiny-llama", uploaded.id, "support", 7, {"team": "cx"})

    manifest = yaml.safe_load(platform.store.read_bytes(manifest_key("acme", job.id)))
    assert manifest == {"base_model": "ftpipe/tiny-llama", "method": "rslora", "objective": "sft",
                        "hyperparameters": {"epochs": 2.0, "seed": 7, "lora_r": 4}, "min_examples": 10,
                        "dataset": "train.jsonl"}
    assert platform.store.read_bytes(f"tenants/acme/jobs/{job.id}/train.jsonl") == GOOD.encode()

    assert platform.status_file("acme", job.id)["status"] == "validating_files"

    result = platform.tick()
    assert [r.partition_key for r in result.run_requests] == [f"acme__{job.id}"]
    run = platform.queue(result)
    assert client.fine_tuning.jobs.retrieve(job.id).status == "queued"
    assert [j.id for j in client.fine_tuning.jobs.list()] == [job.id]
    cursor = platform.write_status_files()
    document = platform.status_file("acme", job.id)
    assert document["status"] == "queued" and document["ftpipe"]["run_id"] == run.run_id
    answer = client.fine_tuning.jobs.retrieve(job.id).model_dump()
    assert {k: answer[k] for k in document if k != "ftpipe"} == {k: v for k, v in document.items() if k != "ftpipe"}

    cancelled = client.fine_tuning.jobs.cancel(job.id)
    assert cancelled.status == "cancelled"
    assert platform.instance.get_run_by_id(run.run_id).status == DagsterRunStatus.CANCELED
    with pytest.raises(openai.BadRequestError, match="only a queued or running job"):
        client.fine_tuning.jobs.cancel(job.id)
    platform.write_status_files(cursor)
    assert platform.status_file("acme", job.id)["status"] == "cancelled"
    messages = [e.message for e in client.fine_tuning.jobs.list_events(job.id)]
    assert messages[0] == "Job cancelled" and messages[-1] == f"Created fine-tuning job: {job.id}"
    assert client.fine_tuning.jobs.checkpoints.list(job.id).data == []


def test_a_job_is_validating_files_while_prepared_and_can_be_cancelled_between_its_stages(platform):
    from dagster import DagsterEvent, DagsterEventType, SkipReason

    from tests.helpers.stages import finetune_request

    client = platform.client("acme")
    job = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=_upload(client).id)
    (request,) = platform.tick().run_requests
    prepare = platform.prepare(request, DagsterRunStatus.STARTED)
    polled = client.fine_tuning.jobs.retrieve(job.id)
    assert polled.status == "validating_files" and polled.model_dump()["ftpipe"]["stage"] == "prepare"
    platform.instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_SUCCESS.value, PREPARE_JOB),
                                           run_id=prepare.run_id)
    # Prepared; the GPU run is not queued yet: not final, and a client polling goes on.
    polled = client.fine_tuning.jobs.retrieve(job.id)
    assert (polled.status, polled.finished_at) == ("queued", None)
    cursor = platform.write_status_files()
    assert platform.status_file("acme", job.id)["status"] == "queued"

    assert client.fine_tuning.jobs.cancel(job.id).status == "cancelled"
    skipped = finetune_request(platform.instance, prepare.run_id)
    assert isinstance(skipped, SkipReason) and "cancelled" in skipped.skip_message
    assert client.fine_tuning.jobs.retrieve(job.id).finished_at is not None
    platform.write_status_files(cursor)
    assert platform.status_file("acme", job.id)["status"] == "cancelled"
    with pytest.raises(openai.BadRequestError, match="only a queued or running job"):
        client.fine_tuning.jobs.cancel(job.id)


def test_a_manifest_the_upload_sensor_refuses_fails_the_job_in_the_api_and_in_status_json(platform):
    client = platform.client("acme")
    job = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=_upload(client).id)
    # What the sensor admits can differ from what the API checked (a quota used up, a model withdrawn, a
    # manifest the tenant replaced in the bucket, as here).
    platform.store.delete(manifest_key("acme", job.id))
    platform.store.write_bytes(manifest_key("acme", job.id), b"base_model: org/gone\ndataset: train.jsonl\n")
    assert platform.tick().run_requests == []
    refused = client.fine_tuning.jobs.retrieve(job.id)
    assert refused.status == "failed" and "org/gone" in refused.error.message
    assert platform.status_file("acme", job.id)["error"]["message"] == refused.error.message
    assert client.fine_tuning.jobs.list_events(job.id).data[0].message.startswith("Job rejected: ")


def test_a_broken_file_is_refused_at_upload_by_file_line_and_field_and_nothing_is_kept(platform):
    client = platform.client("acme")
    broken = GOOD + json.dumps({"prompt": "q", "completion": 5}) + "\n" + "{not json\n"
    with pytest.raises(openai.BadRequestError) as refused:
        _upload(client, broken, name="support.jsonl")
    error = refused.value.body
    assert "support.jsonl line 41, field 'completion'" in error["message"]
    assert "support.jsonl line 42" in error["message"]
    assert error["code"] == "invalid_file" and error["report"]["n_row_errors"] == 2
    assert client.files.list().data == []
    assert platform.store.list("tenants/acme/files/") == []


def test_another_tenants_files_and_jobs_answer_404_and_a_key_is_needed(platform):
    acme, initech = platform.client("acme"), platform.client("initech")
    uploaded = _upload(acme)
    job = acme.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=uploaded.id)
    for call in (lambda: initech.files.retrieve(uploaded.id), lambda: initech.files.delete(uploaded.id),
                 lambda: initech.files.content(uploaded.id), lambda: initech.fine_tuning.jobs.retrieve(job.id),
                 lambda: initech.fine_tuning.jobs.cancel(job.id),
                 lambda: initech.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=uploaded.id)):
        with pytest.raises(openai.NotFoundError):
            call()
    assert initech.fine_tuning.jobs.list().data == [] and initech.files.list().data == []
    for key in ("ftp_000000000000_" + "x" * 43, platform.keys["acme"] + "x", "Bearer", "ftp_" * 10_000):
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{platform.url}/v1", api_key=key, max_retries=0).files.list()
    for headers in ({}, {"Authorization": platform.keys["acme"]}, {"Authorization": "Basic abc"}):
        assert httpx.get(f"{platform.url}/v1/files", headers=headers).status_code == 401
    # The upload is acme's, untouched.
    assert acme.files.content(uploaded.id).content == GOOD.encode()


@pytest.mark.parametrize("platform", ["duckdb", "postgres"], indirect=True)
def test_the_same_idempotency_key_returns_the_same_job_and_another_body_is_refused(platform):
    client = platform.client("acme")
    uploaded = _upload(client)
    headers = {"Idempotency-Key": "create-support-1"}
    first = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=uploaded.id,
                                           extra_headers=headers)
    again = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=uploaded.id,
                                           extra_headers=headers)
    assert again.id == first.id
    assert [o.key.split("/")[3] for o in platform.store.list("tenants/acme/jobs/")] == [first.id] * 2
    with pytest.raises(openai.UnprocessableEntityError, match="different request body"):
        client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=uploaded.id, suffix="other",
                                       extra_headers=headers)
    # Keys are the tenant's own: initech's identical key makes initech's own job.
    other = platform.client("initech")
    theirs = other.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=_upload(other).id,
                                           extra_headers=headers)
    assert theirs.id != first.id


def test_an_identical_job_that_succeeded_is_returned_instead_of_training_again(platform):
    client = platform.client("acme")
    uploaded = _upload(client)
    first = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=uploaded.id, seed=3)
    platform.queue(platform.tick(), status=DagsterRunStatus.SUCCESS)
    assert client.fine_tuning.jobs.retrieve(first.id).status == "succeeded"

    # The same bytes uploaded again under another name and file id: the same content.
    same = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=_upload(client, name="b.jsonl").id,
                                          seed=3)
    assert same.id == first.id and same.status == "succeeded"
    assert len(platform.store.list("tenants/acme/jobs/")) == 2  # no second job folder, so no run
    # Another seed is another training; so is an explicit new run.
    assert client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=uploaded.id, seed=4).id != first.id
    fresh = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=uploaded.id, seed=3,
                                           extra_body={"ftpipe": {"new_run": True}})
    assert fresh.id != first.id and fresh.status == "validating_files"


def test_requests_the_platform_would_refuse_are_refused_at_once(platform):
    client = platform.client("acme")
    sft, pairs = _upload(client), _upload(client, PAIRS, name="pairs.jsonl")
    assert pairs.model_extra["ftpipe"]["objective"] == "dpo"
    cases = {
        "not a base model this platform registered": dict(model="/etc/passwd", training_file=sft.id),
        "no file": dict(model="ftpipe/tiny-llama", training_file="file-nope"),
        "holds preference pairs": dict(model="ftpipe/tiny-llama", training_file=pairs.id,
                                       method={"type": "supervised"}),
        "unknown hyperparameter": dict(model="ftpipe/tiny-llama", training_file=sft.id,
                                       extra_body={"ftpipe": {"hyperparameters": {"rm_rf": 1}}}),
        "already set": dict(model="ftpipe/tiny-llama", training_file=sft.id, seed=1,
                            extra_body={"ftpipe": {"hyperparameters": {"seed": 2}}}),
        "'seed'": dict(model="ftpipe/tiny-llama", training_file=sft.id, seed=-1),
        "'bogus'": dict(model="ftpipe/tiny-llama", training_file=sft.id, extra_body={"bogus": 1}),
        "'metadata'": dict(model="ftpipe/tiny-llama", training_file=sft.id,
                           metadata={str(i): "v" for i in range(17)}),
    }
    for message, kwargs in cases.items():
        with pytest.raises((openai.BadRequestError, openai.NotFoundError), match=message):
            client.fine_tuning.jobs.create(**kwargs)
    # Non-finite numbers never reach a manifest (JSON has none; Python's parser reads them).
    for value in ("NaN", "Infinity", "1e999"):
        response = httpx.post(f"{platform.url}/v1/fine_tuning/jobs", headers=_auth(platform, "acme"), content=(
            f'{{"model": "ftpipe/tiny-llama", "training_file": "{sft.id}", '
            f'"hyperparameters": {{"n_epochs": {value}}}}}'))
        assert response.status_code == 400 and "n_epochs" in response.json()["error"]["message"], value
    dpo = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=pairs.id,
                                         method={"type": "dpo", "dpo": {"hyperparameters": {"beta": 0.2}}})
    manifest = yaml.safe_load(platform.store.read_bytes(manifest_key("acme", dpo.id)))
    assert (manifest["objective"], manifest["hyperparameters"]) == ("dpo", {"dpo_beta": 0.2})
    assert len(platform.store.list("tenants/acme/jobs/")) == 2


def test_hostile_uploads_are_refused_by_name(platform):
    client = platform.client("acme")
    cases = {
        "unsupported file type": ("../../etc/passwd", GOOD),
        "not a data file name": (".hidden.jsonl", GOOD),
        "not a data file name ": ("a" * 129 + ".jsonl", GOOD),
        "upload limit": ("big.jsonl", GOOD * 40),
        "empty": ("empty.jsonl", ""),
        "manifest itself": ("manifest.yaml", GOOD),
    }
    for message, (name, text) in cases.items():
        with pytest.raises((openai.BadRequestError, openai.APIStatusError), match=message.strip()):
            _upload(client, text, name=name)
    with pytest.raises(openai.BadRequestError, match="purpose"):
        client.files.create(file=("t.jsonl", GOOD.encode()), purpose="assistants")
    nan = GOOD + '{"prompt": "q", "completion": "a", "weight": NaN}\n'
    with pytest.raises(openai.BadRequestError, match="line 41"):
        _upload(client, nan)
    with pytest.raises(openai.BadRequestError, match="re-save it as UTF-8"):
        _upload(client, b"\xff\xfe\x00{not text")
    with pytest.raises(openai.BadRequestError, match="line 2"):
        _upload(client, GOOD.encode()[:60] + b'\n{"prompt": "\xff", "completion": "a"}\n')
    assert client.files.list().data == [] and platform.store.list("tenants/") == []
    # A path is reduced to its last component, inside the tenant's own files.
    stored = _upload(client, name="../../../tenants/initech/jobs/x/train.jsonl")
    assert stored.filename == "train.jsonl"
    assert [o.key for o in platform.store.list("tenants/")] == [f"tenants/acme/files/{stored.id}/train.jsonl"]
    # The other tenant's work goes on.
    other = platform.client("initech")
    assert other.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=_upload(other).id).status == \
        "validating_files"


def test_the_openapi_page_lists_every_route(platform):
    paths = httpx.get(f"{platform.url}/openapi.json").json()["paths"]
    assert set(paths) == {
        "/v1/files", "/v1/files/{file_id}", "/v1/files/{file_id}/content", "/v1/fine_tuning/jobs",
        "/v1/fine_tuning/jobs/{job_id}", "/v1/fine_tuning/jobs/{job_id}/cancel", "/v1/fine_tuning/jobs/{job_id}/events",
        "/v1/fine_tuning/jobs/{job_id}/checkpoints", "/v1/fine_tuning/jobs/{job_id}/report", "/v1/models",
        "/v1/adapters", "/v1/adapters/{adapter_id}", "/v1/adapters/{adapter_id}/promote",
        "/v1/adapters/{adapter_id}/deprecate"}
    assert httpx.get(f"{platform.url}/docs").status_code == 200


@pytest.mark.parametrize("platform", ["duckdb", "postgres"], indirect=True)
def test_concurrent_requests_with_one_idempotency_key_make_one_job(platform):
    from concurrent.futures import ThreadPoolExecutor

    client = platform.client("acme")
    uploaded = _upload(client)

    def create(_):
        try:
            return client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=uploaded.id,
                                                  extra_headers={"Idempotency-Key": "burst"}).id
        except openai.ConflictError:
            return "still working"

    with ThreadPoolExecutor(8) as pool:
        answers = set(pool.map(create, range(8)))
    assert len(answers - {"still working"}) == 1
    assert len({o.key.split("/")[3] for o in platform.store.list("tenants/acme/jobs/")}) == 1


def test_api_keys_are_issued_listed_and_revoked_from_the_cli(platform, local_resources, monkeypatch, capsys):
    from ftpipe_cli.main import main

    monkeypatch.setenv("FTPIPE_CATALOG", local_resources["catalog"].location)
    assert main(["api-keys", "create", "--tenant", "acme", "--name", "ci"]) == 0
    token = capsys.readouterr().out.split()[-1]
    key_id = token.split("_")[1]
    assert platform.keys["acme"] != token
    assert openai.OpenAI(base_url=f"{platform.url}/v1", api_key=token, max_retries=0).files.list().data == []
    assert main(["api-keys", "list", "--tenant", "acme"]) == 0
    listing = capsys.readouterr().out
    assert key_id in listing and "active" in listing and token not in listing
    assert main(["api-keys", "revoke", key_id]) == 0
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{platform.url}/v1", api_key=token, max_retries=0).files.list()
    assert main(["api-keys", "create", "--tenant", "../acme"]) == 2


def test_a_tenant_over_its_rate_limit_is_told_when_to_retry(platform):
    from ftpipe_api.rate_limit import RateLimiter

    now = [0.0]
    limiter = RateLimiter(per_second=1, burst=3, clock=lambda: now[0])
    assert [limiter.allow("k") for _ in range(4)] == [0, 0, 0, 1.0]
    assert limiter.allow("other") == 0  # per key
    now[0] += 1
    assert limiter.allow("k") == 0

    # A token every 100 s: the six requests cannot earn one back however slowly a loaded machine serves them.
    platform.api.limiter = RateLimiter(per_second=0.01, burst=5)
    codes = [httpx.get(f"{platform.url}/v1/files", headers=_auth(platform, "initech")) for _ in range(6)]
    assert [c.status_code for c in codes] == [200] * 5 + [429]
    assert int(codes[-1].headers["Retry-After"]) >= 50 and codes[-1].json()["error"]["type"] == "rate_limit_error"
    assert platform.client("acme").files.list().data == []  # another tenant is not slowed


@pytest.mark.parametrize("platform", ["duckdb", "postgres"], indirect=True)
def test_deleting_a_tenant_erases_its_keys_files_and_jobs_and_no_one_elses(platform, local_resources):
    from ft_assets.tenant_deletion import delete_tenant
    from ftpipe.artifacts import ArtifactLayout

    acme, initech = platform.client("acme"), platform.client("initech")
    acme.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=_upload(acme).id)
    kept = initech.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=_upload(initech).id)
    report = delete_tenant("acme", platform.instance, platform.store,
                           ArtifactLayout(local_resources["artifacts"].root), platform.api.adapters,
                           local_resources["artifacts"].root + "/serving")
    assert report.api_keys == 1 and "API keys: 1" in report.to_text()
    with pytest.raises(openai.AuthenticationError):
        acme.files.list()
    assert platform.api.files.list("acme") == [] and platform.api.jobs.page("acme", None, 10) == ([], False)
    assert [j.id for j in initech.fine_tuning.jobs.list()] == [kept.id] and len(initech.files.list().data) == 1


def test_a_tenant_may_overrule_its_own_gates_but_not_the_platforms_and_only_on_its_own_adapters(platform):
    from datetime import datetime, timezone

    from ftpipe.catalog.adapters import AdapterRecord

    def draft(adapter_id, low, high):
        platform.api.adapters.register(AdapterRecord(
            adapter_id=adapter_id, tenant="acme", job="j1", run_id="r1", base_model="ftpipe/tiny-llama",
            base_digest="d", dataset_digest="d", config_hash="c", method="lora", lora_rank=8, path="/nonexistent",
            metrics={"holdout_delta": (low + high) / 2, "holdout_delta_low": low, "holdout_delta_high": high,
                     "golden_exact_match_delta": 0.0, "golden_exact_match_delta_low": 0.0,
                     "golden_exact_match_delta_high": 0.0, "golden_perplexity_ratio": 1.0,
                     "golden_perplexity_ratio_low": 1.0, "golden_perplexity_ratio_high": 1.0},
            status="draft", created_at=datetime.now(timezone.utc)))

    draft("acme--j1--worse", -0.3, -0.1)
    draft("acme--j1--better", 0.1, 0.3)
    acme, initech = platform.client("acme"), platform.client("initech")
    with pytest.raises(openai.ConflictError, match="platform's quality gates.*holdout_delta"):
        acme.post("/adapters/acme--j1--worse/promote", cast_to=object)
    # Past the platform's gates, promotion still checks that the fleet can load the files (there are none).
    with pytest.raises(openai.ConflictError, match="cannot be served"):
        acme.post("/adapters/acme--j1--better/promote", cast_to=object)
    for call in (lambda: initech.post("/adapters/acme--j1--better/deprecate", cast_to=object),
                 lambda: initech.get("/adapters/acme--j1--better", cast_to=object)):
        with pytest.raises(openai.NotFoundError):
            call()
    assert initech.get("/adapters", cast_to=object)["data"] == []
    assert [a["id"] for a in acme.get("/adapters", cast_to=object)["data"]] == ["acme--j1--worse", "acme--j1--better"]
    assert acme.post("/adapters/acme--j1--worse/deprecate", cast_to=object)["status"] == "deprecated"
    # Drafts are not models anyone can call; the base model is.
    assert [m.id for m in acme.models.list()] == ["ftpipe/tiny-llama"]


@pytest.mark.parametrize("platform", ["duckdb", "postgres"], indirect=True)
def test_jobs_are_listed_newest_first_a_page_at_a_time(platform):
    client = platform.client("acme")
    file_id = _upload(client).id
    created = [client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=file_id, seed=s).id
               for s in range(3)]
    first = client.fine_tuning.jobs.list(limit=2)
    assert [j.id for j in first.data] == created[::-1][:2] and first.has_more
    rest = client.fine_tuning.jobs.list(limit=2, after=first.data[-1].id)
    assert [j.id for j in rest.data] == created[:1] and not rest.has_more


def test_a_failure_the_platform_will_resume_reads_queued_and_a_final_one_failed(platform):
    from partitions.run_tags import ATTEMPT_TAG, ERROR_CLASS_TAG, OUTCOME_TAG

    client = platform.client("acme")
    job = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=_upload(client).id)
    result = platform.tick()
    # A lost worker on the first attempt: the failure sensor starts attempt 2 from the checkpoint, so a client
    # polling for a final status must not stop here.
    lost = platform.queue(result, status=DagsterRunStatus.FAILURE)
    polled = client.fine_tuning.jobs.retrieve(job.id)
    assert (polled.status, polled.error, polled.finished_at) == ("queued", None, None)
    platform.write_status_files()
    assert platform.status_file("acme", job.id)["status"] == "queued"

    # The last attempt lost as well: final, with the reason.
    (request,) = result.run_requests
    last = platform.finetune(request, DagsterRunStatus.FAILURE, **{ATTEMPT_TAG: "3"})
    assert last.run_id != lost.run_id
    polled = client.fine_tuning.jobs.retrieve(job.id)
    assert polled.status == "failed" and polled.error.code == "platform_error" and polled.error.message

    # The tenant's own error is final on the first attempt.
    other = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=_upload(client).id, seed=3)
    (request,) = platform.tick(result.cursor).run_requests
    create_run_for_test(platform.instance, job_name=PREPARE_JOB, status=DagsterRunStatus.FAILURE,
                        remote_job_origin=finetune_origin(PREPARE_JOB),
                        tags={**request.tags, PARTITION_TAG: request.partition_key, ERROR_CLASS_TAG: "user",
                              OUTCOME_TAG: "[user] validation found 1 error(s) in the upload"})
    polled = client.fine_tuning.jobs.retrieve(other.id)
    assert polled.status == "failed" and polled.error.code == "user_error"
    assert polled.error.message == "validation found 1 error(s) in the upload"


@pytest.mark.parametrize("platform", ["duckdb", "postgres"], indirect=True)
def test_jobs_uploaded_to_the_bucket_are_listed_and_read_beside_the_apis_own(platform):
    from ftpipe.submission import default_manifest, submit_job

    client = platform.client("acme")
    api_job = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=_upload(client).id)
    submit_job(platform.store, "acme", "support-v1", {"train.jsonl": GOOD.encode()},
               default_manifest("train.jsonl", objective="sft", min_examples=10))
    # Another tenant's folder of the same name is its own job, not acme's and not hidden by acme's.
    submit_job(platform.store, "initech", "support-v1", {"pairs.jsonl": PAIRS.encode()},
               default_manifest("pairs.jsonl", objective="dpo", min_examples=10))
    # A manifest that is not one: a job all the same, refused by the sensor with its reason.
    platform.store.write_bytes("tenants/acme/jobs/garbage/manifest.yaml", b"\x00\xff[{")

    listed = client.fine_tuning.jobs.list()
    assert {j.id for j in listed.data} == {api_job.id, "support-v1", "garbage"}
    bucket = client.fine_tuning.jobs.retrieve("support-v1")
    assert (bucket.status, bucket.model, bucket.training_file, bucket.method.type) == (
        "validating_files", "ftpipe/tiny-llama", "train.jsonl", "supervised")
    assert bucket.model_dump()["ftpipe"]["source"] == "bucket"
    assert client.fine_tuning.jobs.retrieve(api_job.id).model_dump()["ftpipe"]["source"] == "api"

    result = platform.tick()
    for request in result.run_requests:  # as the daemon would: a run per admitted job
        platform.prepare(request)
    assert client.fine_tuning.jobs.retrieve("support-v1").status == "validating_files"
    garbage = client.fine_tuning.jobs.retrieve("garbage")
    assert garbage.status == "failed" and "manifest.yaml" in garbage.error.message
    assert client.fine_tuning.jobs.list_events("support-v1").data[-1].message == "Created fine-tuning job: support-v1"

    other = platform.client("initech")
    theirs = other.fine_tuning.jobs.retrieve("support-v1")
    assert (theirs.training_file, theirs.method.type) == ("pairs.jsonl", "dpo")
    assert [j.id for j in other.fine_tuning.jobs.list()] == ["support-v1"]
    with pytest.raises(openai.NotFoundError):
        other.fine_tuning.jobs.retrieve("garbage")
    for name in ("%2E%2E", "a..b", "UPPER", "x" * 300, "support-v1%2F..%2Fgarbage", "..%2Finitech%2Fsupport-v1"):
        answer = httpx.get(f"{platform.url}/v1/fine_tuning/jobs/{name}", headers=_auth(platform, "acme"))
        assert answer.status_code == 404, (name, answer.text)
