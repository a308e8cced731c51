import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Tests never reach a model hub; the built-in base model is built once into the repo's cache and shared.
for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[var] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("FTPIPE_MODEL_CACHE", str(REPO_ROOT / ".cache" / "models"))
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(scope="session")
def tiny_model():
    from ftpipe.basemodel.registry import BaseModelRegistry
    from ftpipe.basemodel.tiny import TINY_MODEL_ID

    return BaseModelRegistry(os.environ["FTPIPE_MODEL_CACHE"]).resolve(TINY_MODEL_ID)


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    """The built-in base model's tokenizer, with its chat template."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model.path)


@pytest.fixture
def platform_file(tmp_path) -> Path:
    path = tmp_path / "tenants.yaml"
    path.write_text(
        "default_pool: cpu-local\n"
        "pools:\n  cpu-local: {gpu: cpu, gpu_memory_gb: 8, peak_tflops: 0.081, mfu: 1.0, price_per_gpu_hour: 1.0}\n"
        "tiers:\n  premium: {priority: 10}\n  free: {priority: 0, max_examples: 500}\n"
        "tenants:\n  acme: {tier: premium}\n  initech: {tier: free}\n"
    )
    return path


@pytest.fixture
def local_resources(tmp_path, platform_file) -> dict:
    from tests.helpers.resources import local_resources_at

    return local_resources_at(tmp_path, platform_file)


@pytest.fixture
def postgres_catalog() -> str:
    """A catalog on the local PostgreSQL, in a schema of its own (dropped after the test)."""
    from ftpipe.catalog.postgres_backend import PostgresBackend
    from tests.helpers.postgres import fresh_catalog_url, require_postgres

    require_postgres()
    url = fresh_catalog_url()
    yield url
    PostgresBackend(url).drop()


@pytest.fixture(params=["duckdb", "postgres"])
def catalog_at(request, tmp_path) -> str:
    """Where a catalog test keeps its catalog: each such test runs on both backends."""
    if request.param == "postgres":
        return request.getfixturevalue("postgres_catalog")
    return str(tmp_path / "catalog.duckdb")


@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's server: the real S3 HTTP API on loopback."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(params=["local", "s3"])
def landing(request, tmp_path):
    """The landing zone (a ``LandingZoneResource``) as a local folder and as a bucket on real S3 over HTTP: a test
    taking it runs on both. A test that needs one store only names its own fixture otherwise (``landing_dir``,
    ``landing_store``)."""
    from resources import LandingZoneResource

    if request.param == "local":
        return LandingZoneResource(url=str(tmp_path / "landing"))
    endpoint, bucket = request.getfixturevalue("s3_endpoint"), request.getfixturevalue("s3_bucket")
    return LandingZoneResource(url=f"s3://{bucket}/landing", endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture
def s3_bucket(s3_endpoint, request) -> str:
    import boto3

    name = f"landing-{abs(hash(request.node.nodeid)) % 10**8}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def sft_train_file(tiny_model, tmp_path_factory):
    """96 tokenized support conversations, as the tokenized_dataset asset writes them, and the tokenizer."""
    import json

    import polars as pl
    from transformers import AutoTokenizer

    from ftpipe import synthetic
    from ftpipe.data.tokenize import tokenize_frame

    tokenizer = AutoTokenizer.from_pretrained(tiny_model.path)
    rows = synthetic.acme_support(96, seed=3)
    frame = pl.DataFrame({"source_file": "t.jsonl", "line": list(range(1, 97)),
                          "messages": [json.dumps(c) for c in rows]})
    path = tmp_path_factory.mktemp("sft") / "train.parquet"
    tokenize_frame(tokenizer, frame, 256).write_parquet(path)
    return path, tokenizer


@pytest.fixture
def platform(request, local_resources, tiny_model):
    """The fine-tuning API over HTTP on loopback, on ``local_resources`` and a Dagster instance of its own
    (a ``tests.helpers.api_platform.Platform``); ``indirect=True`` with "postgres" puts its catalog there."""
    from dagster import instance_for_test

    from ftpipe.catalog.api_keys import ApiKeys
    from ftpipe_api.app import create_app
    from ftpipe_api.context import ApiContext
    from resources import CatalogResource
    from tests.helpers.api_platform import Platform
    from tests.helpers.api_server import serving

    if getattr(request, "param", "duckdb") == "postgres":  # tests of the API's own tables run on both backends
        catalog = CatalogResource(location=request.getfixturevalue("postgres_catalog"))
        local_resources = {**local_resources, "catalog": catalog}
    keys = ApiKeys(local_resources["catalog"].location)
    tokens = {tenant: keys.issue(tenant, "test")[1] for tenant in ("acme", "initech")}
    # The production coordinator: a queued run is cancelled by leaving the queue.
    with instance_for_test(overrides={"run_coordinator": {"module": "dagster._core.run_coordinator",
                                                          "class": "QueuedRunCoordinator"}}) as instance:
        api = ApiContext.from_resources(local_resources, lambda: instance, max_file_bytes=64 * 1024)
        with serving(create_app(api)) as url:
            yield Platform(url, api, local_resources, instance, tokens)


@pytest.fixture
def receiver():
    """A tenant's webhook endpoint, a real HTTP server: (url, received, statuses). It answers with the queued
    status codes, then 200, and keeps each delivery with whether its signature verified under ``SECRET``
    (tests.helpers.webhook_receiver)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from ftpipe.notify.webhooks import verify
    from tests.helpers.webhook_receiver import SECRET

    received, statuses = [], []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"headers": dict(self.headers), "body": body,
                             "verified": verify(SECRET, self.headers, body)})
            self.send_response(statuses.pop(0) if statuses else 200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received, statuses
    server.shutdown()
