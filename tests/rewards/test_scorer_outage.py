"""A QE scorer that dies mid-batch costs time, never samples (issue 11, part 1).

Real parts: the service is the project's ScorerProcess (src/node/scorer_service.py: start, watch,
restart once on the same URL and token, then `on_fatal`) running the real scoring service in
.venv-scorer on the tiny CometKiwi checkpoint; the rewards come from verl 0.9.1's own `naive`
reward manager (`load_reward_manager` on the launcher's verl config, `run_single` driven on the
manager's own event loop, as verl's reward loop worker does) calling src.rewards.compute.

Why not verl's RewardLoopWorker Ray actors: on this 2-core CPU machine a local Ray with the reward
loop's `reward.num_workers` actors does not start within a test's budget, and the actor's body is
exactly `run_single` on its manager's loop (verl/experimental/reward_loop/reward_loop.py
RewardLoopWorker), which is what runs here, with every sample of the batch in flight at once.

Killed once: every call waits for the restarted service (/health) and the scores equal those of an
uninterrupted run. Killed twice: the runner's stop gets one line naming the service's log, and the
calls still waiting raise ScorerUnavailable naming the URL and the log instead of a score.
"""
from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from src.plan import ScorerModelSpec, ScorerPlan
from src.rewards.client import ScorerUnavailable, close_clients
from src.node.training import TrainingStop
from src.node.scorer_service import ScorerProcess
from tests.helpers.reward_config import extra_info
from tests.helpers.scorer_service import NETGUARD, REPO, SCORER_PYTHON
from tests.helpers.verl_reward_harness import manager, sample

SOURCES = ["这只猫坐在垫子上。", "今天天气很好。", "我们明天去北京。", "他在看书。",
           "这个问题很难回答。", "请把门关上。", "火车晚点了十分钟。", "她喜欢喝绿茶。"]
MTS = ["The cat sat on the mat.", "The weather is nice today.", "We go to Beijing tomorrow.",
       "He is reading a book.", "This question is hard to answer.", "Please close the door.",
       "The train was ten minutes late.", "She likes green tea."]
N_ROUNDS = 3  # 24 samples
STAGGER_S = 0.1


def _plan(tiny, ready_timeout_s: float = 120.0) -> ScorerPlan:
    return ScorerPlan(placement="cpu", device="cpu", training_gpu_index=None, dtype="fp32",
                      python=str(SCORER_PYTHON), batch_tokens=4096, ready_timeout_s=ready_timeout_s, restarts=1,
                      models=(ScorerModelSpec(name="cometkiwi_da", path=str(tiny / "models" / "cometkiwi"),
                                              kind="cometkiwi", encoder=None),))


@pytest.fixture
def service(tiny_comet_dir, tmp_path, monkeypatch):
    """The runner's ScorerProcess; its env goes to the reward 'workers' (this process)."""
    stop = TrainingStop()
    base = dict(os.environ, PYTHONPATH=os.pathsep.join([str(NETGUARD), str(REPO)]))
    proc = ScorerProcess(_plan(tiny_comet_dir), tmp_path / "scorer", "node-0", base, "", stop)
    env = proc.start()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("QE_REWARD_COMPONENTS_DIR", raising=False)
    yield proc, stop, env
    proc.stop()


def _batch(tok):
    return [sample(tok, f"<think>t</think>\n<translate>{MTS[i]}</translate>", extra_info(SOURCES[i]),
                   reference=MTS[(i + 1) % len(MTS)])
            for _ in range(N_ROUNDS) for i in range(len(SOURCES))]


def _score_all(mgr, batch, on_first_done=None) -> list:
    """The samples start STAGGER_S apart (as trajectories finish generating) and overlap on the
    manager's loop; `on_first_done` runs once, after the first sample got its reward (mid-batch).
    Exceptions are returned, as verl's agent loop gathers them."""
    async def one(i, data, state):
        await asyncio.sleep(i * STAGGER_S)
        out = await mgr.run_single(data)
        if on_first_done is not None and not state:
            state.append(True)
            on_first_done()
        return out

    async def everything():
        state: list = []
        try:
            return await asyncio.gather(*(one(i, d, state) for i, d in enumerate(batch)), return_exceptions=True)
        finally:
            await close_clients()

    return mgr.loop.run_until_complete(everything())


def _kill(proc: ScorerProcess) -> int:
    pid = proc.proc.pid
    os.killpg(pid, signal.SIGKILL)
    return pid


def _wait_restarted(proc: ScorerProcess, old_pid: int, timeout: float = 150.0) -> None:
    """Until the restart is complete: the new process wrote its ready file and the watcher's own
    /health check is done (it runs right after; killing the service during it is a failed restart)."""
    deadline = time.monotonic() + timeout
    while not (proc.proc.pid != old_pid and proc.restarts_done and (proc._read_ready() or {}).get("pid") ==
               proc.proc.pid):
        assert time.monotonic() < deadline, f"the scorer was not restarted within {timeout}s"
        time.sleep(0.2)
    time.sleep(2.0)


def test_killed_once_mid_batch_nothing_is_lost(service, tokenizer):  # noqa: F811
    proc, stop, _env = service
    # no retries: a restart (seconds here, minutes for XCOMET-XL) must be covered by the /health
    # wait, not by a retry budget tuned to the model
    mgr = manager(tokenizer, "reward=comet", "reward.client.retries=0")
    batch = _batch(tokenizer)
    reference = _score_all(mgr, batch)
    assert not [r for r in reference if isinstance(r, BaseException)]

    first_pid = proc.proc.pid
    killed: list[int] = []
    outcome = _score_all(mgr, batch, on_first_done=lambda: killed.append(_kill(proc)))
    assert killed == [first_pid]
    errors = [r for r in outcome if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} of {len(batch)} samples lost: {errors[0]!r}"
    assert proc.restarts_done == 1 and proc.proc.pid != first_pid and stop.reason is None
    # the restart cost time, not values: every sample's reward equals the uninterrupted run's
    assert [r["reward_score"] for r in outcome] == [r["reward_score"] for r in reference]
    # the raw CometKiwi value too, up to the float noise of a different batch composition (the
    # service pads each batch to its longest item; fp32 sums differ in the last bits)
    assert [r["reward_extra_info"]["kiwi"] for r in outcome] == pytest.approx(
        [r["reward_extra_info"]["kiwi"] for r in reference], abs=1e-6)


def test_killed_twice_stops_with_the_services_log(service, tokenizer, monkeypatch):  # noqa: F811
    proc, stop, env = service
    mgr = manager(tokenizer, "reward=comet")
    first = _kill(proc)
    _wait_restarted(proc, first)
    # the calls below meet a dead service that nobody restarts; waiting the full ready timeout
    # (150 s here) would only slow the test down, the behaviour is the same with 3 s
    monkeypatch.setenv("QE_SCORER_READY_TIMEOUT_S", "3")
    _kill(proc)
    deadline = time.monotonic() + 30
    while stop.reason is None:
        assert time.monotonic() < deadline, "the runner's stop was not called after the second death"
        time.sleep(0.1)
    assert "\n" not in stop.reason
    assert stop.reason.startswith("QE scorer (node-0) died during training (exit code -9) after 1 restart(s)")
    assert stop.reason.endswith(f"log: {env['QE_SCORER_LOG']}")

    outcome = _score_all(mgr, _batch(tokenizer)[:4])
    assert all(isinstance(r, ScorerUnavailable) for r in outcome), outcome
    msg = str(outcome[0])
    assert env["QE_SCORER_URL"] in msg and env["QE_SCORER_LOG"] in msg and "/health did not answer within 3s" in msg
