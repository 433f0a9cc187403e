"""logger=wandb (issue 51): an online wandb without a login is refused before anything starts (a dry run says it
in a note); a run's wandb files go to its checkpoint dir, which every attempt shares, and one `wandb sync`
syncs a sweep; a failed training command's `error:` line names the exception that ended it, not the cleanup's
last log line. Real launches with a stand-in training command (`debug.train_command_override`) that calls
the real wandb, as verl's Tracking does, on a model dir and parquet files that preflight finds."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.launches import checkpoint_dir, files_under, launch, small_qwen_inputs
from tests.helpers.refusals import assert_one_line_refusal

REPO = Path(__file__).resolve().parents[2]

# a trainer that leaves a vLLM-style shared-memory queue behind (the launcher removes it and says so in
# train.log, after the trainer's own output) and then calls wandb.init online on a machine with no login,
# as verl's Tracking does: wandb's own UsageError ends it
ONLINE_WITHOUT_LOGIN = """
import os, sys, uuid
from pathlib import Path
Path("/dev/shm/psm_qerl_test_" + uuid.uuid4().hex[:8]).write_bytes(b"x")
os.environ["HOME"] = sys.argv[1]  # no ~/.netrc there
for name in ("WANDB_API_KEY", "NETRC", "WANDB_MODE"):
    os.environ.pop(name, None)
print("trainer: starting wandb", flush=True)
import wandb
wandb.init(project="qe-rl-test", mode="online")
"""


# a trainer that logs one step to wandb as verl's Tracking does: wandb.init with project and name only, the
# mode, run id and dir from the environment the launcher gives it
LOGS_ONE_STEP = """
import wandb
run = wandb.init(project="qe-rl-test", name="one-step")
run.log({"reward": 0.5})
run.finish()
print("trainer: logged to", run.dir, flush=True)
"""


@pytest.fixture
def inputs(tmp_path) -> list[str]:
    """A model dir and one step's parquet rows where preflight looks, no scorer, dirs inside tmp_path."""
    return small_qwen_inputs(tmp_path)


def no_login(home: Path) -> dict:
    """The environment of a machine where nobody ran `wandb login`: no key, no netrc, wandb online."""
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "WANDB_API_KEY": "", "NETRC": "", "WANDB_MODE": "", "CUDA_VISIBLE_DEVICES": "0",
            "SLURM_CPUS_PER_TASK": "16", "PYTHONPATH": str(REPO)}


def test_online_wandb_without_a_login_is_refused_before_anything_starts(tmp_path, inputs):
    """Issue 51 (finding 18a): Ray, the workers and vLLM started, and 77 s later wandb.init raised."""
    # the stand-in trainer: the old code went on to it (and, without one, to verl, Ray and vLLM)
    res = launch(inputs + ["logger=wandb", "debug.train_command_override=/bin/true"], env_extra=no_login(tmp_path / "home"))
    assert res.returncode == 2, (res.stdout + res.stderr)[-3000:]
    assert_one_line_refusal(res.stderr, "error: wandb logs online (logger.offline=false), but this machine has no "
                            f"wandb login (no WANDB_API_KEY, no api.wandb.ai entry in {tmp_path}/home/.netrc)",
                            "run `wandb login`", "logger.offline=true")
    assert files_under(tmp_path / "out") == [] and files_under(tmp_path / "results") == []
    # a dry run plans it and says so in a note
    dry = launch(inputs + ["logger=wandb", "dry_run=true"], env_extra=no_login(tmp_path / "home"))
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
    assert any(line.startswith("note: wandb logs online (logger.offline=false), but this machine has no wandb login")
               and line.endswith("(a real launch is refused)") for line in dry.stdout.splitlines()), dry.stdout[-3000:]
    # offline, or WANDB_MODE=offline, needs no login: the real launch gets as far as its trainer
    for extra, env in ((["logger.offline=true"], {}), ([], {"WANDB_MODE": "offline"})):
        ok = launch(inputs + ["logger=wandb", "debug.train_command_override=/bin/true"] + extra,
                    env_extra={**no_login(tmp_path / "home"), **env})
        assert ok.returncode == 0, (ok.stdout + ok.stderr)[-3000:]


def test_a_failed_training_commands_line_names_its_exception_not_the_cleanups_last_line(tmp_path, inputs):
    """Issue 51 (finding 18b): the line read `(last line: removed 3 files verl/vLLM left behind ...)`. Here the
    login is a netrc entry for api.wandb.ai (accepted by the launcher's check), and the trainer's own wandb
    finds none (its HOME is elsewhere)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    (home / ".netrc").chmod(0o600)
    script = tmp_path / "trainer.py"
    script.write_text(ONLINE_WITHOUT_LOGIN)
    (tmp_path / "empty").mkdir()
    res = launch(inputs + ["logger=wandb", f"debug.train_command_override='{sys.executable} {script} {tmp_path}/empty'"],
                 env_extra=no_login(home))
    assert res.returncode == 1, (res.stdout + res.stderr)[-3000:]
    err = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(err) == 1, res.stderr[-3000:]
    log = next((tmp_path / "out" / "runs").iterdir()) / "train.log"
    assert err[0] == (f"error: training command exited with code 1 (UsageError: No API key configured. Use `wandb "
                      f"login` to log in.); log: {log}"), err
    # the old line showed train.log's last line: here the launcher's cleanup after the trainer ("removed 1 files
    # verl/vLLM left behind"), unless another test's launcher on this machine removed the unheld file first
    lines = log.read_text().splitlines()
    assert "UsageError: No API key configured" in "\n".join(lines) and not lines[-1].startswith("error: ")


def test_offline_wandb_runs_go_to_the_checkpoint_dir_and_one_sync_finds_a_sweeps(tmp_path, inputs):
    """Issue 51 (finding 13): WANDB_DIR was never set, so offline runs landed in the working dir (the
    checkout; a Slurm job's <sweep>/code). A local sweep of two seeds, the first run launched twice (a
    relaunch continues the same wandb run id in the same checkpoint dir)."""
    script = tmp_path / "trainer.py"
    script.write_text(LOGS_ONE_STEP)
    args = inputs + ["logger=wandb", "logger.offline=true", f"debug.train_command_override='{sys.executable} {script}'"]
    sweep = tmp_path / "sweep"
    res = launch(["--multirun", *args, "seed=1,2", f"hydra.sweep.dir={sweep}"], env_extra=no_login(tmp_path / "home"))
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    again = launch([*args, "seed=1"], env_extra=no_login(tmp_path / "home"))
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    run_dirs = sorted(p for p in sweep.iterdir() if (p / "snapshot").is_dir())
    assert len(run_dirs) == 2
    ids = []
    for run_dir in run_dirs:
        plan = json.loads((run_dir / "snapshot" / "plan.json").read_text())
        wandb_dir = checkpoint_dir(run_dir) / "wandb"
        assert plan["wandb_dir"] == str(wandb_dir)
        runs = sorted(wandb_dir.glob("offline-run-*"))
        assert runs and all(r.name.endswith("-" + plan["wandb_run_id"]) and list(r.glob("*.wandb")) for r in runs), runs
        assert (run_dir / "wandb").resolve() == wandb_dir.resolve()
        ids.append((plan["wandb_run_id"], len(runs)))
        assert not list(REPO.glob(f"wandb/*{plan['wandb_run_id']}")), "a wandb run in the working dir"
    assert [n for _, n in ids] == [2, 1], ids  # seed=1: the sweep's launch and the relaunch, one run id
    # the plan table says where
    assert "wandb dir" in res.stdout and "offline-run-* to `wandb sync`" in res.stdout
    # docs/outputs.md's one command for a whole sweep: every run of it, every attempt (a dry run: nothing uploaded)
    sync = subprocess.run([str(Path(sys.executable).parent / "wandb"), "sync", "--dry-run", *map(str, sweep.glob("*/wandb"))],
                          capture_output=True, text=True, timeout=120, env=no_login(tmp_path / "home") | {"PATH": "/usr/bin:/bin"})
    assert sync.returncode == 0, sync.stdout + sync.stderr
    out = sync.stdout + sync.stderr
    assert "Would sync 3 run(s)" in out, out  # seed=1's two attempts, seed=2's one
    for run_id, _ in ids:
        assert run_id in out, out
