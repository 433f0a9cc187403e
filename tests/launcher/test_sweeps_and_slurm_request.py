"""Sweeps (sweeps/ as the `sweep` group), the pre-launch check of a Slurm sweep, what a job asks
Slurm for (derived in the plan), the code snapshot, and the Ray bootstrap's ports. No Slurm here:
everything below is decided before anything is submitted; tests/slurm runs it on a real Slurm."""
import json
import subprocess
import sys

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from src.node import ray_cluster
from src.record import code_snapshot
from src.slurm import request as slurm_request
from src.config import CONF_DIR
from src.pipeline import precheck
from src.plan import build_plan
from tests.helpers.config_changes import with_
from tests.helpers.launches import files_under, launch


@pytest.fixture(scope="module")
def base_cfg():
    from src.config import compose_config
    return compose_config([])


# ------------------------------------------------------------------------------ sweeps
def test_sweeps_dir_is_the_sweep_group():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        options = GlobalHydra.instance().config_loader().get_group_options("sweep")
    assert options == ["gpu_scaling", "reward_grid", "seeds"]


@pytest.mark.parametrize("args,jobs", [
    (["+sweep=reward_grid"], 6),
    (["+sweep=gpu_scaling"], 4),
    (["+sweep=seeds"], 3),
    (["+sweep=reward_grid", "algo=dapo"], 3),          # the command line wins over the sweep's params
    (["+sweep=seeds", "reward=comet,word_qe"], 6),     # and adds its own sweeps
    (["reward=comet,xcomet_xl", "gpus=2,'4'"], 4),
])
def test_precheck_expands_sweep_configs_like_hydra(args, jobs):
    # a machine without wandb login: the suite logs offline (tests/conftest.py)
    assert precheck(args, multirun=True, environ={"WANDB_MODE": "offline"}) == jobs


def test_a_bad_combination_inside_a_sweep_file_is_refused_before_submission(isolated_paths):
    # mu=16 divides the per-GPU mini batch for G=2,3,4 but not for G=8: only gpu_scaling's last job breaks
    out, paths = isolated_paths
    result = launch(["--multirun", "+sweep=gpu_scaling", "hydra/launcher=slurm",
                     "+verl.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
                     f"hydra.sweep.dir={out}/sweep"] + paths)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "G=8" in lines[0] and "ppo_micro_batch_size_per_gpu=16" in lines[0], lines
    assert files_under(out) == []


@pytest.mark.parametrize("args,needle", [
    (["+sweep=seeds"], "add --multirun to run it"),
    (["--multirun", "hydra/launcher=slurm", "slurm.signal_delay_s=10"], "slurm.signal_delay_s=10 leaves no time"),
    (["--multirun", "hydra/launcher=slurm", "slurm.timeout_min=1", "slurm.signal_delay_s=60"],
     "is not shorter than the time limit slurm.timeout_min=1"),
    (["--multirun", "hydra/launcher=slurm", "hydra.launcher.signal_delay_s=60"],
     "hydra.launcher.signal_delay_s=60 differs from slurm.signal_delay_s=300; set slurm.signal_delay_s=60 instead"),
    (["hydra/launcher=slurm"], "hydra/launcher=slurm submits only with --multirun"),
    (["--multirun", "+sweep=nope"], "Could not find 'sweep/nope'"),
    (["--multirun", "hydra/launcher=slurm", "hydra.launcher.gpus_per_node=4"],
     "hydra.launcher.gpus_per_node=4 is derived from the plan"),
    (["--multirun", "hydra/launcher=slurm", "hydra.launcher.cpus_per_task=8"], "set slurm.cpus_per_task instead"),
    (["--multirun", "hydra/launcher=slurm", "slurm.cpus_per_task=0"], "slurm.cpus_per_task must be a positive"),
    (["--multirun", "hydra/launcher=slurm", "slurm.array_parallelism=0"],
     "slurm.array_parallelism must be an integer >= 1, got 0"),
    (["--multirun", "hydra/launcher=slurm", "scorer.placement=elsewhere"], "scorer.placement=elsewhere: Invalid value 'elsewhere', expected one of [shared, dedicated, cpu, external]"),
    (["--multirun", "hydra/launcher=slurm", "slurm.setup=['export T=hf_secret_token_abcdef']"],
     "the value of $HF_TOKEN appears in the config"),
])
def test_bad_sweep_or_slurm_input_is_one_line_exit_2_and_writes_nothing(isolated_paths, args, needle):
    out, paths = isolated_paths
    result = launch(args + paths + [f"hydra.sweep.dir={out}/sweep", "dry_run=true"],
                    env_extra={"HF_TOKEN": "hf_secret_token_abcdef"})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr
    assert files_under(out) == []
    assert "hf_secret_token_abcdef" not in result.stderr


# ------------------------------------------------------------------------------ what a job asks for
def test_node_resources_come_from_the_plan(base_cfg):
    shared = build_plan(with_(base_cfg, gpus=4), run_dir="r")
    assert (shared.node_gpus, shared.node_cpus, shared.scorer_gpus_per_node) == (4, 22, 0)
    dedicated = build_plan(with_(base_cfg, gpus=4, scorer__placement="dedicated"), run_dir="r")
    assert (dedicated.node_gpus, dedicated.node_cpus, dedicated.scorer_gpus_per_node) == (5, 22, 1)
    two = build_plan(with_(base_cfg, gpus=4, scorer__placement="dedicated", scorer__dedicated_gpus=2),
                     run_dir="r")
    assert two.node_gpus == 6
    # the user's CPU count wins only when it is larger than what Ray needs
    assert build_plan(with_(base_cfg, gpus=4, slurm__cpus_per_task=48), run_dir="r").node_cpus == 48
    assert build_plan(with_(base_cfg, gpus=4, slurm__cpus_per_task=8), run_dir="r").node_cpus == 22
    # per node, not per world: a 2x8 job asks for 34 CPUs on each node
    assert build_plan(with_(base_cfg, gpus=8, nodes=2), run_dir="r").node_cpus == 34


def test_wandb_run_id_is_stable_per_training_config(tmp_path):
    # the id comes from the run identity (src/record/identity.py), not from the run dir: a requeue or a
    # re-run in another Hydra dir continues the same wandb run; another seed is another run
    from src import verl_config
    from src.config import compose_config
    from src.pipeline import identify

    def wandb_id(overrides, run_dir):
        cfg = compose_config(overrides + [f"paths.results_root={tmp_path}/results"])
        plan = build_plan(cfg, run_dir=str(tmp_path / run_dir))
        return identify(plan, cfg, overrides, verl_config.build(plan, cfg), None)[0].wandb_run_id

    a, b, c = wandb_id(["gpus=4"], "run-1"), wandb_id(["gpus=4"], "run-2"), wandb_id(["gpus=4", "seed=2"], "run-1")
    assert a == b != c
    assert a.startswith("qerl-") and len(a) <= 64


def test_executor_params_one_task_per_node_chdir_and_requeue(base_cfg):
    launcher = {"_target_": "x", "submitit_folder": "/s/%j", "max_num_timeout": 5, "partition": "gpu",
                "timeout_min": 60, "tasks_per_node": 1, "nodes": 1, "gpus_per_node": None, "cpus_per_task": None,
                "additional_parameters": {"requeue": True}, "setup": ["export HF_HUB_OFFLINE=1"],
                "signal_delay_s": 300, "account": None}
    plan = build_plan(with_(base_cfg, gpus=8, nodes=2, scorer__placement="dedicated"), run_dir="r")
    params = slurm_request.executor_params(launcher, plan, False, ["module load cuda"], code_dir="/sweep/code")
    assert params["nodes"] == 2 and params["tasks_per_node"] == 1
    assert params["gpus_per_node"] == 9 and params["cpus_per_task"] == 34
    assert params["slurm_partition"] == "gpu" and "slurm_account" not in params
    assert params["slurm_additional_parameters"] == {"requeue": True, "chdir": "/sweep/code"}
    assert params["slurm_setup"] == ["export HF_HUB_OFFLINE=1", "module load cuda"]
    assert params["slurm_srun_args"] == ["--kill-on-bad-exit=1"]
    assert "submitit_folder" not in params and "slurm_max_num_timeout" not in params
    # slurm.array_parallelism: sbatch --array=0-N%<it>
    throttled = slurm_request.executor_params({**launcher, "array_parallelism": 2}, plan, False, [], code_dir="/c")
    assert throttled["slurm_array_parallelism"] == 2
    # debug.nodes_as_tasks: the K nodes as K tasks on the dev cluster's single host
    sim = slurm_request.resources(plan, nodes_as_tasks=True)
    assert sim == {"nodes": 1, "tasks_per_node": 2, "gpus_per_node": 18, "cpus_per_task": 34}


def test_the_time_limit_signal_comes_from_the_plan(base_cfg):
    # the sbatch --time/--signal pair is the plan's, which checked that the signal leaves room for
    # the step in progress and the requeue (src/plan/time_limit.py)
    launcher = {"_target_": "x", "submitit_folder": "/s/%j", "timeout_min": 60, "signal_delay_s": 120}
    plan = build_plan(with_(base_cfg, slurm__timeout_min=90, slurm__signal_delay_s=600), run_dir="r")
    assert (plan.time_limit.timeout_min, plan.time_limit.signal_delay_s, plan.time_limit.stop_by_s) == (90, 600, 580)
    params = slurm_request.executor_params(launcher, plan, False, [], code_dir="/sweep/code")
    assert (params["timeout_min"], params["slurm_signal_delay_s"]) == (90, 600)


# ------------------------------------------------------------------------------ code snapshot
def test_code_snapshot_scrubs_secrets_from_the_recorded_diff(tmp_path, monkeypatch):
    from src.record import git_state

    token = "hf_pasted_into_a_script_123456"
    monkeypatch.setattr(git_state, "current", lambda: ("sha: abc\n", f"+HF_TOKEN = '{token}'\n"))
    copy = code_snapshot.write(tmp_path / "code", environ={"HF_TOKEN": token})
    diff = (copy / "git.diff").read_text()
    assert token not in diff and "<redacted>" in diff


def test_code_snapshot_runs_as_the_checkout_it_came_from(tmp_path):
    copy = code_snapshot.write(tmp_path / "sweep" / "code")
    assert {"src", "conf", "sweeps", "hydra_plugins"} <= {p.name for p in copy.iterdir()}
    assert not list(copy.rglob("__pycache__"))
    marker = json.loads((copy / "CODE_SNAPSHOT.json").read_text())
    probe = ("from src.config import CODE_ROOT, CONF_DIR, PROJECT_ROOT; "
             "from src.record.git_state import recorded_git_state; "
             "print(CODE_ROOT); print(PROJECT_ROOT); print(CONF_DIR); print(recorded_git_state()[0].splitlines()[0])")
    out = subprocess.run([sys.executable, "-c", probe], cwd=copy, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    code_root, project_root, conf_dir, git_line = out.stdout.splitlines()
    assert code_root == str(copy) and conf_dir == str(copy / "conf")
    assert project_root == marker["checkout"] != str(copy)   # data/results/outputs stay in the checkout
    assert git_line.startswith(f"code snapshot: {copy}")
    assert code_snapshot.unique_dir(tmp_path / "sweep") == tmp_path / "sweep" / "code.1"


# ------------------------------------------------------------------------------ Ray bootstrap ports
def test_ray_ports_and_temp_dirs_are_unique_per_job_and_node():
    seen = {}
    for job_id in range(9529700, 9529706):          # consecutive ids, e.g. the tasks of a job array
        for rank in range(2):
            ports = ray_cluster.node_ports(job_id, rank, port_free=lambda p: True)
            seen[(job_id, rank)] = set(ports.all())
    keys = list(seen)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            assert not seen[a] & seen[b], (a, b)
    assert len({ray_cluster.temp_dir(j, r) for j, r in keys}) == len(keys)
    ports = ray_cluster.node_ports(9529700, 0, port_free=lambda p: True)
    assert ray_cluster.PORT_LOW <= min(ports.all()) and max(ports.all()) < ray_cluster.PORT_HIGH < 32768
    # Ray's socket paths must stay under 108 characters
    session = "/session_2026-11-21_19-03-10_135105_1234567/sockets/plasma_store"
    assert len(ray_cluster.temp_dir(99999999, 7) + session) < 108


def test_ray_ports_move_to_the_next_block_when_one_is_in_use():
    busy = set(ray_cluster.NodePorts.of_block(ray_cluster.first_block(42, 0)).all())
    ports = ray_cluster.node_ports(42, 0, port_free=lambda p: p not in busy)
    assert not set(ports.all()) & busy


def test_ray_start_commands_name_every_port_and_the_temp_dir():
    ports = ray_cluster.node_ports(7, 1, port_free=lambda p: True)
    head = ray_cluster.ray_start_command("ray", ports, "/tmp/qe-rl-ray/7-1", "10.0.0.1", 16, 2, None)
    worker = ray_cluster.ray_start_command("ray", ports, "/tmp/qe-rl-ray/7-1", "10.0.0.2", 16, 2, "10.0.0.1:20000")
    assert "--head" in head and f"--port={ports.gcs}" in head and "--block" in head
    assert "--address=10.0.0.1:20000" in worker and "--head" not in worker
    for cmd in (head, worker):
        assert "--temp-dir=/tmp/qe-rl-ray/7-1" in cmd and "--num-gpus=2" in cmd
        for flag in ("--node-manager-port", "--object-manager-port", "--metrics-export-port",
                     "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port", "--runtime-env-agent-port",
                     "--min-worker-port", "--max-worker-port"):
            assert any(arg.startswith(flag + "=") for arg in cmd), flag


def test_multi_node_run_outside_a_slurm_job_is_refused(isolated_paths):
    out, paths = isolated_paths
    result = launch(["nodes=2", "gpus=2"] + paths)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: nodes=2 needs a Slurm job with one task on each of 2 nodes"), lines
    assert files_under(out) == []


def test_slurm_multinode_launcher_adds_whole_nodes():
    from src.config import compose as _compose
    from omegaconf import OmegaConf

    cfg = _compose(["hydra/launcher=slurm_multinode", "nodes=2"], with_hydra=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"].endswith("QeRlSlurmLauncher")
    assert launcher["additional_parameters"] == {"requeue": True, "exclusive": True}
    assert launcher["setup"][:3] == [f"export HF_HOME='{cfg.paths.hf_home}'",
                                     f"export HF_HUB_CACHE='{cfg.paths.hf_hub_cache}'", "export HF_HUB_OFFLINE=1"]


def test_submitit_errors_are_reduced_to_the_line_that_says_what_happened():
    from submitit.core.utils import FailedJobError, UncompletedJobError

    from src.slurm.sweep import submitit_error

    class FakeJob:
        def get_info(self, mode):
            return {"State": "OUT_OF_MEMORY"}

    failed = FailedJobError(
        "Job (task=0) failed during processing with trace:\n----------------------\nTraceback (most recent call "
        "last):\n  File \"x.py\", line 1, in <module>\nValueError: boom\n\n----------------------\n"
        "You can check full logs with 'job.stderr(0)' and 'job.stdout(0)'or at paths:\n  - /a.err\n  - /a.out")
    assert submitit_error(failed, FakeJob()) == "ValueError: boom"
    died = UncompletedJobError(
        "Job 12_0 (task: 0) with path /s/12_0_0_result.pkl\nhas not produced any output (state: OUT_OF_MEMORY)\n"
        "Error stream produced:\n----------------------------------------\nsomething\nKilled")
    line = submitit_error(died, FakeJob())
    assert line.startswith("UncompletedJobError: Job 12_0 (task: 0)") and "has not produced any output" in line
    assert "(Slurm state: OUT_OF_MEMORY)" in line and line.endswith("last error line: Killed")


def test_local_example_composes_and_sets_the_slurm_request(tmp_path):
    # conf/local/default.yaml.example, used as the git-ignored conf/local/default.yaml of a checkout
    import shutil

    from src.config import CODE_ROOT

    checkout = tmp_path / "checkout"
    for name in ("src", "conf", "hydra_plugins", "sweeps"):
        shutil.copytree(CODE_ROOT / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__", "local"))
    (checkout / "conf" / "local").mkdir()
    shutil.copy(CODE_ROOT / "conf" / "local" / "default.yaml.example", checkout / "conf" / "local" / "default.yaml")
    probe = ("from omegaconf import OmegaConf; from src.config import compose as _compose; from src.pipeline import precheck; "
             "c = _compose(['hydra/launcher=slurm'], with_hydra=True); "
             "print(OmegaConf.to_container(c.hydra.launcher, resolve=True)['partition'], c.slurm.mem_gb); "
             # the example's /data is not on this machine: its files are the nodes' to check (issue 51, finding 4)
             "print(precheck(['hydra/launcher=slurm', \"gpus=2,'4'\", 'slurm.node_local_dirs=[/data]'], True, {}, "
             "ask_slurm=False, quiet=True))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=checkout, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["gpu", "256", "2"]


def test_a_failed_node_never_leaves_the_other_nodes_waiting(tmp_path):
    import os
    import time

    task0 = ray_cluster.SlurmTask(job_id=77, restart=0, rank=0, ntasks=2, cpus=16)
    task1 = ray_cluster.SlurmTask(job_id=77, restart=0, rank=1, ntasks=2, cpus=16)
    # node 0 failed before its Ray head started: node 1 returns at once instead of waiting 10 minutes
    ray_cluster.release_workers(tmp_path, task0)
    t0 = time.monotonic()
    assert ray_cluster.run_worker(task1, 16, 2, tmp_path, dict(os.environ)) == 0
    assert time.monotonic() - t0 < 5
    # node 1 failed (e.g. its preflight): node 0 stops waiting for it to join, naming its error
    ray_cluster.worker_failed(tmp_path / "other", task1, "node 1: model not found at /x")
    folder = ray_cluster.rendezvous_dir(tmp_path / "other", task0)
    t0 = time.monotonic()
    with pytest.raises(ray_cluster.RayBootstrapError, match="^node 1: model not found at /x$"):
        ray_cluster.wait_for_nodes("127.0.0.1:1", 2, 300, dict(os.environ),
                                   abort=lambda: ray_cluster._failed_workers(folder))
    assert time.monotonic() - t0 < 10
