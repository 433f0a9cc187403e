"""A hung run is caught in real steps (issue 48, item 1): verl's own trainer on the CPU loop, its vLLM engine
stopped (SIGSTOP) after step 2, as a vLLM engine that hangs while verl waits on its generation. The launcher's
stall guard (src/node/stall.py) stops the run at its bound with one line naming the rollout (or weight sync) phase and the
stopped engine, the Python stacks of every training process in the run dir (the TaskRunner's in verl's step,
waiting for the rollout), its own exit code, and nothing left running (the cpu_loop fixture checks every process of
the launch's Ray session ended).

The bound here is the derived one (src/plan/stall.py) with a small minimum: 5 x the longest step so far, at
least 20 s; the first step keeps the default floor (start-up on a loaded machine).
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from src.pipeline.errors import STALLED_EXIT
from tests.helpers.loop_processes import descendants_titled, launcher_pid

TIMEOUT_S = 900
ARGS = ["experiment=learn_tiny", "learn.enable=false", "trainer.val_before_train=false", "trainer.test_freq=-1",
        "trainer.save_freq=-1", "trainer.total_training_steps=30", "trainer.stall_min_s=20", "trainer.stall_multiple=5"]


def _metrics_steps(out: Path) -> int:
    """Steps ended so far, from the training log's step-end lines (src/trainer/progress.py)."""
    logs = sorted(out.glob("runs/*/train.log"))
    if not logs:
        return 0
    return logs[-1].read_text(errors="replace").count("qe-rl: step ")


def test_a_stopped_vllm_engine_is_caught_as_a_stalled_rollout_with_every_stack_dumped(cpu_loop, taught_build):
    stopped: list[int] = []

    def act(out: Path, running) -> None:
        while _metrics_steps(out) < 2:
            if not running():
                raise AssertionError("the launch ended before step 2")
            time.sleep(0.5)
        engines = descendants_titled(launcher_pid(out), "VLLM::EngineCore")
        assert engines, "no vLLM engine process under the launcher"
        for pid in engines:
            os.kill(pid, signal.SIGSTOP)
        stopped.extend(engines)

    run = cpu_loop(ARGS + [f"model.build_dir={taught_build}"], timeout_s=TIMEOUT_S, during=act)
    print(f"stall: {run.seconds:.0f} s")
    out = run.output
    assert run.returncode == STALLED_EXIT, out[-6000:]
    (line,) = [l for l in out.splitlines() if l.startswith("error: stalled: ")]
    # the engine stopped mid-generation hangs the rollout; stopped as the step's end syncs weights into it (a loaded
    # machine's timing: CI saw it), the weight sync
    assert ("the rollout phase hung" in line or "the weight sync phase hung" in line), line
    assert "stopped: VLLM::EngineCore (pid " in line, line
    assert "(the bound: " in line and "after step " in line, line
    (run_dir,) = run.run_dirs
    (folder,) = run_dir.glob("stall-*")
    assert "stacks of " in line and str(folder) in line, line
    listing = (folder / "processes.txt").read_text().splitlines()[1:]
    states = {int(row.split("\t")[0]): row.split("\t")[1] for row in listing}
    assert all(states.get(pid) == "T" for pid in stopped), (stopped, listing)
    runners = [row.split("\t")[0] for row in listing if "TaskRunner" in row.split("\t")[2]]
    # verl's training loop, read by py-spy: in the step (the rollout) or, when the engine stopped as a step ended, in
    # the weight sync after it (PPOTrainer.fit -> on_step_end -> update_weights; CI of 7c2e5bf stopped there)
    assert runners and "PPOTrainer.fit (" in (folder / f"{runners[0]}.txt").read_text()
    # every Python process's dump is py-spy's read, not its refusal: this machine lets the launcher read them
    assert not [p for p in folder.glob("*.txt") if "py-spy could not read it" in p.read_text()]
    assert any("not a Python process" in p.read_text() for p in folder.glob("*.txt"))  # Ray's gcs_server, raylet
