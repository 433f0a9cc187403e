"""src/node/training.py's TimeLimitWatch with a real child process, in-process signals, no Slurm.

The handler that was installed before the watch stands in for submitit's (which calls
`scontrol requeue` and exits the job); tests/slurm/test_real_loop_sweep.py runs the real one on the
dev cluster, with verl's trainer. The child is a small trainer that speaks the flag protocol of src/trainer/entry.py
through src/trainer/time_limit.py, or ignores it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from src.node import training
from src.trainer import time_limit

REPO = Path(__file__).resolve().parents[2]

# steps of 0.1 s; signals itself at step 3 (as Slurm signals every process of the step), which
# would kill it unless the runner blocked the signal in it
CHILD = """
import json, os, signal, sys, time
from src.trainer import time_limit
ckpt, obey = sys.argv[1], sys.argv[2] == "obey"
self_signal = len(sys.argv) < 4 or sys.argv[3] != "quiet"
with open(os.path.join(ckpt, "child.json"), "w") as f:
    json.dump(sorted(s.name for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])), f)
for step in range(1, 600):
    time.sleep(0.1)
    if step == 3 and self_signal:
        os.kill(os.getpid(), signal.SIGUSR2)
    if obey and time_limit.requested(ckpt):
        time_limit.record_saved(ckpt, step, saved_now=True, finished=False)
        print(f"child: saved step {step}", flush=True)
        sys.exit(0)
print("child: ran out of steps", flush=True)
"""


class Requeue(Exception):
    pass


@pytest.fixture
def previous_handler():
    """Stands in for submitit's USR2 handler: records the call, then ends like it (it exits)."""
    calls = []

    def handler(signum, frame):
        calls.append(signum)
        raise Requeue()
    old = signal.signal(signal.SIGUSR2, handler)
    yield calls
    signal.signal(signal.SIGUSR2, old)


def run_child(tmp_path: Path, mode: str, stop_by_s: float, signal_after_s: float | None = 0.8):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PYTHONPATH"] = str(REPO)
    if signal_after_s is not None:
        # from outside, like slurmstepd
        subprocess.Popen(["bash", "-c", f"sleep {signal_after_s}; kill -USR2 {os.getpid()}"])
    watch = training.TimeLimitWatch(str(ckpt), stop_by_s)
    code = training.run([sys.executable, "-c", CHILD, str(ckpt), mode], env, tmp_path / "train.log", watch=watch)
    return code, ckpt, (tmp_path / "train.log").read_text()


def test_on_the_signal_training_saves_its_step_ends_and_the_job_is_handed_to_the_requeue(tmp_path, previous_handler):
    with pytest.raises(Requeue):
        run_child(tmp_path, "obey", stop_by_s=30)
    assert previous_handler == [signal.SIGUSR2]
    ckpt = tmp_path / "ckpt"
    assert "SIGUSR2" in json.loads((ckpt / "child.json").read_text())
    step = time_limit.saved(ckpt)["step"]
    log = (tmp_path / "train.log").read_text()
    assert "time limit: SIGUSR2 received; training saves the step in progress and ends (stopped in 30s" in log
    assert f"child: saved step {step}" in log
    assert f"time limit: step {step} saved now in {ckpt}; requeueing the job" in log
    # the handler is back: after the run the signal goes to what was there before
    assert signal.getsignal(signal.SIGUSR2) is not None and not signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_training_that_does_not_end_in_time_is_stopped_at_the_deadline_and_still_requeued(tmp_path, previous_handler):
    with pytest.raises(Requeue):
        run_child(tmp_path, "ignore", stop_by_s=1)
    log = (tmp_path / "train.log").read_text()
    assert "child: ran out of steps" not in log
    assert ("time limit: training was stopped at its deadline before the end of a step; the run resumes from the "
            "last checkpoint in") in log and "raise slurm.signal_delay_s" in log
    assert previous_handler == [signal.SIGUSR2]


def test_a_signal_after_the_last_step_ended_does_not_requeue_the_finished_run(tmp_path, previous_handler):
    """Slurm's signal may land after the trainer's last step was checked (verl's validation and
    shutdown still running): the trainer marked the run finished, so the job ends without a requeue
    (which would start again only to load the last checkpoint and end)."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    last_step_then_shutdown = ("import sys, time; from src.trainer import time_limit; "
                               "time_limit.record_finished(sys.argv[1], 10); time.sleep(2); print('shut down')")
    subprocess.Popen(["bash", "-c", f"sleep 0.8; kill -USR2 {os.getpid()}"])
    code = training.run([sys.executable, "-c", last_step_then_shutdown, str(ckpt)],
                        {**os.environ, "PYTHONPATH": str(REPO)}, tmp_path / "train.log",
                        watch=training.TimeLimitWatch(str(ckpt), 30))
    log = (tmp_path / "train.log").read_text()
    assert code == 0 and previous_handler == [], log
    assert "time limit: SIGUSR2 received" in log
    assert "time limit: training finished at step 10 before it; nothing to requeue" in log


def test_outside_a_submitit_job_the_signal_ends_the_run_with_one_line(tmp_path):
    old = signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    try:
        with pytest.raises(training.TimeLimitReached) as err:
            run_child(tmp_path, "obey", stop_by_s=30)
    finally:
        signal.signal(signal.SIGUSR2, old)
    assert "\n" not in str(err.value)
    assert str(err.value).endswith("saved now in " + str(tmp_path / "ckpt") + "; run the same command again to "
                                   "continue from it")


def test_without_a_signal_nothing_changes(tmp_path, previous_handler):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    time_limit.request(ckpt, "SIGUSR2", 5)   # a stale flag of an earlier attempt
    code = training.run([sys.executable, "-c", "print('done')"], dict(os.environ), tmp_path / "train.log",
                      watch=training.TimeLimitWatch(str(ckpt), 30))
    assert code == 0 and previous_handler == []
    assert not time_limit.requested(ckpt)


def run_preempted(tmp_path: Path, mode: str, grace_s: float, sigterms: int = 1):
    """The runner with a PreemptionWatch over the child trainer (without its own USR2), and `sigterms` SIGTERMs
    to this process from outside, as a preempting scheduler sends one to its job's main process."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    kills = "; ".join(f"sleep 0.8; kill -TERM {os.getpid()}" for _ in range(sigterms))
    subprocess.Popen(["bash", "-c", kills])
    watch = training.PreemptionWatch(str(ckpt), grace_s)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return training.run([sys.executable, "-c", CHILD, str(ckpt), mode, "quiet"], env, tmp_path / "train.log",
                        preempt=watch)


def test_a_sigterm_to_the_launcher_saves_the_step_in_progress_and_ends_resumably_in_one_line(tmp_path):
    old = signal.getsignal(signal.SIGTERM)
    with pytest.raises(training.Preempted) as err:
        run_preempted(tmp_path, "obey", grace_s=30)
    ckpt = tmp_path / "ckpt"
    step = time_limit.saved(ckpt)["step"]
    log = (tmp_path / "train.log").read_text()
    assert "preempted: SIGTERM received; training saves the step in progress and ends (stopped in 30s" in log
    assert f"child: saved step {step}" in log and "child: ran out of steps" not in log
    assert str(err.value) == (f"preempted: step {step} saved now in {ckpt}; run the same command again to continue "
                              f"from it")
    assert signal.getsignal(signal.SIGTERM) is old  # the handler is back after the run


def test_a_preempted_training_that_does_not_end_in_time_is_stopped_at_the_deadline(tmp_path):
    with pytest.raises(training.Preempted) as err:
        run_preempted(tmp_path, "ignore", grace_s=1)
    assert "child: ran out of steps" not in (tmp_path / "train.log").read_text()
    assert str(err.value).startswith(f"preempted: training was stopped at its deadline before the end of a step; "
                                     f"the run resumes from the last checkpoint in {tmp_path / 'ckpt'}")
    assert "raise trainer.preempt_grace_s" in str(err.value)


def test_a_second_sigterm_stops_at_once(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_preempted(tmp_path, "ignore", grace_s=60, sigterms=2)
    assert "child: ran out of steps" not in (tmp_path / "train.log").read_text()


# verl's trainer side, driven per step as PPOTrainer.fit drives it: verl's PPOTrainerSync with the
# TimeLimitSave hook (src/trainer/entry.py), built partially as in tests/launcher/test_train_entry.py
# (the GPU worker group and the weight sync stand in: tests/helpers/verl_trainer_stand_ins.py), on the
# run's own verl config, reading the real flag file in the checkpoint dir. verl's fit leaves its loop once global_steps passes
# total_training_steps, which the hook lowers on a time-limit request.
RESUMING_TRAINER = """
import json, os, sys
from pathlib import Path
from omegaconf import OmegaConf
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
from verl.trainer.ppo.v1 import PPOTrainerSync
from src.trainer import entry
from tests.helpers.verl_trainer_stand_ins import ActorWorkerGroup, WeightSync

config = OmegaConf.load(os.environ["QE_RL_VERL_CONFIG"])
ckpt = Path(config.trainer.default_local_dir)
start = int((ckpt / "latest_checkpointed_iteration.txt").read_text())   # resume_mode=auto
t = object.__new__(entry.time_limited(PPOTrainerSync))
t.config, t.total_training_steps = config, config.trainer.total_training_steps
t.trainer_mode, t.use_critic, t.timing_raw = "sync", False, {}
t.actor_rollout_wg, t.checkpoint_manager = ActorWorkerGroup(), WeightSync()
t.train_dataloader = StatefulDataLoader(list(range(8)), batch_size=2)
t.checkpoint_callback = build_checkpoint_callback(config)
t.global_steps = start + 1
while t.global_steps <= t.total_training_steps:          # PPOTrainer.fit's loop bound
    t.on_step_end()
    print(f"trainer: step {t.global_steps} done", flush=True)
    t.global_steps += 1
print(f"trainer: left fit after step {t.global_steps - 1}; saves {t.actor_rollout_wg.saves}", flush=True)
"""


def test_a_local_resume_of_a_dir_with_an_earlier_slurm_attempts_request_trains_to_the_end(tmp_path):
    """A Slurm attempt was killed after its watch wrote the request and before a requeue cleared
    it; the run is then resumed on a workstation (no Slurm, so no watch). The launcher clears the
    request on every launch, so verl's trainer (its on_step_end with our hook, reading the real file)
    trains steps 3..6 and does not stop after step 3 as the earlier attempt's request asked."""
    from src.data.parquet_io import write_parquet_atomic
    from src.data.rows import Example, make_row
    from tests.helpers.launches import launch

    (tmp_path / "models" / "Qwen2.5-0.5B-Instruct").mkdir(parents=True)
    for split in ("train", "val"):
        rows = [make_row(Example("今天天气很好。", "The weather is nice today.", "zh", "en"), dataset_name="wmt_zh_en",
                         template="base", split=split, index=i) for i in range(24)]
        write_parquet_atomic(rows, tmp_path / "data" / "wmt_zh_en" / f"{split}.parquet")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "latest_checkpointed_iteration.txt").write_text("2")       # the earlier attempt saved step 2
    time_limit.request(ckpt, "SIGUSR2", 30)                            # ... and its watch asked for a save
    script = tmp_path / "resuming_trainer.py"
    script.write_text(RESUMING_TRAINER)
    # 4 prompts per step: the 24 train rows fill the 6 steps (a real launch refuses data that gives fewer steps)
    result = launch(["model=qwen2.5_0.5b", "reward=comet", "gpus=1", "trainer.total_training_steps=6",
                     "batch.prompts_per_step=4", "batch.mini_batch_prompts=4",
                     "trainer.save_freq=100", "debug.skip_scorer=true",
                     f"debug.train_command_override='{sys.executable} {script}'",
                     f"+verl.trainer.default_local_dir={ckpt}", f"paths.output_dir={tmp_path}/out",
                     f"paths.results_root={tmp_path}/results", f"paths.model_root={tmp_path}/models",
                     f"paths.data_root={tmp_path}/data"],
                    env_extra={"CUDA_VISIBLE_DEVICES": "0", "SLURM_CPUS_PER_TASK": "16", "PYTHONPATH": str(REPO)},
                    timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    # the trainer's own lines are in train.log (the terminal shows progress lines: src/node/console.py)
    (run_dir,) = (tmp_path / "out" / "runs").iterdir()
    log = (run_dir / "train.log").read_text()
    assert [l for l in log.splitlines() if l.startswith("trainer: step")] == [
        f"trainer: step {s} done" for s in (3, 4, 5, 6)]
    assert "trainer: left fit after step 6; saves []" in log
    assert "time limit:" not in log + result.stdout
    # the terminal: one progress line per step, read from the trainer hook's step-end line (of 6 steps)
    progress = [l.split("] ", 1)[1].split("  ")[0] for l in result.stdout.splitlines() if "] step " in l]
    assert progress == ["step 3/6", "step 4/6", "step 5/6", "step 6/6"], result.stdout[-3000:]
    assert not time_limit.requested(ckpt) and time_limit.saved(ckpt) is None


# The runner in its own process: training.run in the main thread over a trainer that prints one line
# and then nothing for a minute; a helper thread takes SIGINT itself (as the kernel may hand a
# process-directed signal to any thread that does not block it) once the line has arrived.
INTERRUPTED_RUNNER = """
import os, signal, sys, threading, time
from pathlib import Path
from src.node import training
log = Path(sys.argv[1])
silent = [sys.executable, "-c", "import time; print('trainer: started', flush=True); time.sleep(60)"]
sent = []
def ctrl_c_to_another_thread():
    while "trainer: started" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.05)
    sent.append(time.monotonic())
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)
threading.Thread(target=ctrl_c_to_another_thread, daemon=True).start()
try:
    training.run(silent, dict(os.environ), log)
except KeyboardInterrupt:
    # timed from the signal, not from the start: on a loaded CI machine the trainer's own start took 20 s
    print(f"interrupted after {time.monotonic() - sent[0]:.1f} s", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_taken_by_another_thread_stops_a_silent_training_at_once(tmp_path):
    """Python runs the KeyboardInterrupt in the main thread only when that thread runs Python code:
    a runner blocked in a read of a silent trainer would sit out the signal until the next line."""
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_RUNNER, str(tmp_path / "train.log")], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stdout + done.stderr
    seconds = float(done.stdout.split("interrupted after ")[1].split()[0])
    # the trainer sleeps 60 s: seconds, not a minute (training.OUTPUT_POLL_S is 0.5 s)
    assert seconds < 20, done.stdout


def test_output_lines_reads_as_a_text_pipe_would(tmp_path):
    """The runner's reader gives what a text-mode pipe gives: lines split at \\n, \\r\\n and \\r, bytes that
    are not UTF-8 replaced, a last line without its newline kept."""
    cat = "\u732b ".encode()  # a 3-byte character, written in two parts
    script = (r"import sys, time; out = sys.stdout.buffer; out.write(b'a\r\nb\rc\n\xff\xfe z\n'); out.flush(); "
              f"time.sleep(0.2); out.write({cat[:2]!r}); out.flush(); time.sleep(0.2); "
              f"out.write({cat[2:] + b'tail'!r}); out.flush()")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    got = list(training.output_lines(proc.stdout, poll_s=0.05))
    proc.wait(timeout=30)
    assert got == ["a\n", "b\n", "c\n", "\ufffd\ufffd z\n", "\u732b tail"]
