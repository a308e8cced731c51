"""Fine-tuning jobs as the API lists them: what was asked, as the tenant asked it.

The job itself is the landing zone's job folder and its Dagster runs; this row keeps what the OpenAI job
object shows that neither holds (the file ids, ``suffix``, ``metadata``), and the content key under which an
identical request finds the job that already trained it. A job uploaded straight to the bucket gets a row the
first time the API sees its folder (``ftpipe_api.bucket_jobs``), with the manifest's file names for file ids
and no content key; its id is its folder's name, unique only within the tenant.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, fields
from datetime import datetime

from ftpipe.catalog.db import CatalogTable


@dataclass(frozen=True)
class JobRequest:
    job_id: str
    tenant: str
    created_at: datetime
    model: str
    training_file: str
    validation_file: str | None
    request: dict
    """The create request's body as accepted (suffix, metadata, seed, method, the platform's extras)."""
    content_key: str
    """Digest of the training data, the resolved manifest and the base model's weights."""


_COLUMNS = tuple(f.name for f in fields(JobRequest))


class JobRequests(CatalogTable):
    @staticmethod
    def new_job_id() -> str:
        # A valid job name (a-z, 0-9, '-'), so the id is also the job's folder and partition.
        return f"ftjob-{uuid.uuid4().hex[:24]}"

    def add(self, job: JobRequest) -> None:
        """The API's own job; it replaces the row of a bucket job the API may have seen in its folder first."""
        self._insert(job, "ON CONFLICT (tenant, job_id) DO UPDATE SET "
                     + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c not in ("tenant", "job_id")))

    def add_if_absent(self, job: JobRequest) -> None:
        """A job seen in the bucket: never replaces what is known of it (two readers may see it at once)."""
        self._insert(job, "ON CONFLICT DO NOTHING")

    def ids(self, tenant: str) -> set[str]:
        if not self._exists():
            return set()
        with self._connect() as con:
            return {row[0] for row in con.execute("SELECT job_id FROM job_requests WHERE tenant = ?",
                                                  [tenant]).fetchall()}

    def _insert(self, job: JobRequest, on_conflict: str) -> None:
        with self._connect() as con:
            con.execute(f"INSERT INTO job_requests ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
                        + on_conflict,
                        [job.job_id, job.tenant, job.created_at, job.model, job.training_file, job.validation_file,
                         json.dumps(job.request), job.content_key])

    def get(self, tenant: str, job_id: str) -> JobRequest | None:
        found = self._select("WHERE tenant = ? AND job_id = ?", [tenant, job_id])
        return found[0] if found else None

    def page(self, tenant: str, after: str | None, limit: int) -> tuple[list[JobRequest], bool]:
        """Newest first, as OpenAI lists jobs: up to ``limit`` created before the job ``after``, and whether
        more follow."""
        where = "WHERE tenant = ?"
        params: list[object] = [tenant]
        if after:
            anchor = self.get(tenant, after)
            if anchor is not None:
                where += " AND (created_at, job_id) < (?, ?)"
                params += [anchor.created_at, anchor.job_id]
        rows = self._select(where, params, order="ORDER BY created_at DESC, job_id DESC", limit=limit + 1)
        return rows[:limit], len(rows) > limit

    def with_content_key(self, tenant: str, content_key: str) -> list[JobRequest]:
        return self._select("WHERE tenant = ? AND content_key = ?", [tenant, content_key])

    def delete_tenant(self, tenant: str) -> None:
        if self._exists():
            with self._connect() as con:
                con.execute("DELETE FROM job_requests WHERE tenant = ?", [tenant])

    def _select(self, where: str, params: list, order: str = "ORDER BY created_at",
                limit: int | None = None) -> list[JobRequest]:
        if not self._exists():
            return []
        with self._connect() as con:
            rows = con.execute(f"SELECT {', '.join(_COLUMNS)} FROM job_requests {where} {order}"
                               + (f" LIMIT {int(limit)}" if limit else ""), params).fetchall()
        return [JobRequest(row[0], row[1], row[2], row[3], row[4], row[5], json.loads(row[6]), row[7]) for row in rows]
