"""The one way the tests start the real QE scoring service (src/scorer/serve.py): as the runner
starts it, `python -m src.scorer.serve --config X --ready-file Y` in the scorer env, the token in its
environment, network access refused inside it (tests/scorer/netguard, loaded as sitecustomize), and
a client for its HTTP API.

The scorer tests (scorer env) start it with their own model sets and limits; the train-env tests
share one session's service on the tiny COMET and MetricX checkpoints (tests/conftest.py).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCORER_PYTHON = REPO / ".venv-scorer" / "bin" / "python"
NETGUARD = REPO / "tests" / "scorer" / "netguard"  # sitecustomize that refuses non-loopback connects
TOKEN = "test-token-5f2c"
_OWN_TOKEN = object()  # request()'s default: the token the service was started with


def service_env(**extra: str) -> dict:
    """This process's environment with the netguard and the repository first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(NETGUARD), str(REPO)])
    env.update(extra)
    return env


@dataclass
class Service:
    proc: subprocess.Popen
    url: str
    ready_file: Path
    log: Path

    def request(self, method: str, path: str, body=None, token=_OWN_TOKEN, headers=None,
                timeout: float = 60.0) -> tuple[int, object, dict]:
        """-> (status, parsed JSON body, response headers). `body` may be bytes or an object;
        token=None sends no Authorization header."""
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=body, method=method)
        req.add_header("Content-Type", "application/json")
        if token is not None:
            req.add_header("Authorization", f"Bearer {TOKEN if token is _OWN_TOKEN else token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read()), dict(r.headers)
        except urllib.error.HTTPError as e:
            raw = e.read()
            return e.code, json.loads(raw) if raw else None, dict(e.headers)

    def score(self, model: str, items, want=None, **options) -> tuple[int, object, dict]:
        """POST /score as it is answered: (status, body, headers)."""
        body = {"model": model, "items": items, **options}
        if want is not None:
            body["want"] = want
        return self.request("POST", "/score", body)

    def results(self, model: str, items, want=None, **options) -> list[dict]:
        """The service's results for these items (the expected values of a reward's components)."""
        status, body, _ = self.score(model, items, want, **options)
        assert status == 200, (status, body)
        return body["results"]

    def items_by_model(self) -> dict:
        """How many items each model has scored since the service started (GET /metrics)."""
        status, body, _ = self.request("GET", "/metrics")
        assert status == 200, (status, body)
        return dict(body.get("items_by_model") or {})


def start_service(config: Path, ready_file: Path, env=None, timeout: float = 240.0,
                  python: Path = SCORER_PYTHON) -> Service:
    """Starts the service on `config` and waits for its ready file and its one stdout line."""
    if not Path(python).exists():
        raise RuntimeError(f"{python} is missing: run `make setup` (the scorer env runs the QE service)")
    # stderr goes to a file: a pipe nobody reads would block the service once it fills up
    log = config.with_suffix(".stderr.log")
    with open(log, "w") as err:
        proc = subprocess.Popen([str(python), "-m", "src.scorer.serve", "--config", str(config),
                                 "--ready-file", str(ready_file)],
                                cwd=REPO, env=env or service_env(QE_SCORER_TOKEN=TOKEN),
                                stdout=subprocess.PIPE, stderr=err, text=True)
    deadline = time.monotonic() + timeout
    while not ready_file.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"scorer service exited {proc.returncode}: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"scorer service not ready after {timeout:.0f} s: {log.read_text()[-3000:]}")
        time.sleep(0.1)
    line = proc.stdout.readline().strip()
    info = json.loads(ready_file.read_text())
    assert line == f"scorer ready url={info['url']}", line
    return Service(proc=proc, url=info["url"], ready_file=ready_file, log=log)


def stop_service(svc: Service, sig=signal.SIGTERM, timeout: float = 60.0) -> int:
    """Signals the service and returns its exit code; kills it (and raises) if it does not exit."""
    if svc.proc.poll() is None:
        svc.proc.send_signal(sig)
    try:
        return svc.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        svc.proc.kill()
        svc.proc.wait()
        raise


def run_serve(config: Path, env=None, timeout: float = 60, *extra: str,
              python: Path = SCORER_PYTHON) -> tuple[subprocess.CompletedProcess, float]:
    """`serve` run to its end (a start-up refusal): the finished process and its seconds."""
    t0 = time.time()
    p = subprocess.run([str(python), "-m", "src.scorer.serve", "--config", str(config), *extra],
                       cwd=REPO, env=env or service_env(QE_SCORER_TOKEN=TOKEN),
                       capture_output=True, text=True, timeout=timeout)
    return p, time.time() - t0


# The train-env tests' service (tests/conftest.py): the tiny checkpoints of tests/fixtures/build_tiny_comet.py
# under the names conf/scorer gives the real ones, so the reward kwargs and evaluation defaults built from
# the real composed config talk to it unchanged.
# service model name -> (tiny checkpoint, scorer kind)
TINY_MODELS = {
    "cometkiwi_da": ("cometkiwi", "cometkiwi"),
    "comet_da": ("comet-da", "comet-da"),
    "xcomet_xl": ("xcomet", "xcomet"),
}
METRICX_MODEL = "metricx24_xl"  # conf/scorer's name for MetricX-24 XL


def write_tiny_config(path: Path, tiny_dir: Path, metricx: bool = False) -> Path:
    """A service config on the tiny models: the three COMET ones, or (metricx) the tiny CometKiwi
    beside the tiny MetricX-24 and its mT5-style tokenizer."""
    from src.scorer.config import ModelSpec, ScorerConfig, dump_config
    from src.tiny_models import metricx as tiny_metricx

    if metricx:
        specs = {"cometkiwi_da": ModelSpec(path=str(tiny_dir / "models" / "cometkiwi"), kind="cometkiwi"),
                 METRICX_MODEL: ModelSpec(path=str(tiny_dir / tiny_metricx.MODEL_DIR), kind="metricx",
                                          tokenizer=str(tiny_dir / tiny_metricx.TOKENIZER_DIR))}
    else:
        specs = {name: ModelSpec(path=str(tiny_dir / "models" / fx), kind=kind)
                 for name, (fx, kind) in TINY_MODELS.items()}
    dump_config(ScorerConfig(models=specs, max_wait_ms=2.0), path)
    return path
