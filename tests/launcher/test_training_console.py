"""The terminal of a training run (issue 51, finding 16): a stand-in trainer that prints what verl's Ray
workers and vLLM print (the same vLLM warning once per weight, TransferQueue's thread warning, start-up
lines, worker chatter), the trainer's step-end lines and verl's metrics rows, and a traceback. The real
runner (src/node/training.py) reads it: train.log keeps every line, the terminal shows where the log is,
start-up phases, one progress line per step (run, step N/M, trained reward, step time, ETA), each warning
once and the traceback in full; `verbose=true` echoes every line."""
from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from src.node import console, training
from src.trainer.progress import parse_progress, step_end_line

REPO = Path(__file__).resolve().parents[2]

# what a two-step run prints, in verl's order: Ray's start, a worker's chatter, the same vLLM warning for
# every weight, verl's set-up lines, and per step its step-end line, then its metrics row in the file
# logger's file (after validation: PPOTrainer.fit logs a step's metrics after on_step_end)
TRAINER = r'''
import json, os, sys, time
metrics = open(os.environ["VERL_FILE_LOGGER_PATH"], "a")
sys.path.insert(0, os.environ["REPO"])
from src.trainer.progress import step_end_line
def say(line):
    print(line, flush=True)
say("2026-11-28 01:07:00,322\tINFO worker.py:1 -- Started a local Ray instance.")
for i in range(int(sys.argv[1])):
    say(f"(WorkerDict pid=4{i % 3}) INFO 11-28 01:07:{i % 60:02d} [loader.py:42] loading shard {i}")
for layer in range(30):
    for proj in ("q_proj", "k_proj", "v_proj"):
        say(f"\x1b[36m(vLLMHttpServer pid=61)\x1b[0m WARNING 11-28 01:07:14 [utils.py:334] Attempted to load "
            f"weight model.layers.{layer}.self_attn.{proj}.weight with dtype torch.float32 into parameter "
            f"with dtype torch.bfloat16")
say("(TaskRunner pid=12) WARNING:transfer_queue:[client_3f2a]: Background thread did not stop within timeout")
say("(TaskRunner pid=12) WARNING:transfer_queue:[client_9c01]: Background thread did not stop within timeout")
say("(TaskRunner pid=12) INFO:2026-11-28 01:07:20,001:all initialize finished, ready to fit")
for step in (1, 2):
    say(f"(TaskRunner pid=12) step:{step} - actor/pg_loss:0.1 - critic/score/mean:{0.25 * step}")
    say("(TaskRunner pid=12) " + step_end_line(step, total=2))
    say(f"(TaskRunner pid=12) validation: {step} batches")
    metrics.write(json.dumps({"step": step, "data": {"critic/score/mean": 0.25 * step}}) + "\n")
    metrics.flush()
    say(f"(WorkerDict pid=40) INFO offloading params after step {step}")
if sys.argv[2] == "fail":
    for line in ("Traceback (most recent call last):", '  File "main_ppo.py", line 12, in run',
                 "    trainer.fit()", "ValueError: the batch was empty"):
        say("(TaskRunner pid=12) " + line)
    say("(WorkerDict pid=40) INFO shutting down")
    sys.exit(1)
'''


def _run(tmp_path: Path, mode: str, chatter: int = 200, verbose: bool = False):
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = {**os.environ, "REPO": str(REPO), "VERL_FILE_LOGGER_PATH": str(tmp_path / "metrics.jsonl")}
    out = io.StringIO()
    view = console.for_run("0_tiny_grpo_seed1", verbose, stream=out)
    log = tmp_path / "run" / "train.log"
    code = training.run([sys.executable, str(script), str(chatter), mode], env, log, console=view)
    return code, log.read_text(), out.getvalue()


def test_the_terminal_shows_progress_warnings_once_and_the_log_path_and_train_log_keeps_every_line(tmp_path):
    code, log, shown = _run(tmp_path, "ok")
    assert code == 0, log[-2000:]
    lines = shown.splitlines()
    # train.log: every line the trainer printed (200 chatter lines, 90 vLLM warnings, ...)
    assert log.count("Attempted to load weight") == 90 and log.count("loading shard") == 200
    assert log.count("Background thread did not stop") == 2
    # the terminal: a handful of lines
    assert len(lines) < 15, shown
    log_path = tmp_path / "run" / "train.log"
    assert lines[0] == f"[0_tiny_grpo_seed1] training started; full log (every worker's output): {log_path}"
    assert lines[-1] == (f"[0_tiny_grpo_seed1] training ended; 90 repeated warning(s) not shown again; "
                         f"full log: {tmp_path}/run/train.log")
    assert sum("Attempted to load weight" in l for l in lines) == 1
    assert sum("Background thread did not stop" in l for l in lines) == 1
    assert "loading shard" not in shown and "step:1 - actor/pg_loss" not in shown
    assert "[0_tiny_grpo_seed1] start-up: ray up (" in shown and "start-up: ready to fit (" in shown
    progress = [l for l in lines if l.startswith("[0_tiny_grpo_seed1] step ")]
    assert [l.split("  ")[:2] for l in progress] == [["[0_tiny_grpo_seed1] step 1/2", "trained reward 0.25"],
                                                    ["[0_tiny_grpo_seed1] step 2/2", "trained reward 0.5"]]
    assert all(" ETA " in l and "  step " in l for l in progress), progress
    assert progress[-1].endswith("ETA 0s"), progress


def test_a_failed_training_shows_its_traceback_in_full_and_the_logs_last_lines(tmp_path):
    code, log, shown = _run(tmp_path, "fail")
    assert code == 1
    lines = shown.splitlines()
    start = next(i for i, l in enumerate(lines) if l.endswith("Traceback (most recent call last):"))
    assert [l.split(") ", 1)[1] for l in lines[start:start + 4]] == [
        "Traceback (most recent call last):", '  File "main_ppo.py", line 12, in run', "    trainer.fit()",
        "ValueError: the batch was empty"]
    # after the traceback: the log's last lines the terminal did not show, then where the whole log is
    assert "(WorkerDict pid=40) INFO shutting down" in shown
    assert lines[-1].startswith("[0_tiny_grpo_seed1] training exited with code 1;") and "full log: " in lines[-1]
    assert "Traceback (most recent call last):" in log and "INFO shutting down" in log


def test_verbose_echoes_every_line_as_train_log_has_it(tmp_path):
    code, log, shown = _run(tmp_path, "ok", chatter=20, verbose=True)
    assert code == 0
    assert shown == log


def test_a_tty_gets_one_redrawn_progress_bar(tmp_path):
    view = console.ProgressConsole("r", stream=io.StringIO(), tty=True)
    view.begin(tmp_path / "train.log", {})
    for step in (1, 2, 3, 4):
        view.line(step_end_line(step, total=4) + "\n")
    view.end(0)
    text = view.stream.getvalue()
    assert text.count("\r\x1b[2K[") == 4 and "[#####...............] [r] step 1/4" in text
    assert "[####################] [r] step 4/4" in text
    # the bar's line is ended before the next line
    assert "\n[r] training ended; full log:" in text


@pytest.mark.parametrize("a, b", [
    ("(A pid=1) WARNING 11-28 01:07:14 [utils.py:334] Attempted to load weight model.layers.0.q.weight with "
     "dtype torch.float32", "\x1b[36m(B pid=7)\x1b[0m WARNING 11-28 02:00:01 [utils.py:334] Attempted to load "
     "weight model.layers.17.v.weight with dtype torch.float32 [repeated 3x across cluster]"),
    ("WARNING:transfer_queue:[client_3f2a]: Background thread did not stop within timeout",
     "WARNING:transfer_queue:[client_9c01]: Background thread did not stop within timeout"),
    ("/x/y.py:12: UserWarning: the file '/a/b.bin' is old", "/z/y.py:40: UserWarning: the file '/c/d.bin' is old"),
    # vLLM's own prefix after Ray's; Ray's dedup suffix with its advice (from a real CPU-loop train.log)
    ("\x1b[36m(vLLMHttpServer pid=23057)\x1b[0m (MainProcess pid=23057) WARNING 11-28 03:23:30 [cpu.py:224] Triton "
     "is not installed.", "(pid=9) WARNING 11-28 03:23:31 [cpu.py:224] Triton is not installed.\x1b[32m [repeated 2x "
     "across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication)\x1b[0m"),
])
def test_warnings_that_differ_only_in_names_numbers_and_paths_share_a_key(a, b):
    assert console.warning_key(a) == console.warning_key(b)


def test_a_log_level_in_a_value_is_not_a_warning(tmp_path):
    view = console.ProgressConsole("r", stream=io.StringIO(), tty=False)
    view.begin(tmp_path / "train.log", {})
    view.line("ray init kwargs: {'runtime_env': {'env_vars': {'NCCL_DEBUG': 'WARN', 'VLLM_LOGGING_LEVEL': 'WARN'}}}\n")
    view.line("2026-11-28 03:22:56,119\tWARNING authentication_token_setup.py:85 -- Token authentication is enabled\n")
    shown = view.stream.getvalue()
    assert "ray init kwargs" not in shown and "Token authentication is enabled" in shown


def test_warnings_with_different_messages_do_not_share_a_key():
    assert console.warning_key("WARNING: the KV cache is small") != console.warning_key("WARNING: the model is old")


def test_the_step_end_line_carries_the_total_and_old_lines_still_parse():
    assert parse_progress(step_end_line(3, 100.5, total=8)) == (3, 100.5, 8)
    assert parse_progress("qe-rl: step 3 ended at 100.500") == (3, 100.5, None)
    assert parse_progress("step:3 - actor/pg_loss:0.1") is None
