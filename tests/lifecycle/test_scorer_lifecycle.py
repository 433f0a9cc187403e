"""The QE scorer's life beside training, through the real launcher (`python -m src.launch`, a
real run, not a dry run) and the real scoring service (.venv-scorer, real unbabel-comet code on the
tiny CometKiwi checkpoint, placement cpu). Only verl's GPU-bound training is replaced, by
tests/slurm/stand_in_train.py through `debug.train_command_override`.

Checked: the service starts before training and stops with it; training gets URL, token and log
through its environment, and the token is nowhere on disk or on a command line; a service killed
during training is restarted on the same URL; killed again, training stops with the message;
Ctrl-C (SIGINT) and SIGTERM to the launcher leave no scorer and no training process behind.
Every wait is bounded.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from src.data.parquet_io import write_parquet_atomic
from src.data.rows import Example, make_row
from tests.helpers.scorer_service import NETGUARD

EXAMPLE = Example(src="这只猫坐在垫子上。", tgt="The cat sat on the mat.", src_lang="zh", tgt_lang="en")

REPO = Path(__file__).resolve().parents[2]
STAND_IN = REPO / "tests" / "slurm" / "stand_in_train.py"
WAIT_S = 90


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _group_members(pgid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(entry.name))
    return pids


def _gone(*pids: int, timeout: float = 30) -> bool:
    """Every pid dead and no live process left in their process groups (the scorer and the training
    command each lead their own group)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) or _group_members(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def _wait_for(what: str, predicate, proc: subprocess.Popen, out: Path, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"the launcher ended (code {proc.returncode}) while waiting for {what}:\n{_text(out)}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout}s:\n{_text(out)}")
        time.sleep(0.1)


def _text(path: Path) -> str:
    return path.read_text(errors="replace")[-5000:] if path.exists() else ""


class Run:
    """One launch of a real run with the stand-in training and the tiny scorer on CPU."""

    def __init__(self, tmp: Path, tiny: Path, *stand_in_args: str, launcher_args: tuple[str, ...] = ()):
        self.tmp, self.out = tmp, tmp / "out"
        self.token_file = tmp / "token.txt"
        (tmp / "models" / "Qwen2.5-3B").mkdir(parents=True)
        data = tmp / "data" / "wmt_zh_en"
        data.mkdir(parents=True)
        for split, n in (("train", 48), ("val", 1)):
            # rows as src.data.prepare writes them (the launcher checks their schema, split tags and
            # template before anything runs, and that the train data fills one step: 48 prompts);
            # the stand-in training reads none of them
            write_parquet_atomic([make_row(EXAMPLE, dataset_name="wmt_zh_en", template="base", split=split,
                                           index=i) for i in range(n)], data / f"{split}.parquet")
        stand_in = " ".join([sys.executable, str(STAND_IN), "--qe-health", "--token-file", str(self.token_file),
                             *stand_in_args])
        self.args = [sys.executable, "-m", "src.launch", "reward=comet", "gpus=2", "scorer.placement=cpu",
                     f"scorer.models.cometkiwi_da.path={tiny}/models/cometkiwi", "scorer.ready_timeout_s=120",
                     f"debug.train_command_override='{stand_in}'", f"paths.output_dir={self.out}/outputs",
                     f"paths.results_root={self.out}/results", f"paths.model_root={tmp}/models",
                     f"paths.data_root={tmp}/data", *launcher_args]
        # two (pretend) GPUs for preflight; the cpu scorer sees none. NETGUARD: no network, in the
        # scorer too (it inherits PYTHONPATH through the runner)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "QE_SCORER_"))}
        # SLURM_CPUS_PER_TASK: preflight takes it as this task's CPU grant, so the CPU check (Ray's
        # 3G+10) passes on a small test machine; without SLURM_JOB_ID this is still no Slurm job
        env.update(CUDA_VISIBLE_DEVICES="0,1", PYTHONPATH=str(NETGUARD), SLURM_CPUS_PER_TASK="16")
        self.log = tmp / "launcher.out"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(self.args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def run_dir(self) -> Path | None:
        runs = list((self.out / "outputs" / "runs").glob("*")) if (self.out / "outputs" / "runs").exists() else []
        return runs[0] if runs else None

    def path(self, name: str) -> Path | None:
        rd = self.run_dir()
        return rd / name if rd is not None else None

    def ready(self) -> dict | None:
        p = self.path("scorer/node-0.ready.json")
        try:
            return json.loads(p.read_text()) if p else None
        except (OSError, ValueError):
            return None

    def wait_holding(self) -> tuple[int, dict]:
        """(stand-in pid, scorer ready file) once training is running."""
        hold = _wait_for("the stand-in training to run", lambda: (p := self.path("stand_in.holding")) and p.exists()
                         and p.read_text() and p, self.proc, self.log)
        # training starts while the scorer loads (src/node/scorer_service.py): its ready file may come after,
        # and the launcher checks its /health after that; killed before that check, the service would fail its
        # start (one line, no restart), not die during training (a fresh CI run on a loaded machine did that)
        ready = _wait_for("the scorer's ready file", self.ready, self.proc, self.log)
        _wait_for("the launcher to see the scorer ready", lambda: "QE scorer (node 0) ready at" in self.output(),
                  self.proc, self.log)
        return int(hold.read_text()), ready

    def wait(self, timeout: float = WAIT_S) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the launcher did not end within {timeout}s:\n{_text(self.log)}")

    def output(self) -> str:
        return _text(self.log)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture
def start_run(tmp_path, tiny_comet_dir):
    runs = []

    def start(*stand_in_args: str, launcher_args: tuple[str, ...] = ()) -> Run:
        run = Run(tmp_path, tiny_comet_dir, *stand_in_args, launcher_args=launcher_args)
        runs.append(run)
        return run
    yield start
    for run in runs:
        run.kill()


def _health(url: str, token: str) -> dict:
    req = urllib.request.Request(f"{url}/health", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_service_lives_exactly_as_long_as_training_and_its_token_stays_in_the_environment(start_run):
    run = start_run()
    assert run.wait() == 0, run.output()
    (seen,) = [json.loads(l) for l in run.path("stand_in.jsonl").read_text().splitlines()]
    qe = seen["qe"]
    # training reached its node's service with the URL and token from its environment
    assert qe["url"].startswith("http://127.0.0.1:") and qe["token_set"] and qe["status"] == "ok"
    assert qe["device"] == "cpu" and qe["models"] == ["cometkiwi_da"]
    assert qe["log"] == str(run.path("scorer/node-0.log"))
    # ... and the service is gone with the run (it removes its ready file on a clean shutdown)
    assert _gone(qe["pid"]), qe
    assert not run.path("scorer/node-0.ready.json").exists()
    log = run.path("scorer/node-0.log").read_text()
    assert "scorer ready url=" in log and "stopped" in log
    out = run.output()
    # the URL is given before the service serves: training starts while it loads (its "ready at" line may come
    # after this short stand-in has ended)
    assert f"QE scorer (node 0) starting at {qe['url']} beside training" in out
    # the token: in no file of the run (config, logs, snapshot, train.log where the stand-in printed it)
    token = run.token_file.read_text()
    assert len(token) >= 32
    assert "stand-in: my scorer token is <redacted>" in run.path("train.log").read_text()
    for path in run.out.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), f"token leaked into {path}"
    assert token not in out


def test_killed_scorer_is_restarted_once_then_training_stops_with_the_message(start_run):
    run = start_run("--hold")
    stand_in_pid, first = run.wait_holding()
    token = run.token_file.read_text()
    # the token is not on the service's command line
    assert token.encode() not in Path(f"/proc/{first['pid']}/cmdline").read_bytes()

    os.kill(first["pid"], signal.SIGKILL)
    second = _wait_for("the restarted scorer", lambda: (r := run.ready()) and r["pid"] != first["pid"] and r,
                       run.proc, run.log)
    # same URL, same token: the reward workers' environment stays valid
    assert second["url"] == first["url"]
    assert _health(second["url"], token)["pid"] == second["pid"]
    assert _alive(stand_in_pid)
    assert "restarting it (1 of 1)" in run.output()
    # the launcher checked /health of the new service too (killing it during that check would be a
    # failed restart, a different message)
    _wait_for("the launcher to see the restarted scorer", lambda: "QE scorer (node-0) restarted on" in run.output(),
              run.proc, run.log)

    os.kill(second["pid"], signal.SIGKILL)
    code = run.wait()
    out = run.output()
    assert code == 1, out
    error = [l for l in out.splitlines() if l.startswith("error: ")]
    assert error and error[-1].startswith("error: QE scorer (node-0) died during training (exit code -9) after 1 "
                                          "restart(s); training stopped;"), out
    assert f"log: {run.path('scorer/node-0.log')}" in error[-1]
    assert "training stopped: QE scorer (node-0) died" in run.path("train.log").read_text()
    assert _gone(stand_in_pid, first["pid"], second["pid"])


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm twice", "sigterm: preempted"])
def test_interrupting_the_launcher_leaves_no_process_behind(start_run, how):
    """Ctrl-C, or a second SIGTERM, stops at once (exit 130). One SIGTERM to a launch outside Slurm is a
    preemption (src/node/training.py PreemptionWatch): the trainer is asked to save its step, and one that does
    not (this stand-in holds) is stopped at trainer.preempt_grace_s, the run ending in one line (exit 1)."""
    run = start_run("--hold", launcher_args=("trainer.preempt_grace_s=3",))
    stand_in_pid, ready = run.wait_holding()
    assert _alive(ready["pid"])
    if how == "ctrl-c":
        os.killpg(run.proc.pid, signal.SIGINT)     # the terminal signals the launcher's process group
    else:
        os.kill(run.proc.pid, signal.SIGTERM)      # a preempting scheduler, or `kill <pid>`
        if how == "sigterm twice":
            time.sleep(1)
            os.kill(run.proc.pid, signal.SIGTERM)
    code = run.wait()
    if how == "sigterm: preempted":
        assert code == 1, run.output()
        assert ("error: preempted: training was stopped at its deadline before the end of a step; the run resumes "
                "from the last checkpoint in ") in run.output(), run.output()
    else:
        assert code == 130, run.output()
        # the reason is named: Ctrl-C as an interrupt (it read "stopped ()" before), SIGTERM by its number
        assert ("stopped (interrupt): " if how == "ctrl-c" else f"stopped (signal {int(signal.SIGTERM)}): ") \
            in run.output(), run.output()
    assert _gone(stand_in_pid, ready["pid"]), (stand_in_pid, ready)
    assert not run.path("scorer/node-0.ready.json").exists()
