"""The weight sync's socket is the launch's own (src/verl_fixes/weight_sync_socket.py): verl 0.9.1 names it after
the Ray job id, which is 01000000 in every run that starts its own Ray cluster, so two runs on one host shared it and
a weight sync hung (CI, 2026-12-05). The ends in the pinned verl: tests/loop/test_verl_fixes.py; in real steps beside
another run's socket: tests/loop/test_smoke_on_cpu.py."""
from __future__ import annotations

import pytest

from src.config import compose_config
from src.node import environment
from src.plan import build_plan
from src.trainer import run_vars
from src.verl_fixes import REGISTER_MODULE
from src.verl_fixes.weight_sync_socket import TAG_ENV, WeightSyncSocketChanged, tagged

VERL_PATH = "ipc:///tmp/rl-colocate-zmq-01000000-replica-0-rank-1.sock"


def test_the_tag_goes_before_the_job_id_once_and_nothing_changes_without_one():
    ours = tagged(VERL_PATH, {TAG_ENV: "0a1b2c3d4e5f"})
    assert ours == "ipc:///tmp/rl-colocate-zmq-0a1b2c3d4e5f-01000000-replica-0-rank-1.sock"
    assert tagged(ours, {TAG_ENV: "0a1b2c3d4e5f"}) == ours
    assert tagged(VERL_PATH, {}) == VERL_PATH and tagged(VERL_PATH, {TAG_ENV: ""}) == VERL_PATH
    # a unix socket's path holds 107 bytes
    assert len(ours) - len("ipc://") < 107


def test_a_verl_that_names_its_socket_otherwise_stops_in_one_line():
    with pytest.raises(WeightSyncSocketChanged) as err:
        tagged("ipc:///run/verl-weights-0.sock", {TAG_ENV: "0a1b2c3d4e5f"})
    assert "src/verl_fixes/weight_sync_socket.py" in str(err.value) and "\n" not in str(err.value)


@pytest.fixture
def plan(tmp_path):
    composed = compose_config(["experiment=learn_tiny", "accelerator=cpu", f"paths.output_dir={tmp_path}"])
    return build_plan(composed, run_dir=str(tmp_path / "run"), flash_attn=None)


def test_every_launch_gets_its_own_tag_and_verl_imports_the_fixes_first(plan):
    first, _ = environment.run_env(plan, {"PATH": "/usr/bin"})
    second, _ = environment.run_env(plan, {"PATH": "/usr/bin"})
    assert first[TAG_ENV] != second[TAG_ENV] and len(first[TAG_ENV]) == 12
    # the accelerator's module (the CPU platform) stays, after the fixes; a user's own too, each once
    assert first["VERL_USE_EXTERNAL_MODULES"] == f"{REGISTER_MODULE},src.cpu_platform.register"
    plan.accelerator_env["VERL_USE_EXTERNAL_MODULES"] = f"my.module,{REGISTER_MODULE}"
    env, _ = environment.run_env(plan, {})
    assert env["VERL_USE_EXTERNAL_MODULES"] == f"{REGISTER_MODULE},my.module"
    # every node's actors get node 0's tag (a multi-node run hands them the run's variables)
    assert TAG_ENV in run_vars.RUN_VARS
