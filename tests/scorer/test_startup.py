"""Start-up failures are one line and fast; ready file and graceful shutdown (subprocesses)."""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import stat
import threading
import time
from urllib.parse import urlparse

import pytest

from src.scorer.config import ModelSpec, ScorerConfig, dump_config
from tests.helpers.refusals import assert_one_line_refusal
from tests.helpers.scorer_service import TOKEN, run_serve, service_env, start_service, stop_service

from .conftest import make_hub_cache, write_config


@pytest.fixture
def good_config(tmp_path, tiny_dir):
    return write_config(tmp_path / "scorer.yaml", tiny_dir,
                        models={"kiwi": ("cometkiwi", "cometkiwi", {})})


@pytest.mark.parametrize("token", [None, "", "   "])
def test_refuses_to_start_without_token(good_config, token):
    env = service_env()
    env.pop("QE_SCORER_TOKEN", None)
    if token is not None:
        env["QE_SCORER_TOKEN"] = token
    p, secs = run_serve(good_config, env)
    assert p.returncode == 2 and secs < 10 and p.stdout == ""
    assert "QE_SCORER_TOKEN is not set" in assert_one_line_refusal(p.stderr, "scorer: error: ")


def test_bad_config_is_one_line(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("models: {m: {path: /x, kind: bleu}}\n")
    p, _ = run_serve(cfg)
    assert p.returncode == 2
    assert "models.m.kind must be one of" in assert_one_line_refusal(p.stderr, "scorer: error: ")


def test_missing_model_fails_within_seconds_naming_the_path(tmp_path):
    cfg = tmp_path / "scorer.yaml"
    missing = tmp_path / "models" / "XCOMET-XL"
    cfg.write_text(json.dumps({"models": {"xl": {"path": str(missing), "kind": "xcomet"}}}))
    p, secs = run_serve(cfg)
    assert p.returncode == 2 and secs < 10
    line = assert_one_line_refusal(p.stderr, "scorer: error: ")
    assert str(missing / "checkpoints" / "model.ckpt") in line and "'xl'" in line


def test_busy_port_is_one_line(good_config):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p, secs = run_serve(good_config, None, 60, "--port", str(port))
    assert p.returncode == 2 and secs < 15
    assert f"cannot listen on 127.0.0.1:{port}" in assert_one_line_refusal(p.stderr, "scorer: error: ")


@pytest.fixture(scope="module")
def slow_service(tiny_dir, tmp_path_factory):
    """A long max_wait keeps requests queued, so a hang-up or SIGTERM meets pending work.
    A second model comes from a pre-filled HF cache (`hf:` path, encoder named by hub id)."""
    d = tmp_path_factory.mktemp("slow")
    make_hub_cache(tiny_dir, d / "hub", "cometkiwi", "tiny-org/cometkiwi", "tiny-org/xlmr")
    cfg = d / "scorer.yaml"
    models = {"kiwi": ModelSpec(path=str(tiny_dir / "models" / "cometkiwi"), kind="cometkiwi"),
              # own lane, so its batches do not teach the "kiwi" lane a batch size
              "kiwi-hf": ModelSpec(path="hf:tiny-org/cometkiwi", kind="cometkiwi")}
    dump_config(ScorerConfig(models=models, max_wait_ms=3000.0), cfg)
    env = service_env(QE_SCORER_TOKEN=TOKEN, HF_HUB_CACHE=str(d / "hub"))
    for var in ("HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(var, None)  # the service must go offline by itself
    svc = start_service(cfg, d / "run" / "ready.json", env=env)
    yield svc
    stop_service(svc)


def test_model_from_a_prefilled_hf_cache(slow_service, comet_models):
    item = {"src": "Der Hund bellt.", "mt": "The dog barks."}
    status, body, _ = slow_service.score("kiwi-hf", [item])
    assert status == 200
    expected = comet_models("cometkiwi").predict([item], batch_size=1, gpus=0, progress_bar=False)
    assert body["results"][0]["score"] == pytest.approx(expected.scores[0], abs=1e-5)


def wait_for_depth(svc, depth, timeout=10.0):
    deadline = time.time() + timeout
    while svc.request("GET", "/health")[1]["queue_depth"] != depth:
        assert time.time() < deadline, f"queue depth never reached {depth}"
        time.sleep(0.02)


def test_ready_file(slow_service):
    info = json.loads(slow_service.ready_file.read_text())
    assert info["pid"] == slow_service.proc.pid and info["models"] == ["kiwi", "kiwi-hf"]
    assert info["url"] == slow_service.url and info["url"].startswith("http://127.0.0.1:")
    assert stat.S_IMODE(os.stat(slow_service.ready_file).st_mode) == 0o600


def test_client_hang_up_drops_its_queued_items(slow_service):
    _, before, _ = slow_service.request("GET", "/metrics")
    u = urlparse(slow_service.url)
    body = json.dumps({"model": "kiwi", "items": [{"src": "a", "mt": f"b {i}"} for i in range(4)]})
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("POST", "/score", body=body, headers={"Authorization": f"Bearer {TOKEN}"})
    wait_for_depth(slow_service, 4)
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    wait_for_depth(slow_service, 0, timeout=2.0)  # well before max_wait (3 s) would send it
    time.sleep(0.2)
    _, after, _ = slow_service.request("GET", "/metrics")
    assert after["batches"] == before["batches"] and after["items"] == before["items"]


def test_sigterm_finishes_queued_work_and_exits_0(slow_service):
    svc = slow_service
    result = {}
    items = [{"src": "Der Hund.", "mt": f"The dog number {i}."} for i in range(5)]
    t = threading.Thread(target=lambda: result.update(r=svc.score("kiwi", items)))
    t.start()
    wait_for_depth(svc, 5)
    svc.proc.send_signal(signal.SIGTERM)
    t.join(30)
    status, body, _ = result["r"]
    assert status == 200 and len(body["results"]) == 5
    assert svc.proc.wait(30) == 0
    assert not svc.ready_file.exists()
    assert svc.proc.stdout.read() == ""  # the ready line was the only stdout
