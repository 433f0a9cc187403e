"""Entry point: python -m src.scorer.serve --config PATH [--ready-file PATH] [--host H] [--port P]

Start-up order is chosen so that every mistake fails fast with one line on stderr (exit 2):
token, config, model paths (before the slow torch/comet import), port, then model loading.
Once all models are loaded and warmed up, the ready file is written atomically and one line
`scorer ready url=http://HOST:PORT` goes to stdout. SIGTERM/SIGINT: stop accepting, finish
queued work (drain_timeout_s), exit 0.

The bearer token comes only from the environment variable QE_SCORER_TOKEN; it is removed
from this process's environment once read and is never logged.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import signal
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Optional, Tuple

from .backends import backend_for
from .backends.interface import StartupError
from .config import ConfigError, ScorerConfig, load_config

TOKEN_ENV = "QE_SCORER_TOKEN"
LISTEN_BACKLOG = 1024
# Open files wanted: every connection is one (stalled ones too, until read_timeout_s cuts them),
# plus the models' files, torch's and the tokenizers'. A soft limit of 1024 (a common default)
# would refuse connections at about a thousand clients; the hard limit is the user's to raise.
FD_WANTED = 65536
log = logging.getLogger("scorer")


class _Stop(BaseException):
    """SIGTERM before the event loop runs (e.g. while models load)."""


def _fail(msg: str) -> int:
    print(f"scorer: error: {msg}", file=sys.stderr, flush=True)
    return 2


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m src.scorer.serve",
                                description="QE scoring service (the models of src/scorer/backends over HTTP). "
                                            f"The bearer token is read from ${TOKEN_ENV}.")
    p.add_argument("--config", required=True, help="scorer YAML config (see docs/scorer-api.md)")
    p.add_argument("--ready-file", help="written atomically once serving: {url, pid, models}")
    p.add_argument("--host", help="override config host")
    p.add_argument("--port", type=int, help="override config port (0 = any free port)")
    return p.parse_args(argv)


def _offline_env() -> None:
    # Must happen before transformers is imported anywhere in this process.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _setup_logging() -> None:
    # comet calls logging.basicConfig(INFO) at import; configuring first keeps our format.
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s scorer %(levelname)s %(message)s")
    for noisy in ("comet", "pytorch_lightning", "lightning", "lightning_fabric", "transformers",
                  "aiohttp.access", "jieba"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def raise_fd_limit(wanted: int = FD_WANTED) -> Tuple[int, int]:
    """Raises this process's soft RLIMIT_NOFILE towards `wanted`, never above the hard limit
    (which an unprivileged process cannot raise). -> (soft, hard) now in effect."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # keep the old limit; serve() logs the one in effect
    return soft, hard


def bind_socket(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, stype, proto, _, addr = infos[0]
    sock = socket.socket(family, stype, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError:
        sock.close()
        raise
    return sock


def url_for(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    shown = socket.getfqdn() if host in ("0.0.0.0", "::", "") else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def write_ready_file(path: str, payload: Dict) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def remove_ready_file(path: Optional[str]) -> None:
    """Only our own: a newer service may already have replaced it."""
    if not path:
        return
    try:
        if json.loads(Path(path).read_text()).get("pid") == os.getpid():
            os.unlink(path)
    except (OSError, ValueError):
        pass


def inference_threads(cfg: ScorerConfig) -> int:
    """Batches computed at once: the config's, or 1 on a GPU (one device, and the memory plan
    sizes one batch of activations), 2 on a CPU with at least 2 cores."""
    if cfg.inference_threads:
        return cfg.inference_threads
    if cfg.device.startswith("cuda"):
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 2 if (cores or 1) >= 2 else 1


def resolve_models(cfg: ScorerConfig) -> Dict[str, object]:
    """Each model's files, found by its backend before torch is imported (StartupError: one line)."""
    return {name: backend_for(spec.kind).resolve(name, spec) for name, spec in cfg.models.items()}


def load_runners(cfg: ScorerConfig, files: Dict[str, object]):
    import torch

    threads = inference_threads(cfg)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    elif not cfg.device.startswith("cuda") and threads > 1:
        # CPU: the inference threads share the cores (2 single-threaded forwards beat one
        # forward on 2 threads for batches of this size: benches/RESULTS.md "Scorer")
        torch.set_num_threads(max(1, torch.get_num_threads() // threads))
    if cfg.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise StartupError(f"device {cfg.device} requested but torch sees no CUDA device "
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    runners = {}
    for name, spec in cfg.models.items():
        runner = backend_for(spec.kind).load(name, spec, files[name], cfg.device, cfg.dtype)
        try:
            runner.warm_up()
        except Exception as e:
            raise StartupError(f"model {name!r}: warm-up batch failed on {cfg.device}/"
                               f"{cfg.dtype}: {type(e).__name__}: {e}") from None
        log.info("model %s loaded: %s (%s) on %s/%s", name, runner.info.model_class,
                 files[name], cfg.device, cfg.dtype)
        runners[name] = runner
    return runners


def _peak_gpu_fn(device: str):
    if not device.startswith("cuda"):
        return lambda: None
    import torch

    return lambda: int(torch.cuda.max_memory_allocated(torch.device(device)))


async def serve(cfg: ScorerConfig, token: bytes, runners, sock: socket.socket,
                ready_file: Optional[str]) -> None:
    from aiohttp import web

    from .batching import Batcher
    from .http_api import MalformedHttpLog, ServiceState, create_app
    from .metrics import Metrics

    logging.getLogger("aiohttp.server").addFilter(MalformedHttpLog())
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # Inference threads shared by all models; the event loop stays free for HTTP and batching.
    # GPU: one (the models share the device, the memory plan sizes one batch), plus a thread
    # that tokenises and collates the next batch on the CPU while the GPU computes. CPU: two
    # threads that each prepare and compute their own batch, so one's tokenisation overlaps
    # the other's forward (a separate preparation thread measured slower there).
    threads = inference_threads(cfg)
    executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="scorer-infer")
    prep = (ThreadPoolExecutor(max_workers=1, thread_name_prefix="scorer-prep")
            if cfg.device.startswith("cuda") else None)
    metrics = Metrics()
    batcher = Batcher(runners, executor, metrics, cfg.batch_tokens, cfg.max_batch_items,
                      cfg.max_wait_ms, cfg.max_queue, concurrency=threads, prep_executor=prep)
    batcher.start()
    measuring = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scorer-measure")
    state = ServiceState(token=token, cfg=cfg, runners=runners, batcher=batcher, metrics=metrics,
                         peak_gpu_bytes=_peak_gpu_fn(cfg.device), measure_executor=measuring)
    # handler_cancellation: a client that hangs up cancels its request, and the batcher then
    # drops that request's queued items instead of computing them for nobody.
    # keepalive_timeout: aiohttp closes a connection whose next request's headers have not
    # arrived this long after it opened or after its previous answer (web_protocol.py
    # RequestHandler.connection_made / _process_keepalive); AppRunner's default is 3630 s, so a
    # client that sends half a header would hold its socket for an hour. The body's half of
    # read_timeout_s is in http_api.read_body.
    app_runner = web.AppRunner(create_app(state), access_log=None, handle_signals=False,
                               handler_cancellation=True, keepalive_timeout=cfg.read_timeout_s)
    await app_runner.setup()
    # backlog: a burst of connections (every reward worker opening its pool at once) waits in the
    # kernel's queue instead of being dropped and retried a second later (aiohttp's default 128;
    # the kernel caps it at net.core.somaxconn)
    site = web.SockSite(app_runner, sock, shutdown_timeout=cfg.drain_timeout_s + 5.0,
                        backlog=LISTEN_BACKLOG)
    await site.start()
    url = url_for(sock, cfg.host)
    if ready_file:
        write_ready_file(ready_file, {"url": url, "pid": os.getpid(), "models": list(runners),
                                      "device": cfg.device, "dtype": cfg.dtype})
    print(f"scorer ready url={url}", flush=True)
    log.info("serving %s on %s", ", ".join(runners), url)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    log.info("open files limit %s (hard %s): about as many connections at once", soft, hard)
    try:
        await stop.wait()
    finally:
        log.info("shutting down: draining %d queued items", batcher.depth)
        state.draining = True
        remove_ready_file(ready_file)
        await batcher.drain(cfg.drain_timeout_s)
        await app_runner.cleanup()
        executor.shutdown(wait=True, cancel_futures=True)
        measuring.shutdown(wait=True, cancel_futures=True)
        if prep is not None:
            prep.shutdown(wait=True, cancel_futures=True)
        log.info("stopped")


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # First thing: huggingface_hub (used to resolve hf: paths below) reads it at import time.
    _offline_env()
    token = os.environ.pop(TOKEN_ENV, "")
    if not token.strip():
        return _fail(f"${TOKEN_ENV} is not set: the bearer token must come from the environment; "
                     f"refusing to start")
    try:
        cfg = load_config(args.config)
        if args.host is not None:
            cfg.host = args.host
        if args.port is not None:
            if not 0 <= args.port <= 65535:
                raise ConfigError(f"--port must be in [0, 65535], got {args.port}")
            cfg.port = args.port
        files = resolve_models(cfg)
    except (ConfigError, StartupError) as e:
        return _fail(str(e))

    _setup_logging()
    # Before the models load (their files count too); logged once serving, as a start-up
    # failure must stay one line on stderr.
    raise_fd_limit()

    def _on_term(signum, frame):
        raise _Stop()

    signal.signal(signal.SIGTERM, _on_term)
    try:
        try:
            sock = bind_socket(cfg.host, cfg.port)
        except OSError as e:
            return _fail(f"cannot listen on {cfg.host}:{cfg.port}: {e.strerror or e}")
        try:
            runners = load_runners(cfg, files)
        except StartupError as e:
            sock.close()
            return _fail(str(e))
        asyncio.run(serve(cfg, token.strip().encode("utf-8"), runners, sock, args.ready_file))
    except (_Stop, KeyboardInterrupt):
        log.info("stopped before serving")
    return 0


if __name__ == "__main__":
    sys.exit(main())
