"""The suite's two tiers. `make test` runs every test (CI runs it). `make test-fast` (`pytest --tier fast`) leaves
out the tests that start a training launch (verl's real loop or the stand-in trainer), a Slurm job or a Ray
cluster, and the few that start none but take minutes (the exhaustive sweeps of presets through verl's checks,
the tiny-model builds, installs from PyPI): for the inner loop of development, about 5 minutes on 2 cores where
the whole suite takes half an hour. docs/testing.md "Tiers" says what each covers.

HEAVY names what the fast tier leaves out: a directory (`tests/loop/`), a module (`tests/launcher/test_smoke.py`)
or one test (`module::test_name`, every parametrisation of it). tests/test_test_tooling.py checks that each
entry still names something.
"""
from __future__ import annotations

from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]

HEAVY = (
    # the real training loop on CPU, the Slurm dev cluster's jobs, Ray clusters with verl's actors
    "tests/loop/",
    "tests/slurm/",
    "tests/ray_actors/",
    # launches with the stand-in trainer and the QE service, killed and restarted
    "tests/lifecycle/",
    # the launcher's runs with the stand-in trainer (the smoke's stages, wandb's runs, the time-limit save, a
    # sweep's resume, a run named before)
    "tests/launcher/test_smoke.py",
    "tests/launcher/test_wandb.py",
    "tests/launcher/test_time_limit_watch.py",
    "tests/launcher/test_resume_sweep.py",
    "tests/launcher/test_run_identity.py::test_a_run_named_before_issue_51_resumes_in_its_dir",
    # what Slurm itself says to a request the docs show it refusing (sbatch --test-only on the dev cluster)
    "tests/test_docs.py::test_readme_slurm_transcript_is_what_slurm_says",
    # start none of those but take minutes: every group option on every preset and every algo preset at every
    # GPU and node count through verl's checks, the tiny models built from scratch, and installs from PyPI
    "tests/launcher/test_presets.py",
    "tests/launcher/test_algo_presets.py",
    "tests/launcher/test_group_combinations.py",
    "tests/launcher/test_smoke_tiny.py",
    "tests/env/",
    # vLLM's CPU engine started in the CPU loop env for an evaluation's generation (about a minute each)
    "tests/evaluate/test_cpu_generation.py",
    "tests/evaluate/test_runs.py::test_a_run_is_evaluated_at_every_step_into_one_table_and_plots",
)


def is_heavy(nodeid: str) -> bool:
    path, _, name = nodeid.partition("::")
    test = name.split("[", 1)[0]
    for entry in HEAVY:
        where, _, which = entry.partition("::")
        if (path.startswith(where) if where.endswith("/") else path == where) and (not which or which == test):
            return True
    return False


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--tier", choices=("full", "fast"), default="full",
                     help="fast: leave out the tests that start training, Slurm jobs or Ray (tests/tiers.py)")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The fast tier does not even import a whole directory or module of HEAVY (verl's trainer, the loop's
    helpers: seconds of imports in every xdist worker); single tests of HEAVY are deselected below."""
    if config.getoption("tier") != "fast":
        return None
    try:
        rel = collection_path.resolve().relative_to(_ROOT).as_posix()
    except ValueError:
        return None
    # a directory as HEAVY writes one; a module's path is a node id without a test, which only whole-module entries match
    return True if is_heavy(rel + "/" if collection_path.is_dir() else rel) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("tier") != "fast":
        return
    kept, left_out = [], []
    for item in items:
        (left_out if is_heavy(item.nodeid) else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
