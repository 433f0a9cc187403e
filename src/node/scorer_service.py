"""The node's QE scoring service as a child of the launcher: start, wait, watch, restart, stop.

`scorer(...)` (end of file) is what the runner enters around training on every node;
`ScorerProcess` is the lifecycle, also used by the evaluation CLI (src/evaluate/scorer_service.py).

Train env side (stdlib + src.scorer.config, which is stdlib + PyYAML): the service itself runs in
its own env (`scorer.python`, .venv-scorer) as `python -m src.scorer.serve --config X --ready-file Y`.

- Token: a fresh `secrets.token_urlsafe(32)` per start of a node's service, passed only through the
  environment (QE_SCORER_TOKEN) to the service and to the training processes; never written to a
  file, a command line, a log or the snapshot.
- Ready: the service writes its ready file once every model is loaded and warmed up; then
  /health is asked with the token. A service that exits first, or is not ready within
  scorer.ready_timeout_s, is a one-line ScorerError with the tail of its log. The runner starts training
  while the service loads (`start(wait=False)`, on a port chosen beforehand), except where the service
  shares a training GPU; a start that fails then reaches `on_fatal` with that line.
- Watch: a thread polls the process. If it dies while training runs it is restarted (up to
  scorer.restarts times) on the same port with the same token, so the reward workers' URL and
  token stay valid (their client polls /health for up to scorer.ready_timeout_s, given to it as
  QE_SCORER_READY_TIMEOUT_S, and sends the request again: no sample is lost); one more death calls `on_fatal` (the
  runner then stops training with that message).
- Stop: SIGTERM to the service's process group (it drains queued work), SIGKILL after a grace
  period; the watcher is stopped first so a stop is never mistaken for a death.
Files, per node, in <run dir>/scorer/: node-<rank>.yaml (config, no secret), node-<rank>.ready.json
(the service writes and removes it), node-<rank>.log (its stdout and stderr; appended per start).

scorer.placement=external: a service running on another machine (scorer.url); nothing is started or watched here.
Its bearer token is the user's QE_SCORER_TOKEN, set where the launch runs (a Slurm job inherits it from the
submitting shell), passed on through the environment like a started service's token, never written anywhere.
Before anything starts (a launch, a Slurm sweep before it is submitted, each node where training runs:
`external_problem`) it must answer /health with that token and serve every QE model the reward needs, under the
reward's name, of the config's kind and from the checkpoint the config's path names (XCOMET-XL, not XXL: the
run's identity and name read that path). A service that goes away mid-run is what the reward client handles for a
started one: it polls /health for up to scorer.ready_timeout_s and sends again; a group that still fails is lost,
which the trainer's guard counts against scorer.lost_groups_allowed and then stops the run with one line.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import os
import secrets
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, Optional

from src.config import CODE_ROOT
from src.config.schema import Placement
from src.plan import RunPlan
from src.scorer.config import ModelSpec, ScorerConfig, checkpoint_name, dump_config

from .process_group import stop_group

TOKEN_ENV = "QE_SCORER_TOKEN"
URL_ENV, LOG_ENV = "QE_SCORER_URL", "QE_SCORER_LOG"
READY_TIMEOUT_ENV = "QE_SCORER_READY_TIMEOUT_S"
# a reward call that finds the service down waits this much longer than a restart may take: the
# watcher notices the death within POLL_S and /health is asked after the ready file appears
RESTART_NOTICE_S = 30.0
POLL_S = 0.2
HEALTH_TIMEOUT_S = 10.0
# after SIGTERM the service finishes queued work (its drain_timeout_s, 10 s) before exiting
STOP_GRACE_S = 30.0


class ScorerError(RuntimeError):
    """The service could not start or be restarted: one line naming its log."""


class _Stopping(Exception):
    """stop() was called while a (re)start waited for the service."""


def log_tail(path: Path, lines: int = 3, width: int = 300) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    kept = [l.strip()[:width] for l in text.splitlines() if l.strip() and not l.startswith("--- ")]
    return " | ".join(kept[-lines:])


def service_config(models, device: str, dtype: str, batch_tokens: int, port: int) -> ScorerConfig:
    """The service's config. Absolute paths: the service resolves relative ones against its cwd."""
    specs = {m.name: ModelSpec(path=m.path if m.path.startswith("hf:") else os.path.abspath(m.path), kind=m.kind,
                               encoder=m.encoder, tokenizer=m.tokenizer) for m in models}
    # 127.0.0.1: each node's reward workers use their own node's service
    return ScorerConfig(models=specs, host="127.0.0.1", port=port, device=device, dtype=dtype,
                        batch_tokens=batch_tokens)


class ScorerProcess:
    def __init__(self, plan, folder: Path, name: str, base_env: dict, devices: Optional[str],
                 on_fatal: Callable[[str], None]):
        """`plan`: the RunPlan's ScorerPlan; `name`: e.g. node-0; `devices`: CUDA_VISIBLE_DEVICES of
        the service ("" hides every GPU); `on_fatal(reason)`: the service died for good."""
        self.plan, self.name, self.on_fatal = plan, name, on_fatal
        self.folder = Path(folder)
        self.config_path = self.folder / f"{name}.yaml"
        self.ready_path = self.folder / f"{name}.ready.json"
        self.log_path = self.folder / f"{name}.log"
        self.token = secrets.token_urlsafe(32)
        env = {k: v for k, v in base_env.items() if not k.startswith("QE_SCORER_")}
        env[TOKEN_ENV] = self.token
        if devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = devices
        self.env = env
        self.url: Optional[str] = None
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None
        self.restarts_done = 0
        self._stopping = threading.Event()
        self._watcher: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ public
    def start(self, wait: bool = True, on_ready: Optional[Callable[[], None]] = None) -> dict:
        """Start the service; returns the env for the training processes. `on_ready()` is called once it serves.

        wait: return once it serves (a service that cannot start raises ScorerError here). Otherwise return at
        once, on a port chosen here, so that training starts while the models load (the reward client waits
        for /health up to QE_SCORER_READY_TIMEOUT_S on a refused connection, as after a restart); a service
        that cannot start then calls `on_fatal` with the same line ScorerError would carry."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if wait:
            try:
                self._start_once(port=0, attempt="start")
            except BaseException:
                self._kill()
                raise
            if on_ready is not None:
                on_ready()
            watch = self._watch
        else:
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self._spawn(self.port, attempt="start")
            watch = functools.partial(self._ready_then_watch, on_ready)
        self._watcher = threading.Thread(target=watch, name=f"scorer-watch-{self.name}", daemon=True)
        self._watcher.start()
        return {URL_ENV: self.url, TOKEN_ENV: self.token, LOG_ENV: str(self.log_path),
                READY_TIMEOUT_ENV: f"{self.plan.ready_timeout_s + RESTART_NOTICE_S:g}"}

    def stop(self) -> None:
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(timeout=STOP_GRACE_S + 30)
        self._kill()

    # ------------------------------------------------------------------ internals
    def _command(self) -> list[str]:
        return [self.plan.python, "-m", "src.scorer.serve", "--config", str(self.config_path),
                "--ready-file", str(self.ready_path)]

    def _start_once(self, port: int, attempt: str) -> None:
        self._spawn(port, attempt)
        self._wait_ready(self.proc)

    def _ready_then_watch(self, on_ready: Optional[Callable[[], None]]) -> None:
        """A service started without waiting: its start-up watched here, then the service as ever."""
        try:
            self._wait_ready(self.proc)
        except _Stopping:
            return
        except ScorerError as exc:
            self._kill()
            self.on_fatal(str(exc))
            return
        if on_ready is not None:
            on_ready()
        self._watch()

    def _spawn(self, port: int, attempt: str) -> None:
        dump_config(service_config(self.plan.models, self.plan.device, self.plan.dtype, self.plan.batch_tokens,
                                   port), self.config_path)
        with contextlib.suppress(FileNotFoundError):
            self.ready_path.unlink()
        command = self._command()
        with open(self.log_path, "ab") as log:
            stamp = dt.datetime.now().isoformat(timespec="seconds")
            log.write(f"--- {stamp} {attempt}: {shlex.join(command)} (CUDA_VISIBLE_DEVICES="
                      f"{self.env.get('CUDA_VISIBLE_DEVICES', 'unset')!r})\n".encode())
            log.flush()
            self.proc = subprocess.Popen(command, cwd=CODE_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def _wait_ready(self, proc: subprocess.Popen) -> None:
        deadline = time.monotonic() + self.plan.ready_timeout_s
        while True:
            if self._stopping.is_set():
                raise _Stopping()
            ready = self._read_ready()
            if ready is not None and ready.get("pid") == proc.pid:
                break
            if proc.poll() is not None:
                raise ScorerError(f"QE scorer ({self.name}) exited with code {proc.returncode} before it was ready: "
                                  f"{log_tail(self.log_path, 1) or 'no output'}; log: {self.log_path}")
            if time.monotonic() > deadline:
                self._kill()
                raise ScorerError(f"QE scorer ({self.name}) was not ready after {self.plan.ready_timeout_s:g}s "
                                  f"(scorer.ready_timeout_s); last log lines: {log_tail(self.log_path) or 'none'}; "
                                  f"log: {self.log_path}")
            time.sleep(POLL_S)
        url = ready["url"]
        self._check_health(url)
        self.url, self.port = url, int(url.rsplit(":", 1)[1])

    def _read_ready(self) -> Optional[dict]:
        try:
            return json.loads(self.ready_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def _check_health(self, url: str) -> None:
        try:
            health = read_health(url, self.token)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self._kill()
            raise ScorerError(f"QE scorer ({self.name}) wrote its ready file but {url}/health failed: {exc}; "
                              f"log: {self.log_path}") from None
        if health.get("status") != "ok":
            self._kill()
            raise ScorerError(f"QE scorer ({self.name}) at {url} reports status {health.get('status')!r}; "
                              f"log: {self.log_path}")

    def _watch(self) -> None:
        while not self._stopping.wait(POLL_S):
            proc = self.proc
            if proc is None or proc.poll() is None:
                continue
            code = proc.returncode
            # what the dead service started (its helpers) stays in its process group: stop it before a
            # new service takes the port, or it outlives the run
            stop_group(proc, 0.0)
            if self.restarts_done >= self.plan.restarts:
                self.on_fatal(f"QE scorer ({self.name}) died during training (exit code {code}) after "
                              f"{self.restarts_done} restart(s); training stopped; last log lines: "
                              f"{log_tail(self.log_path) or 'none'}; log: {self.log_path}")
                return
            self.restarts_done += 1
            print(f"warning: QE scorer ({self.name}) exited with code {code} during training; restarting it "
                  f"({self.restarts_done} of {self.plan.restarts}) on {self.url}; log: {self.log_path}",
                  file=sys.stderr, flush=True)
            try:
                self._start_once(port=self.port, attempt=f"restart {self.restarts_done} after exit code {code}")
            except _Stopping:
                return
            except ScorerError as exc:
                self.on_fatal(f"QE scorer ({self.name}) died during training (exit code {code}) and could not be "
                              f"restarted: {exc}")
                return
            print(f"QE scorer ({self.name}) restarted on {self.url}", file=sys.stderr, flush=True)

    def _kill(self) -> None:
        """SIGTERM the service's process group, SIGKILL it after STOP_GRACE_S."""
        if self.proc is not None:
            stop_group(self.proc, STOP_GRACE_S)


def read_health(url: str, token: str, timeout_s: float = HEALTH_TIMEOUT_S) -> dict:
    """GET <url>/health with the bearer token: the service's JSON answer. Raises urllib's HTTPError (a status),
    URLError or OSError (no answer) or ValueError (not JSON): each caller words its own line."""
    req = urllib.request.Request(f"{url.rstrip('/')}/health", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def external_problem(plan_scorer, environ: dict) -> Optional[str]:
    """Why training cannot use the external service of `plan_scorer` (placement external), one line; None when it
    answers /health with the environment's token and serves every model the reward needs."""
    token = environ.get(TOKEN_ENV)
    if not token:
        return (f"scorer.placement=external needs the service's bearer token in the environment variable {TOKEN_ENV} "
                f"(the token the service was started with), set where you launch")
    url = plan_scorer.url
    try:
        health = read_health(url, token)
    except urllib.error.HTTPError as exc:
        hint = f" ({TOKEN_ENV} is not the service's token)" if exc.code == 401 else ""
        return f"QE scorer at {url} (scorer.url) answered /health with HTTP {exc.code}{hint}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"QE scorer at {url} (scorer.url) is not reachable: {getattr(exc, 'reason', exc)}"
    if not health.get("ready", False):
        return f"QE scorer at {url} (scorer.url) is not ready (status {health.get('status')!r})"
    served = health.get("models") or {}
    for m in plan_scorer.models:
        if m.name not in served:
            return (f"QE scorer at {url} (scorer.url) does not serve {m.name}, which the reward needs (it serves: "
                    f"{', '.join(served) or 'nothing'}): start it with that model, or pick a reward whose models "
                    f"it serves")
        kind = served[m.name].get("kind")
        if kind != m.kind:
            return (f"QE scorer at {url} (scorer.url) serves {m.name} as a {kind} model, but "
                    f"scorer.models.{m.name}.kind is {m.kind}: not the metric this run's reward is made for")
        # the checkpoint (XCOMET-XL, not XXL): the run's identity and name read scorer.models.<name>.path
        theirs, ours = served[m.name].get("checkpoint"), checkpoint_name(m.path)
        if theirs is None:
            return (f"QE scorer at {url} (scorer.url) does not say which checkpoint it serves {m.name} from (a "
                    f"service older than this launcher: start it from this checkout)")
        if theirs != ours:
            return (f"QE scorer at {url} (scorer.url) serves {m.name} from checkpoint {theirs}, but "
                    f"scorer.models.{m.name}.path names {ours}: set the path to the service's checkpoint "
                    f"(it names the run and its identity; the file need not exist here)")
    return None


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the kernel's pick for port 0), for a service whose URL training needs
    before the service is up. Should another process take it first, the service exits, is restarted on it once
    (scorer.restarts) and then stops the run with its log's line."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def scorer(plan: RunPlan, node_rank: int, run_dir: Path, environ: dict, scorer_devices: str | None,
           on_fatal: Callable[[str], None], enabled: bool = True,
           on_ready: Optional[Callable[[], None]] = None) -> Iterator[dict]:
    """This node's QE scoring service (src/scorer in .venv-scorer) for as long as the block runs.

    Yields QE_SCORER_URL / QE_SCORER_TOKEN / QE_SCORER_LOG for the processes started after it: on a
    single node verl (whose Ray workers inherit them), on a multi-node job this node's `ray start`,
    whose workers (the reward workers of this node) inherit them, so each node's reward workers use
    their own node's service on 127.0.0.1. Nothing is started when the reward needs no QE model or
    `enabled` is false (debug.skip_scorer). `on_fatal(reason)`: the service could not start, or died for
    good, during training. `on_ready()`: it serves."""
    if plan.scorer is None or not enabled:
        yield {}
        return
    if plan.scorer.placement == Placement.external:
        # nothing to start: preflight.check_scorer asked the service on this node before (external_problem)
        print(f"QE scorer (node {node_rank}): the external service at {plan.scorer.url} "
              f"({', '.join(m.name for m in plan.scorer.models)})", flush=True)
        if on_ready is not None:
            on_ready()
        yield {URL_ENV: plan.scorer.url, TOKEN_ENV: environ[TOKEN_ENV]}
        return
    service = ScorerProcess(plan.scorer, Path(run_dir) / "scorer", f"node-{node_rank}", environ, scorer_devices,
                            on_fatal)

    def ready() -> None:
        print(f"QE scorer (node {node_rank}) ready at {service.url} "
              f"({', '.join(m.name for m in plan.scorer.models)}; {plan.scorer.placement}); log: {service.log_path}",
              flush=True)
        if on_ready is not None:
            on_ready()

    # Training starts while the models load (on a GPU node XCOMET-XL's 6.5 GiB take tens of seconds), except
    # where the service shares a training GPU: vLLM sizes its KV cache from the memory it sees free when it
    # starts (vllm/v1/worker/gpu_worker.py determine_available_memory), so the scorer must hold its share first.
    wait = plan.scorer.placement == Placement.shared
    try:
        env = service.start(wait=wait, on_ready=ready)
        if not wait:
            print(f"QE scorer (node {node_rank}) starting at {service.url} beside training; log: {service.log_path}",
                  flush=True)
        yield env
    finally:
        service.stop()
