"""vLLM's rollout sampler (src/plan/sampler.py): without flashinfer in the train env the plan sets
VLLM_USE_FLASHINFER_SAMPLER=0 in every training process's env (vllm 0.24.0 would import flashinfer in
each rollout worker otherwise), shows it in the plan table, keeps a user's accelerator.env value and
refuses 1 without flashinfer before a real launch. The probe runs against this real train env (the
CPU lock has no flashinfer); run_env is the real code that builds the training env."""
from __future__ import annotations

import pytest
from rich.console import Console

from src.config import compose_config
from src.node.environment import run_env
from src.plan import PlanError, build_plan
from src.plan.sampler import ENV, installed_flashinfer, plan_sampler
from src.plan.table import render


@pytest.fixture(scope="module")
def smoke_cfg(tmp_path_factory):
    out = tmp_path_factory.mktemp("sampler")
    return compose_config(["experiment=smoke", f"paths.output_dir={out}"])


def test_without_flashinfer_the_training_env_keeps_vllm_off_its_sampler(smoke_cfg, tmp_path):
    assert installed_flashinfer() is False  # the CPU locks install no flashinfer
    plan = build_plan(smoke_cfg, run_dir=str(tmp_path / "run"))  # probes
    assert plan.sampler.sampler == "pytorch" and plan.accelerator_env[ENV] == "0"
    env, _ = run_env(plan, {"PATH": "/usr/bin"})
    assert env[ENV] == "0"
    console = Console(record=True, width=300)
    render(plan, ["verl"], "v.yaml", console=console)
    text = console.export_text()
    assert "rollout sampler (vLLM)" in text and f"{ENV}=0" in text


def test_with_flashinfer_nothing_is_set(smoke_cfg, tmp_path):
    plan = build_plan(smoke_cfg, run_dir=str(tmp_path / "run"), flashinfer=True)
    assert plan.sampler.sampler == "flashinfer" and ENV not in plan.accelerator_env
    assert ENV not in run_env(plan, {"PATH": "/usr/bin"})[0]


@pytest.mark.parametrize("value, sampler", [("0", "pytorch"), ("1", "flashinfer")])
def test_a_users_value_is_kept(value, sampler):
    s = plan_sampler("cuda", {ENV: value}, flashinfer=True, dry_run=False)
    assert s.sampler == sampler and s.env == {} and "pinned by accelerator.env" in s.reason


def test_asking_for_flashinfer_without_it_is_refused_before_a_real_launch():
    with pytest.raises(PlanError) as err:
        plan_sampler("cuda", {ENV: "1"}, flashinfer=False, dry_run=False)
    assert "\n" not in str(err.value) and "drop the key" in str(err.value)
    assert plan_sampler("cuda", {ENV: "1"}, flashinfer=False, dry_run=True).sampler == "flashinfer"


def test_another_accelerator_gets_nothing():
    s = plan_sampler("npu", {}, flashinfer=False, dry_run=False)
    assert s.env == {} and "CUDA only" in s.reason
