"""A QE scorer that cannot start is one clear line naming its log, and nothing is left running.
src/node/scorer_service.py driven directly (no launcher): fast."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from src.plan import ScorerModelSpec, ScorerPlan
from src.node.scorer_service import ScorerError, ScorerProcess
from tests.helpers.scorer_service import NETGUARD, SCORER_PYTHON

REPO = Path(__file__).resolve().parents[2]


def _plan(python: str, model_path: str, timeout_s: float = 60) -> ScorerPlan:
    return ScorerPlan(placement="cpu", device="cpu", training_gpu_index=None, dtype="fp32", python=python,
                      batch_tokens=1024, ready_timeout_s=timeout_s, restarts=1,
                      models=(ScorerModelSpec(name="cometkiwi_da", path=model_path, kind="cometkiwi", encoder=None),))


def _env() -> dict:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("QE_SCORER_")},
            "PYTHONPATH": os.pathsep.join([str(REPO), str(NETGUARD)])}


def _never(reason: str) -> None:
    raise AssertionError(f"on_fatal called during start: {reason}")


def test_service_that_exits_before_ready_is_one_line_with_its_log_tail(tmp_path):
    missing = tmp_path / "nowhere" / "model.ckpt"
    svc = ScorerProcess(_plan(str(SCORER_PYTHON), str(missing)), tmp_path / "scorer", "node-0", _env(), "", _never)
    with pytest.raises(ScorerError) as err:
        svc.start()
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("QE scorer (node-0) exited with code 2 before it was ready: scorer: error:"), msg
    assert str(missing) in msg and msg.endswith(f"log: {tmp_path / 'scorer' / 'node-0.log'}")
    assert svc.proc.poll() == 2
    # the config it was given holds no secret
    assert svc.token not in (tmp_path / "scorer" / "node-0.yaml").read_text()


def test_service_not_ready_in_time_is_stopped_and_named(tmp_path):
    hang = tmp_path / "hang.sh"
    hang.write_text("#!/bin/sh\necho loading forever >&2\nexec sleep 600\n")
    hang.chmod(0o755)
    svc = ScorerProcess(_plan(str(hang), str(tmp_path), timeout_s=1.0), tmp_path / "scorer", "node-3", _env(), "",
                        _never)
    t0 = time.monotonic()
    with pytest.raises(ScorerError) as err:
        svc.start()
    assert time.monotonic() - t0 < 40
    msg = str(err.value)
    assert msg.startswith("QE scorer (node-3) was not ready after 1s (scorer.ready_timeout_s); last log lines: "
                          "loading forever; log: "), msg
    assert svc.proc.poll() is not None      # killed, not left behind


def test_started_beside_training_its_url_is_known_at_once_and_a_failed_start_reaches_on_fatal(tmp_path):
    """`start(wait=False)`: the runner starts training while the models load. The URL is in the env before
    the service serves; a start that fails is the same one line, handed to `on_fatal` (the runner then stops
    training with it), and nothing is left running."""
    missing = tmp_path / "nowhere" / "model.ckpt"
    fatal: list[str] = []
    ready: list[bool] = []
    svc = ScorerProcess(_plan(str(SCORER_PYTHON), str(missing)), tmp_path / "scorer", "node-0", _env(), "",
                        fatal.append)
    t0 = time.monotonic()
    env = svc.start(wait=False, on_ready=lambda: ready.append(True))
    assert time.monotonic() - t0 < 2  # the service's own start-up (imports, models) is not waited for
    assert env["QE_SCORER_URL"] == f"http://127.0.0.1:{svc.port}" and svc.port > 0
    deadline = time.monotonic() + 120
    while not fatal and time.monotonic() < deadline:
        time.sleep(0.2)
    (msg,) = fatal
    assert msg.startswith("QE scorer (node-0) exited with code 2 before it was ready: scorer: error:"), msg
    assert str(missing) in msg and "\n" not in msg and not ready
    assert svc.proc.poll() == 2
    svc.stop()


def test_started_beside_training_it_serves_on_the_url_given_before(tmp_path, tiny_comet_dir):
    import json
    import urllib.request

    fatal: list[str] = []
    ready: list[float] = []
    kiwi = str(tiny_comet_dir / "models" / "cometkiwi")
    svc = ScorerProcess(_plan(str(SCORER_PYTHON), kiwi, timeout_s=240), tmp_path / "scorer", "node-0", _env(), "",
                        fatal.append)
    env = svc.start(wait=False, on_ready=lambda: ready.append(time.monotonic()))
    try:
        deadline = time.monotonic() + 240
        while not ready and not fatal and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready and not fatal, fatal
        req = urllib.request.Request(f"{env['QE_SCORER_URL']}/health",
                                     headers={"Authorization": f"Bearer {env['QE_SCORER_TOKEN']}"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert json.loads(resp.read())["status"] == "ok"
    finally:
        svc.stop()
    assert svc.proc.poll() is not None
