#!/usr/bin/env python
"""Scorer benchmark: rollout-like load against the QE service versus comet.predict.

Run in the scorer env:
    .venv-scorer/bin/python benches/scorer.py                 # CPU, tiny xcomet-small (2.5M parameters)
    .venv-scorer/bin/python benches/scorer.py --help

Same model, same items, three ways:
  (a) the service (python -m src.scorer.serve, own process): C concurrent clients each sending
      one item per request and waiting for the answer, as verl's reward workers do;
  (b) one comet `model.predict([item])` per request, sequentially (what a per-sample reward
      function does); timed on the first --b-items items because it is slow;
  (c) one offline comet `model.predict(all items)` (length-sorted by predict itself): the best case.
The three run back to back in each of --rounds rounds and each path reports its best round:
on a shared machine other jobs swing single measurements several-fold, and they slow predict()
more than the service, so loaded rounds would flatter the service. The final ratios compare
best rounds; the per-round ratios are printed too.
Checks that (a) returns the scores (c) computes, prints the service's batch-size and
padding-waste distributions and tail_s (below), and ends with `ratio a/b=<x> a/c=<y>`.

VERL LOAD (--load verl): verl's real reward load instead of --clients x 1: --workers client
processes (verl reward.num_workers), one rollout of P x n trajectories (conf/config.yaml) in
flight at once, each its own request, arriving in response-length order over --rollout-s (see
make_rollout for the length stand-in). Each client process keeps one aiohttp session across
rounds with the reward client's connection limit (conf/reward_base/default.yaml
client.max_connections), as src/rewards/client.py does in a reward worker. Reports per round
items/s, request p50/p99, tail_s (last answer - last request: what a training step waits
for), the service's batch-size and padding-waste distributions, and ends with
`verl-load a/b=<x> a/c=<y> mean_batch=<z> tail_s=<t>`; exit 1 if a score differs from (c) by
more than 1e-5.

GPU (--device cuda --dtype bf16): same protocol. `--model xcomet-xl` is XCOMET-XL's real shape
(XLM-R XL encoder: 36 layers, hidden 2560, FFN 10240, 32 heads, 3.5B parameters; random weights,
built on the GPU and saved once under --build-dir) with the tiny fixture's tokenizer; `--peak-tflops`
(the card's dense bf16 rate) adds the model FLOP utilisation of (a): useful FLOPs (each item's
unpadded tokens through the encoder, 2 x non-embedding parameters per token plus attention's
4 x tokens x hidden per layer per token) over the round's wall time. benches/gpu/README.md.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

TOKEN = "bench-token"
# verl 0.9.1 verl/trainer/config/reward/reward.yaml: `num_workers: 8` reward-loop workers.
VERL_REWARD_WORKERS = 8
CPU_BATCH_TOKENS = 1024  # verl-load on CPU, see main_verl


def parse_args():
    p = argparse.ArgumentParser(description="QE scorer service vs comet.predict")
    p.add_argument("--model", default="xcomet-small",
                   help="tiny fixture model (xcomet-small, xcomet, comet-da, cometkiwi, ...)")
    p.add_argument("--items", type=int, default=480, help="items scored by (a) and (c) per round")
    p.add_argument("--b-items", type=int, default=96, help="items (b) scores per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--with-ref", action="store_true", help="score with references (xcomet: 3 passes)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None, help="default fp32 on cpu, bf16 on cuda")
    p.add_argument("--offline-batch-size", type=int, default=32, help="batch size of (c)")
    p.add_argument("--max-wait-ms", type=float, default=None, help="service max_wait_ms")
    p.add_argument("--batch-tokens", type=int, default=None, help="service batch_tokens")
    p.add_argument("--torch-threads", type=int, default=0,
                   help="service torch threads per inference thread (0 = the service's default)")
    p.add_argument("--inference-threads", type=int, default=0,
                   help="service inference_threads (0 = the service's default: 2 on a CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--load", choices=("clients", "verl"), default="clients",
                   help="clients: --clients x 1 item/request (worst case, the default); verl: "
                        "verl's streaming reward load, see VERL LOAD below")
    p.add_argument("--workers", type=int, default=VERL_REWARD_WORKERS,
                   help="verl-load: reward-loop worker processes (verl reward.num_workers)")
    p.add_argument("--trajectories", type=int, default=None,
                   help="verl-load: trajectories per rollout (default P x n of conf/config.yaml)")
    p.add_argument("--rollout-s", type=float, default=1.0,
                   help="verl-load: seconds from the shortest to the longest response finishing")
    p.add_argument("--build-dir", type=Path, default=REPO / ".cache" / "bench-models",
                   help="where --model xcomet-xl's random-weight checkpoint is written (once)")
    p.add_argument("--dry-run", action="store_true",
                   help="check the arguments and build the tiny fixtures, then stop before the first call to "
                        "--device (benches/gpu/check.py runs this on CPU in the tests)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="dense bf16 peak of the card, TFLOP/s: report (a)'s model FLOP utilisation")
    return p.parse_args()


# --model names with a real encoder shape: benches/memory.py SCORERS entry
REAL_SHAPES = {"xcomet-xl": "xcomet_xl", "xcomet-xxl": "xcomet_xxl", "cometkiwi-xl": "cometkiwi_xl"}


def build_real_shape(name: str, out: Path, device: str) -> tuple[Path, Path]:
    """(checkpoint, encoder dir) of a random-weight model of a real checkpoint's shape, built once.

    Weights are drawn on `device` (a 3.5B model initialised on a CPU takes minutes) and saved in
    bf16; comet's load_from_checkpoint copies them into its fp32 model as for a real checkpoint.
    Random weights cost the time and memory of real ones; the scores mean nothing."""
    import importlib.util

    import torch
    import comet.models as cm
    from src.tiny_models.qe import save_checkpoint

    spec = importlib.util.spec_from_file_location("bench_memory", REPO / "benches" / "memory.py")
    memory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(memory)
    cls_name, encoder, kw = memory.SCORERS[REAL_SHAPES[name]]
    model_dir = out / name
    ckpt = model_dir / "checkpoints" / "model.ckpt"
    if ckpt.exists():
        return ckpt, model_dir / "encoder" / encoder
    tmp = out / f".{name}.tmp"
    if tmp.exists():
        import shutil
        shutil.rmtree(tmp)
    (tmp / "encoder").mkdir(parents=True)
    enc = Path(memory._encoder_dir(tmp / "encoder", encoder))
    torch.manual_seed(0)
    with torch.device(device):
        model = memory._comet_model(cm, cls_name, str(enc), kw)
    if getattr(model, "word_level", False):
        # as the tiny fixtures: random tag heads mostly say "O"; lean towards errors so spans get decoded
        with torch.no_grad():
            bias = [0.0, 0.6, 0.3, 0.1][: model.hidden2tag.bias.numel()]
            model.hidden2tag.bias.copy_(torch.tensor(bias))
    model.to(device="cpu", dtype=torch.bfloat16)  # saved as a CPU checkpoint, as real ones are
    final_enc = model_dir / "encoder" / encoder
    save_checkpoint(model, tmp, final_enc)
    del model
    tmp.rename(model_dir)
    return ckpt, final_enc


def useful_flops(items, encoder_dir: Path, ckpt: Path) -> float:
    """FLOPs of one forward over `items`' unpadded QE inputs (mt + src, one pass as XCOMET and
    CometKiwi score without a reference): per token 2 x the encoder's non-embedding parameters,
    plus attention's scores and weighted sum, 4 x tokens x hidden per layer."""
    import yaml
    from transformers import AutoConfig, AutoTokenizer

    cfg = AutoConfig.from_pretrained(str(encoder_dir))
    d, layers, ffn = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size
    per_layer = 4 * d * d + 2 * d * ffn  # q, k, v, o + the two FFN matrices (biases and norms: <0.1%)
    tok = AutoTokenizer.from_pretrained(str(encoder_dir))
    total = 0.0
    for it in items:
        n = len(tok(it["mt"]).input_ids) + len(tok(it["src"]).input_ids)
        total += 2 * n * per_layer * layers + 4 * n * n * d * layers
    return total


def make_items(corpus: Path, n: int, with_ref: bool, seed: int):
    """Random lengths: 1 to 4 corpus sentences per segment (about 6 to 120 subwords)."""
    rng = random.Random(seed)
    lines = corpus.read_text(encoding="utf-8").splitlines()

    def seg():
        return " ".join(rng.choice(lines) for _ in range(rng.randint(1, 4)))

    items = []
    for _ in range(n):
        it = {"src": seg(), "mt": seg()}
        if with_ref:
            it["ref"] = seg()
        items.append(it)
    return items


# ----------------------------------------------------------------------------------------------
# (a) the service
# ----------------------------------------------------------------------------------------------
def start_service(ckpt: Path, kind: str, args, tmp: Path):
    from src.scorer.config import ModelSpec, ScorerConfig, dump_config

    cfg = ScorerConfig(models={"m": ModelSpec(path=str(ckpt), kind=kind)}, device=args.device,
                       dtype=args.dtype, torch_threads=args.torch_threads,
                       inference_threads=args.inference_threads)
    if args.max_wait_ms is not None:
        cfg.max_wait_ms = args.max_wait_ms
    if args.batch_tokens is not None:
        cfg.batch_tokens = args.batch_tokens
    dump_config(cfg, tmp / "scorer.yaml")
    ready = tmp / "ready.json"
    proc = subprocess.Popen([sys.executable, "-m", "src.scorer.serve", "--config",
                             str(tmp / "scorer.yaml"), "--ready-file", str(ready)], cwd=REPO,
                            env=dict(os.environ, QE_SCORER_TOKEN=TOKEN),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while not ready.exists():
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit(f"service did not start (exit {proc.poll()})")
        time.sleep(0.2)
    return proc, json.loads(ready.read_text())["url"]


async def run_clients(url: str, items, clients: int):
    import aiohttp

    results = [None] * len(items)
    next_idx = iter(range(len(items)))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    sent, answered = [], []

    async def client(session):
        for i in next_idx:  # shared iterator: each client takes the next item when it is free
            sent.append(time.perf_counter())
            async with session.post(f"{url}/score", json={"model": "m", "items": [items[i]]},
                                    headers=headers) as r:
                body = await r.json()
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {body}")
                results[i] = body["results"][0]["score"]
            answered.append(time.perf_counter())

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        elapsed = time.perf_counter() - t0
    return results, elapsed, max(answered) - max(sent)


async def get_json(url: str):
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.get(url, headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            return await r.json()


# ----------------------------------------------------------------------------------------------
# verl load
# ----------------------------------------------------------------------------------------------
def rollout_size(args) -> int:
    """P x n of the shipped preset (conf/config.yaml batch.prompts_per_step x samples_per_prompt)."""
    if args.trajectories:
        return args.trajectories
    import yaml

    batch = yaml.safe_load((REPO / "conf" / "config.yaml").read_text(encoding="utf-8"))["batch"]
    return int(batch["prompts_per_step"]) * int(batch["samples_per_prompt"])


def make_rollout(corpus: Path, n: int, rollout_s: float, workers: int, seed: int):
    """n zh->en trajectories: (item, arrival offset in s, worker).

    Lengths are a stand-in, not measured (the prepared WMT data is not on this machine): the
    English side is log-normal with a median of 25 words and sigma 0.5, clipped to 3..120 words,
    the shape of WMT news test sets (sentence means of ~20-30 words, long right tail); the
    Chinese source has ~1.5 characters per English word with +-20% noise. vLLM decodes a
    rollout's sequences together, so each finishes at a time proportional to its response
    length: arrivals come in length order over `rollout_s`. Each finished trajectory goes to a
    random reward-loop worker, as verl 0.9.1 verl/experimental/agent_loop/agent_loop.py
    AgentLoopWorker._compute_score does (random.choice over reward_loop_worker_handles).
    """
    rng = random.Random(seed)
    lines = corpus.read_text(encoding="utf-8").splitlines()
    en = [w for ln in lines if ln.isascii() for w in ln.rstrip(".").split()]
    zh = [c for ln in lines if not ln.isascii() and not any(c == " " for c in ln)
          for c in ln.rstrip("。")]
    lens = [min(120, max(3, round(rng.lognormvariate(math.log(25), 0.5)))) for _ in range(n)]
    lo, hi = min(lens), max(lens)
    out = []
    for k in lens:
        k_src = max(2, round(1.5 * k * rng.uniform(0.8, 1.2)))
        item = {"src": "".join(rng.choice(zh) for _ in range(k_src)) + "。",
                "mt": " ".join(rng.choice(en) for _ in range(k)) + "."}
        offset = rollout_s * (k - lo) / (hi - lo) if hi > lo else 0.0
        out.append((item, offset, rng.randrange(workers)))
    return out


def client_max_connections() -> int:
    """The reward client's connection pool per worker (conf/reward_base/default.yaml client)."""
    import yaml

    path = REPO / "conf" / "reward_base" / "default.yaml"
    return int(yaml.safe_load(path.read_text(encoding="utf-8"))["client"]["max_connections"])


_WORKER: dict = {}  # per client process: its event loop and aiohttp session, kept across rounds


def verl_worker(url: str, jobs, t_start: float, max_connections: int):
    """One reward-loop worker: every trajectory is its own request, all in flight at once on one
    event loop (verl's RewardLoopWorker serves concurrent compute_score calls). Runs in its own
    process and keeps one aiohttp session (a pool of `max_connections` keep-alive connections)
    across rounds, as src/rewards/client.py does per worker process; returns (index, score,
    sent, answered) per trajectory, wall-clock times."""
    import aiohttp

    if "loop" not in _WORKER:
        _WORKER["loop"] = asyncio.new_event_loop()
    loop = _WORKER["loop"]
    asyncio.set_event_loop(loop)

    async def one(session, idx, item, offset):
        await asyncio.sleep(max(0.0, t_start + offset - time.time()))
        sent = time.time()
        async with session.post(f"{url}/score", json={"model": "m", "items": [item]},
                                headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            body = await r.json()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {body}")
        return idx, body["results"][0]["score"], sent, time.time()

    async def run():
        if _WORKER.get("url") != url:
            _WORKER["url"] = url
            _WORKER["session"] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=max_connections))
        session = _WORKER["session"]
        return await asyncio.gather(*(one(session, *j) for j in jobs))

    return loop.run_until_complete(run())


def run_verl_round(pool, url: str, rollout, workers: int):
    t_start = time.time() + 0.3  # every worker process is waiting before the first arrival
    per_worker = [[] for _ in range(workers)]
    for i, (item, offset, w) in enumerate(rollout):
        per_worker[w].append((i, item, offset))
    conns = client_max_connections()
    done = pool.starmap(verl_worker, [(url, jobs, t_start, conns) for jobs in per_worker])
    rows = sorted(r for chunk in done for r in chunk)
    scores = [r[1] for r in rows]
    sent = [r[2] for r in rows]
    answered = [r[3] for r in rows]
    latency = sorted(a - s for s, a in zip(sent, answered))
    span = max(answered) - min(sent)
    return {"scores": scores, "items_s": len(rows) / span, "span": span,
            "tail_s": max(answered) - max(sent),
            "p50": latency[len(latency) // 2], "p99": latency[min(len(latency) - 1, round(0.99 * (len(latency) - 1)))]}


def dist(d) -> str:
    return f"p50 {d['p50']:.2f} p90 {d['p90']:.2f} p99 {d['p99']:.2f} max {d['max']:.2f}"


def main_verl(args, ckpt: Path, kind: str, corpus: Path) -> int:
    import multiprocessing as mp

    import torch

    if args.batch_tokens is None and args.device == "cpu":
        # Tuned on a 2-core CPU (this rollout's items, length-sorted, cut by token budget,
        # straight through ModelRunner.run on 2 threads of 1 core each, as the service runs
        # them): budget 512 -> 361 items/s, 1024 -> 415, 2048 -> 394, 4096 -> 345; one thread
        # of 2 cores: 373 items/s at 8-16 items, 79 at 128. The service's 16384 default is sized
        # for a GPU, where a batch of 16 would leave it idle; on CPU it lets batches reach ~190
        # items. Pass --batch-tokens to override.
        args.batch_tokens = CPU_BATCH_TOKENS
    n = rollout_size(args)
    rollout = make_rollout(corpus, n, args.rollout_s, args.workers, args.seed)
    items = [it for it, _, _ in rollout]
    warm = make_rollout(corpus, n, args.rollout_s, args.workers, args.seed + 1)
    b_items = items[: args.b_items]
    flops = useful_flops(items, args.encoder_dir, ckpt) if args.peak_tflops else None
    print(json.dumps({"load": "verl", "model": args.model, "trajectories": n,
                      "workers": args.workers, "rollout_s": args.rollout_s,
                      "b_items": len(b_items), "rounds": args.rounds, "device": args.device,
                      "dtype": args.dtype, "torch_threads": torch.get_num_threads(),
                      "service_batch_tokens": args.batch_tokens,
                      "service_inference_threads": args.inference_threads or "auto",
                      "client_max_connections": client_max_connections(),
                      "cpus": os.cpu_count(),
                      "loadavg_start": [round(x, 2) for x in os.getloadavg()]}))
    rounds = []
    with tempfile.TemporaryDirectory() as tmp, \
            mp.get_context("spawn").Pool(args.workers) as pool:
        proc, url = start_service(ckpt, kind, args, Path(tmp))
        try:
            model = load_reference_model(ckpt, args)
            run_verl_round(pool, url, warm, args.workers)  # warm-up all three paths
            time_per_request(model, items[:2], args)
            time_offline(model, [it for it, _, _ in warm], args)
            before = asyncio.run(get_json(url + "/metrics"))
            for r in range(args.rounds):
                a = run_verl_round(pool, url, rollout, args.workers)
                c_scores, tc = time_offline(model, items, args)
                tb = time_per_request(model, b_items, args)
                a.update(b=len(b_items) / tb, c=len(items) / tc,
                         diff=max(abs(x - y) for x, y in zip(a["scores"], c_scores)),
                         load=os.getloadavg()[0])
                rounds.append(a)
                print(f"round {r + 1}: a {a['items_s']:.1f}  b {a['b']:.1f}  c {a['c']:.1f} "
                      f"items/s  a/b {a['items_s'] / a['b']:.2f}  a/c {a['items_s'] / a['c']:.2f}"
                      f"  p50 {a['p50'] * 1e3:.0f} ms  p99 {a['p99'] * 1e3:.0f} ms  "
                      f"tail_s {a['tail_s']:.3f}  max|a-c| {a['diff']:.1e}  "
                      f"loadavg {a['load']:.2f}", flush=True)
            metrics = asyncio.run(get_json(url + "/metrics"))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    batches = metrics["batches"] - before["batches"]
    mean_batch = (n * args.rounds) / batches
    best_a = max(rounds, key=lambda x: x["items_s"])
    a, b, c = best_a["items_s"], max(x["b"] for x in rounds), max(x["c"] for x in rounds)
    print(f"best rounds: (a) service, verl load ({args.workers} workers, {n} trajectories, "
          f"1 item/request): {a:8.1f} items/s  (request p50 {best_a['p50'] * 1e3:.0f} ms, "
          f"p99 {best_a['p99'] * 1e3:.0f} ms, tail_s {best_a['tail_s']:.3f})")
    print(f"             (b) comet.predict per request:              {b:8.1f} items/s")
    print(f"             (c) comet.predict offline, batch {args.offline_batch_size}:         {c:8.1f} items/s")
    print(f"service batches (all rounds, last {metrics['batch_size']['n']} batches incl. warm-up): "
          f"size {dist(metrics['batch_size'])}; padding waste {dist(metrics['padding_waste'])}")
    diff = max(x["diff"] for x in rounds)
    print(f"max |score(a) - score(c)| = {diff:.2e}; "
          f"loadavg end {[round(x, 2) for x in os.getloadavg()]}")
    if diff > 1e-5:
        print(f"FAIL: service scores differ from offline predict by {diff:.2e} > 1e-5")
        return 1
    if flops:
        mfu = flops / best_a["span"] / (args.peak_tflops * 1e12)
        c_mfu = flops / (n / c) / (args.peak_tflops * 1e12)
        print(f"useful FLOPs per rollout {flops / 1e12:.2f} TFLOP; (a) {flops / best_a['span'] / 1e12:.1f} TFLOP/s "
              f"= MFU {100 * mfu:.1f}% of {args.peak_tflops:.0f}; (c) MFU {100 * c_mfu:.1f}%")
    print(f"verl-load a/b={a / b:.2f} a/c={a / c:.2f} mean_batch={mean_batch:.1f} "
          f"tail_s={best_a['tail_s']:.3f}")
    return 0


# ----------------------------------------------------------------------------------------------
# (b), (c) comet.predict
# ----------------------------------------------------------------------------------------------
def load_reference_model(ckpt: Path, args):
    import torch
    from comet import load_from_checkpoint

    for name in ("pytorch_lightning", "lightning", "lightning.pytorch", "lightning_fabric",
                 "pytorch_lightning.utilities.rank_zero", "comet"):
        logging.getLogger(name).setLevel(logging.ERROR)
    model = load_from_checkpoint(str(ckpt), local_files_only=True)
    if getattr(model, "word_level", False):
        # Same span decoding as the service, so (a) and (c) must agree on every score.
        from src.scorer.backends.comet.decode import install_fixed_decode

        install_fixed_decode(model)
    if args.device.startswith("cuda") and args.dtype != "fp32":
        model.encoder.to({"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype])
    return model


def predict_kwargs(args):
    return dict(gpus=1 if args.device.startswith("cuda") else 0, progress_bar=False)


def reference_precision(args):
    """The service's precision for (b) and (c): a 16-bit encoder with fp32 heads needs autocast
    (src/scorer/backends/comet/runner.py does the same); stock predict() without it stops at the first fp32 head
    ("mat1 and mat2 must have the same dtype", seen on an H200 with XCOMET-XL)."""
    import contextlib

    import torch

    if args.device.startswith("cuda") and args.dtype != "fp32":
        return torch.autocast("cuda", dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype])
    return contextlib.nullcontext()


def time_per_request(model, items, args) -> float:
    t0 = time.perf_counter()
    with reference_precision(args):
        for it in items:
            model.predict([it], batch_size=1, **predict_kwargs(args))
    return time.perf_counter() - t0


def time_offline(model, items, args):
    t0 = time.perf_counter()
    with reference_precision(args):
        out = model.predict(items, batch_size=args.offline_batch_size, **predict_kwargs(args))
    return out.scores, time.perf_counter() - t0


def main() -> int:
    args = parse_args()
    args.dtype = args.dtype or ("bf16" if args.device.startswith("cuda") else "fp32")
    from tests.fixtures import build_tiny_comet as fixture

    out = fixture.ensure_built(with_small=True)
    if args.peak_tflops and args.model not in REAL_SHAPES:
        raise SystemExit("--peak-tflops needs a real-shape --model (" + ", ".join(REAL_SHAPES) + ")")
    if args.dry_run:
        shape = (f"real shape of {REAL_SHAPES[args.model]}, random weights" if args.model in REAL_SHAPES
                 else "tiny fixture")
        print(f"dry run: {args.model} ({shape}) on {args.device} in {args.dtype}, --load {args.load}; the next "
              f"step builds or loads it on {args.device}")
        return 0
    if args.model in REAL_SHAPES:
        t0 = time.time()
        ckpt, args.encoder_dir = build_real_shape(args.model, args.build_dir, args.device)
        print(f"{args.model}: random-weight checkpoint ready in {time.time() - t0:.0f} s: {ckpt}", flush=True)
    else:
        ckpt, args.encoder_dir = fixture.checkpoint(out, args.model), None
    kind = {"comet-da": "comet-da", "referenceless": "referenceless", "cometkiwi": "cometkiwi",
            "unified-wl": "unified", "cometkiwi-xl": "cometkiwi"}.get(args.model, "xcomet")
    corpus = out / "spm" / "corpus.txt"
    if args.load == "verl":
        return main_verl(args, ckpt, kind, corpus)
    items = make_items(corpus, args.items, args.with_ref or kind == "comet-da", args.seed)
    warm = make_items(corpus, 4 * args.clients, args.with_ref or kind == "comet-da", args.seed + 1)
    b_items = items[: args.b_items]

    import torch

    print(json.dumps({"model": args.model, "items": len(items), "b_items": len(b_items),
                      "rounds": args.rounds, "clients": args.clients, "with_ref": args.with_ref,
                      "device": args.device, "dtype": args.dtype,
                      "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                      "loadavg_start": [round(x, 2) for x in os.getloadavg()]}))

    times = {"a": [], "b": [], "c": []}
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_service(ckpt, kind, args, Path(tmp))
        try:
            model = load_reference_model(ckpt, args)
            asyncio.run(run_clients(url, warm, args.clients))  # warm-up all three paths
            time_per_request(model, warm[:2], args)
            time_offline(model, warm, args)
            before = asyncio.run(get_json(url + "/metrics"))
            tails = []
            for r in range(args.rounds):
                a_scores, t, tail = asyncio.run(run_clients(url, items, args.clients))
                times["a"].append(t)
                tails.append(tail)
                c_scores, t = time_offline(model, items, args)
                times["c"].append(t)
                times["b"].append(time_per_request(model, b_items, args))
                print(f"round {r + 1}: a {len(items) / times['a'][-1]:.1f}  "
                      f"b {len(b_items) / times['b'][-1]:.1f}  c {len(items) / times['c'][-1]:.1f} "
                      f"items/s  tail_s {tail:.3f}  loadavg {os.getloadavg()[0]:.2f}", flush=True)
            metrics = asyncio.run(get_json(url + "/metrics"))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)

    a = len(items) / min(times["a"])
    b = len(b_items) / min(times["b"])
    c = len(items) / min(times["c"])
    per_round = [((len(items) / ta) / (len(b_items) / tb), (len(items) / ta) / (len(items) / tc))
                 for ta, tb, tc in zip(times["a"], times["b"], times["c"])]
    print(f"best rounds: (a) service, {args.clients} clients x 1 item/request: {a:8.1f} items/s  "
          f"(mean batch {metrics['mean_batch_size']:.1f}, request p50 "
          f"{metrics['request_latency_ms']['p50']:.1f} ms, p99 {metrics['request_latency_ms']['p99']:.1f} ms)")
    print(f"             (b) comet.predict per request:              {b:8.1f} items/s")
    print(f"             (c) comet.predict offline, batch {args.offline_batch_size}:         {c:8.1f} items/s")
    print(f"service batches ({metrics['batches'] - before['batches']} in the timed rounds; "
          f"distributions over the last {metrics['batch_size']['n']} batches incl. warm-up): size "
          f"{dist(metrics['batch_size'])}; padding waste {dist(metrics['padding_waste'])}; "
          f"tail_s (last request -> last answer) of the best round "
          f"{tails[times['a'].index(min(times['a']))]:.3f}")
    diff = max(abs(x - y) for x, y in zip(a_scores, c_scores))
    print(f"max |score(a) - score(c)| = {diff:.2e}; "
          f"loadavg end {[round(x, 2) for x in os.getloadavg()]}")
    print("per-round a/b: " + " ".join(f"{r[0]:.2f}" for r in per_round)
          + "   a/c: " + " ".join(f"{r[1]:.2f}" for r in per_round))
    print(f"ratio a/b={a / b:.2f} a/c={a / c:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
