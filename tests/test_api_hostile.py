"""What a careless or hostile tenant sends the API: every request ends as a named 4xx, never a 500, and never
touches another tenant's data or what it uploaded."""

import json

import httpx2 as httpx
import openai
import pytest

from tests.test_api import GOOD, _auth, _upload

JOBS = "/v1/fine_tuning/jobs"


def _post_raw(platform, body: str | bytes, content_type="application/json", tenant="acme"):
    return httpx.post(f"{platform.url}{JOBS}", content=body,
                      headers={**_auth(platform, tenant), "Content-Type": content_type})


def _error(response) -> str:
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    return response.json()["error"]["message"]


def test_odd_job_requests_are_refused_by_field_and_never_crash(platform):
    file_id = _upload(platform.client("acme")).id
    base = {"model": "ftpipe/tiny-llama", "training_file": file_id}
    deep = "1"
    for _ in range(900):
        deep = f'{{"a": {deep}}}'
    cases = {
        "'metadata' holds an unpaired UTF-16 surrogate": json.dumps({**base, "metadata": {"a": "\ud83d"}}),
        "'metadata' holds an unpaired UTF-16 surrogate ": json.dumps({**base, "metadata": {"\udc00": "v"}}),
        "a key holds an unpaired UTF-16 surrogate": json.dumps({**base, "\udc00": 1}),
        "'suffix' holds an unpaired": json.dumps({**base, "suffix": "\ud800"}),
        "ftpipe.hyperparameters.lora_r": f'{{"model": "ftpipe/tiny-llama", "training_file": "{file_id}", '
                                         f'"ftpipe": {{"hyperparameters": {{"lora_r": {deep}}}}}}}',
        "metadata": json.dumps({**base, "metadata": {"k": "v" * 513}}),
        "'seed'": json.dumps({**base, "seed": True}),
        "'ftpipe.new_run'": json.dumps({**base, "ftpipe": {"new_run": "yes"}}),
        "'ftpipe.holdout_fraction'": json.dumps({**base, "ftpipe": {"holdout_fraction": "0.1"}}),
        "'validation_file'": json.dumps({**base, "validation_file": ""}),
        "'suffix'": json.dumps({**base, "suffix": "a\nb"}),
        "'hyperparameters.n_epochs": json.dumps({**base, "hyperparameters": {"n_epochs": 1e-320}}),
        "'ftpipe.min_examples'": json.dumps({**base, "ftpipe": {"min_examples": 10**40}}),
        "validation_file is the training file": json.dumps({**base, "validation_file": file_id}),
        "must be a JSON object": json.dumps([base]),
        "not valid JSON": b'{"model": "\xff"}',
        "not valid JSON ": "[" * 100_000,
    }
    for expected, body in cases.items():
        assert expected.strip() in _error(_post_raw(platform, body)), expected
    assert "must be a JSON object" in _error(_post_raw(platform, json.dumps(base), "text/plain"))
    assert "a few hundred bytes" in _error(_post_raw(platform, json.dumps({**base, "suffix": "x" * (2 << 20)})))
    assert len(platform.store.list("tenants/acme/jobs/")) == 0


def test_a_file_removed_or_changed_in_the_bucket_after_validation_is_not_trained_on(platform):
    client = platform.client("acme")
    gone, changed = _upload(client, name="gone.jsonl"), _upload(client, name="changed.jsonl")
    platform.store.delete(f"tenants/acme/files/{gone.id}/gone.jsonl")
    key = f"tenants/acme/files/{changed.id}/changed.jsonl"
    platform.store.delete(key)
    platform.store.write_bytes(key, b"{not json\n" * 50)
    with pytest.raises(openai.ConflictError, match="no longer in the landing zone"):
        client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=gone.id)
    with pytest.raises(openai.ConflictError, match="cannot be read"):
        client.files.content(gone.id)
    with pytest.raises(openai.ConflictError, match="changed in the landing zone after it was validated"):
        client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=changed.id)
    assert client.files.delete(gone.id).deleted
    assert platform.store.list("tenants/acme/jobs/") == []


def test_two_uploads_of_one_name_train_and_validate_under_distinct_names(platform):
    client = platform.client("acme")
    train, valid = _upload(client, name="data.jsonl"), _upload(client, GOOD.replace("plus", "and"), name="data.jsonl")
    job = client.fine_tuning.jobs.create(model="ftpipe/tiny-llama", training_file=train.id, validation_file=valid.id)
    names = sorted(o.key.rsplit("/", 1)[1] for o in platform.store.list(f"tenants/acme/jobs/{job.id}/"))
    assert names == sorted(["data.jsonl", f"{valid.id}.jsonl", "manifest.yaml"])


def test_spoofing_file_names_and_unknown_routes_are_refused_in_openais_shape(platform):
    client = platform.client("acme")
    with pytest.raises(openai.BadRequestError, match="format characters"):
        _upload(client, name="a\u202egnp.jsonl")
    for method, path in (("GET", "/v1/files/a%2Fb"), ("PUT", "/v1/files"), ("DELETE", JOBS + "/ftjob-x"),
                         ("GET", "/v1/nothing"), ("GET", "/v1/files/%ED%A0%80"), ("GET", JOBS + "/%FF%FE/events")):
        response = httpx.request(method, f"{platform.url}{path}", headers=_auth(platform, "acme"))
        assert response.status_code in (404, 405) and response.json()["error"]["code"], (method, path)
    assert client.files.list().data == []
