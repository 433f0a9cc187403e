"""A sweep launched on the real Slurm dev cluster (tests/slurm/): its dirs and command, what Slurm and the
launcher say about it, and the queries of Slurm's own records (sacct, scontrol) the tests read.
The `sweep` fixture (tests/slurm/conftest.py) gives each test one and cleans it up."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STAND_IN = REPO / "tests" / "slurm" / "stand_in_train.py"
SWEEP_TIMEOUT_S = 300
SECRETS = {"WANDB_API_KEY": "wandb-secret-0123456789", "HF_TOKEN": "hf_secret_token_abcdef",
           "QE_SCORER_TOKEN": "scorer-secret-xyz987", "AWS_SECRET_ACCESS_KEY": "aws-secret-key-42424242"}


def stand_in(*args: str) -> str:
    return " ".join([sys.executable, str(STAND_IN), *args])


class Sweep:
    """One sweep of a test: its dirs, the command, and what Slurm and the launcher say about it."""

    def __init__(self, tmp_path: Path, partition: str, checkout: Path = REPO):
        self.tmp, self.checkout = tmp_path, checkout
        self.dir = tmp_path / "sweep"
        self.out = tmp_path / "out"
        self.partition = partition
        self.procs: list[subprocess.Popen] = []

    def fake_inputs(self) -> list[str]:
        """A model dir and parquet files where preflight looks (the stand-in never reads them), and no
        QE scorer (the stand-in never scores; tests/lifecycle runs the real one)."""
        (self.tmp / "models" / "Qwen2.5-3B").mkdir(parents=True, exist_ok=True)
        data = self.tmp / "data" / "wmt_zh_en"
        data.mkdir(parents=True, exist_ok=True)
        from src.data.parquet_io import write_parquet_atomic
        from src.data.rows import Example, make_row

        # rows as src.data.prepare writes them: the launcher checks their schema, split tags
        # (src/node/preflight.py check_data_splits) and template before anything is submitted
        example = Example(src="这只猫坐在垫子上。", tgt="The cat sat on the mat.", src_lang="zh", tgt_lang="en")
        # one step's prompts at least (48): a real launch refuses train data smaller than a step
        for name, split, n in (("train.parquet", "train", 48), ("val.parquet", "val", 1)):
            write_parquet_atomic([make_row(example, dataset_name="wmt_zh_en", template="base", split=split, index=i)
                                  for i in range(n)], data / name)
        return [f"paths.model_root={self.tmp}/models", f"paths.data_root={self.tmp}/data", "debug.skip_scorer=true"]

    def command(self, args: list[str]) -> list[str]:
        return [sys.executable, "-m", "src.launch", "--multirun", "hydra/launcher=slurm",
                f"slurm.partition={self.partition}", f"hydra.sweep.dir={self.dir}",
                f"paths.output_dir={self.out}", f"paths.results_root={self.tmp}/results", *args]

    def env(self, extra: dict | None = None) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES" and not k.startswith("SLURM_")}
        env.update(extra or {})
        return env

    def run(self, args: list[str], env_extra: dict | None = None,
            timeout: float = SWEEP_TIMEOUT_S) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(self.command(args), cwd=self.checkout, env=self.env(env_extra),
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"sweep did not return in {timeout}s:\n{e.stdout}\n{e.stderr}\n{self.slurm_view()}")

    def start(self, args: list[str], env_extra: dict | None = None) -> subprocess.Popen:
        proc = subprocess.Popen(self.command(args), cwd=self.checkout, env=self.env(env_extra),
                                stdout=open(self.tmp / "submitter.out", "w"), stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        self.procs.append(proc)
        return proc

    def output(self) -> str:
        return (self.tmp / "submitter.out").read_text()

    def wait(self, proc: subprocess.Popen, timeout: float = SWEEP_TIMEOUT_S) -> int:
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"sweep did not return in {timeout}s:\n{self.output()}\n{self.slurm_view()}")

    def job_ids(self) -> list[str]:
        """Slurm job ids from the submitit folders (<id> or <array id>_<task>)."""
        folder = self.dir / ".submitit"
        return sorted(p.name for p in folder.iterdir() if list(p.glob("*_submitted.pkl"))) if folder.exists() else []

    def wait_for(self, what: str, predicate, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not happen within {timeout}s\n{self.slurm_view()}")
            if any(p.poll() is not None for p in self.procs):
                pytest.fail(f"the submitter ended while waiting for {what}:\n{self.output()}")
            time.sleep(0.5)

    def summary(self) -> list[dict]:
        return json.loads((self.dir / "summary.json").read_text())

    def slurm_view(self) -> str:
        parts = []
        for job in self.job_ids():
            parts.append(subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True,
                                        timeout=15).stdout)
            for log in (self.dir / ".submitit" / job).glob("*.out"):
                parts.append(f"--- {log}\n{log.read_text()[-3000:]}")
        return "\n".join(parts)

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
        ids = self.job_ids()
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=30)


def sacct_tres(job_id: str, timeout_s: float = 30) -> tuple[str, dict]:
    """(State, AllocTRES as a dict) once sacct has the job's final record (it can lag the job's end)."""
    deadline, last = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        last = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State,AllocTRES"],
                              capture_output=True, text=True, timeout=15).stdout
        for line in last.splitlines():
            jid, state, tres = line.split("|")
            if jid == job_id and tres and state.split()[0] not in {"PENDING", "RUNNING", "COMPLETING", "REQUEUED"}:
                return state, dict(kv.split("=", 1) for kv in tres.split(","))
        time.sleep(0.5)
    pytest.fail(f"sacct has no final record of {job_id} after {timeout_s}s: {last!r}")


def scontrol_field(job_id: str, field: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=15).stdout
    match = re.search(rf"\b{field}=(\S+)", out)
    return match.group(1) if match else ""


class RequeuedStart:
    """Starts a requeued job at once: Slurm holds one back for its credential lifetime (120 s by default). Not
    within the second of the requeue: slurmd refuses a job whose new credential is from the second its requeue
    revoked the old one in ("Killing non-startable batch JobId=...: Job credential revoked" in slurmctld's log, and
    the job fails; a run of tests/slurm/test_real_loop_faults.py saw it, 0.3 s after the requeue). Call it while
    waiting; `seen_pending` says whether the job was pending again."""

    WAIT_S = 2.0

    def __init__(self, job_id: str, *updates: str):
        self.job_id, self.updates = job_id, updates
        self.seen_pending = False
        self._pending_since: float | None = None

    def __call__(self) -> None:
        if scontrol_field(self.job_id, "JobState") != "PENDING":
            self._pending_since = None
            return
        self.seen_pending = True
        now = time.monotonic()
        self._pending_since = self._pending_since or now
        if now - self._pending_since >= self.WAIT_S:
            subprocess.run(["scontrol", "update", f"JobId={self.job_id}", "StartTime=now", *self.updates],
                           capture_output=True, timeout=30)
