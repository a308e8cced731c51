"""The local PostgreSQL (127.0.0.1:5432, trust auth) for tests of the production configuration."""

import os
import uuid

import pytest

ADMIN_URL = os.environ.get("FTPIPE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def require_postgres() -> None:
    """Skip (named in pytest's -ra summary) where no server answers."""
    psycopg = pytest.importorskip("psycopg")
    try:
        psycopg.connect(ADMIN_URL, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {ADMIN_URL}: {exc}")


def fresh_catalog_url() -> str:
    """A catalog URL in a schema of its own, so that tests running side by side never meet."""
    return f"{ADMIN_URL}?schema=ftpipe_test_{uuid.uuid4().hex[:12]}"
