"""What OpenAI's API lacks and tenants need: their adapters, their models, and the lifecycle of their own
adapters.

A tenant may deprecate its adapters (the fleet stops loading them; they are deleted after the grace period)
and promote a draft that its own manifest's gates held back. The platform's gates are not the tenant's to
overrule: promotion re-checks them on the intervals the registry recorded, and re-checks that the fleet can
load the adapter, as an operator's ``ftpipe promote`` does.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, Request

from ftpipe.catalog.adapters import AdapterRecord, RegistryError
from ftpipe.catalog.lifecycle import change_status
from ftpipe.evaluation.gates import GateError, evaluate_gates, parse_gates, with_derived_metrics
from ftpipe.evaluation.intervals import Estimate
from ftpipe_api.auth import tenant_of
from ftpipe_api.errors import ApiError, not_found

router = APIRouter(tags=["adapters"])


def adapter_object(a: AdapterRecord) -> dict:
    return {"id": a.adapter_id, "object": "ftpipe.adapter", "status": a.status, "fine_tuning_job_id": a.job,
            "base_model": a.base_model, "method": a.method, "lora_rank": a.lora_rank,
            "created_at": int(a.created_at.timestamp()), "metrics": a.metrics}


def _own_adapter(api, tenant: str, adapter_id: str) -> AdapterRecord:
    found = next((a for a in api.adapters.list(tenant) if a.adapter_id == adapter_id), None)
    if found is None:
        raise not_found("adapter", adapter_id)
    return found


def platform_gate_problems(record: AdapterRecord, platform_gates: dict[str, str]) -> list[str]:
    """The platform's gates that the recorded intervals do not pass (or cannot show passed)."""
    m = record.metrics
    estimates = {name: Estimate(m[name], m[f"{name}_low"], m[f"{name}_high"])
                 for name in m if f"{name}_low" in m and f"{name}_high" in m}
    try:
        results = evaluate_gates(parse_gates(platform_gates, "platform"), with_derived_metrics(estimates))
    except GateError as exc:
        return [str(exc)]
    return [f"{r.gate}: {r.verdict} ({r.estimate.value:.3g} [{r.estimate.low:.3g}, {r.estimate.high:.3g}])"
            for r in results if not r.passed]


@router.get("/v1/models")
def list_models(request: Request, tenant: str = Depends(tenant_of)) -> dict:
    """The registered base models and the tenant's served (promoted) adapters, as OpenAI lists models."""
    api = request.app.state.api
    base = [{"id": model_id, "object": "model", "created": 0, "owned_by": "ftpipe"}
            for model_id in sorted(api.base_models.models)]
    served = [{"id": a.adapter_id, "object": "model", "created": int(a.created_at.timestamp()), "owned_by": tenant}
              for a in api.adapters.list(tenant) if a.status == "promoted"]
    return {"object": "list", "data": base + served}


@router.get("/v1/adapters")
def list_adapters(request: Request, tenant: str = Depends(tenant_of)) -> dict:
    return {"object": "list", "data": [adapter_object(a) for a in request.app.state.api.adapters.list(tenant)],
            "has_more": False}


@router.get("/v1/adapters/{adapter_id}")
def get_adapter(adapter_id: str, request: Request, tenant: str = Depends(tenant_of)) -> dict:
    return adapter_object(_own_adapter(request.app.state.api, tenant, adapter_id))


def _change(api, record: AdapterRecord, status: str) -> dict:
    try:
        changed = change_status(api.adapters, record.adapter_id, status, api.base_models, api.platform.serving,
                                Path(api.artifacts_root) / "serving")
    except RegistryError as exc:
        raise ApiError(409, str(exc), code="adapter_status_conflict") from None
    return adapter_object(changed)


@router.post("/v1/adapters/{adapter_id}/promote")
def promote_adapter(adapter_id: str, request: Request, tenant: str = Depends(tenant_of)) -> dict:
    api = request.app.state.api
    record = _own_adapter(api, tenant, adapter_id)
    if record.status == "draft":
        problems = platform_gate_problems(record, api.platform.evaluation.quality_gates)
        if problems:
            raise ApiError(409, f"adapter {adapter_id} does not pass the platform's quality gates, which only an "
                                f"operator may overrule: {'; '.join(problems)}", code="platform_gates_failed")
    return _change(api, record, "promoted")


@router.post("/v1/adapters/{adapter_id}/deprecate")
def deprecate_adapter(adapter_id: str, request: Request, tenant: str = Depends(tenant_of)) -> dict:
    api = request.app.state.api
    return _change(api, _own_adapter(api, tenant, adapter_id), "deprecated")
