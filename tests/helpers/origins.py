"""Queued runs need a code origin; queue tests never load it (their launchers start nothing)."""

from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin


def finetune_origin(job_name: str = "finetune") -> RemoteJobOrigin:
    return RemoteJobOrigin(RemoteRepositoryOrigin(InProcessCodeLocationOrigin(
        LoadableTargetOrigin(module_name="ft_assets.definitions"), location_name="ftpipe"), "__repository__"),
        job_name)


def finetune_code_origin(job_name: str = "finetune"):
    """The Python origin a submitted run must carry as well (``DagsterInstance.submit_run`` checks it)."""
    import sys

    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin

    return JobPythonOrigin(job_name, RepositoryPythonOrigin(
        sys.executable, ModuleCodePointer("ft_assets.definitions", "defs", working_directory=None)))
