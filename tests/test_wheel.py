"""The project as a wheel: built from the repository, installed into a fresh virtual environment, and run from a
folder that is not the checkout, so that nothing can come from the source tree."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from ftpipe import synthetic
from ftpipe.evaluation.golden import load_golden_set

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv holding only the wheel; the dependencies are this environment's, read through a path file
    (whose entries are only added to sys.path, so this environment's editable install of the project is not)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"  # a copy: setuptools writes build/ and egg-info beside the sources it builds
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    for package in ("ftpipe", "ftpipe_api", "ftpipe_cli", "ft_assets", "partitions", "resources", "sensors"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(root / "dist"), str(source)], check=True, cwd=root, timeout=300)
    (wheel,) = (root / "dist").glob("ftpipe-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(site),
                    str(wheel)], check=True, timeout=300)
    return venv


def _run(venv: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FTPIPE_HOME", "FTPIPE_TENANTS")}
    env.update(HOME=str(cwd), FTPIPE_TENANTS=str(REPO / "tenants.yaml"))
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_installed_wheel_validates_a_dataset_outside_the_checkout(installed, tiny_model, tmp_path):
    where = _run(installed, [str(installed / "bin" / "python"), "-c",
                             "import ftpipe, resources.settings as s; "
                             "print(ftpipe.__file__, s.CHECKOUT, s.ftpipe_home())"],
                 tmp_path)
    module, checkout, home = where.stdout.split()
    assert str(installed) in module and checkout == "None" and home == str(tmp_path / ".ftpipe")

    (tmp_path / "train.jsonl").write_text(synthetic.to_jsonl(synthetic.acme_support(120, seed=3)))
    ftpipe = str(installed / "bin" / "python"), "-c", "from ftpipe_cli.main import main; raise SystemExit(main())"
    done = _run(installed, [*ftpipe, "validate", "train.jsonl", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["passed"] is True


def test_the_wheel_carries_its_license_and_the_golden_set(installed):
    site = Path(subprocess.run([str(installed / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (info,) = site.glob("ftpipe-*.dist-info")
    metadata = (info / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Classifier: Programming Language :: Python :: 3.11" in metadata
    assert (info / "licenses" / "LICENSE").read_text() == (REPO / "LICENSE").read_text()
    assert (site / "ftpipe" / "evaluation" / "golden" / "general-v1.jsonl").is_file()


def test_the_installed_wheel_scores_the_golden_set(installed, tiny_model, tmp_path):
    # The golden set is package data: the evaluation reads it from the installed package, not the checkout.
    code = ("import json; from ftpipe.evaluation.reeval import golden_scores; "
            f"run = golden_scores({tiny_model.path!r}, {{}}, {str(tmp_path / 'work')!r}, batch_size=8); "
            "print(json.dumps({'digest': run.digest, 'n': len(run.n_tokens), 'right': sum(run.base.score)}))")
    done = _run(installed, [str(installed / "bin" / "python"), "-c", code], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    scored = json.loads(done.stdout.strip().splitlines()[-1])
    docs, digest = load_golden_set()
    assert scored["digest"] == digest and scored["n"] == len(docs)
    assert scored["right"] > len(docs) // 5  # the pre-trained skills are measurable (43 of 44 on this build)
