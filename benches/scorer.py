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
Checks that (a) returns the scores (c) computes, and ends with `ratio a/b=<x> a/c=<y>`.

GPU (--device cuda --dtype bf16): same protocol. The XL-shape model (XLM-R-XL, 3.5B random
weights) and the bf16 matmul-peak fraction from the issue are not implemented here: they need a
GPU machine, and none was available when this was written (see benches/RESULTS.md).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
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
    p.add_argument("--torch-threads", type=int, default=0, help="service torch threads (0 = default)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


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
                       dtype=args.dtype, torch_threads=args.torch_threads)
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

    async def client(session):
        for i in next_idx:  # shared iterator: each client takes the next item when it is free
            async with session.post(f"{url}/score", json={"model": "m", "items": [items[i]]},
                                    headers=headers) as r:
                body = await r.json()
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {body}")
                results[i] = body["results"][0]["score"]

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        elapsed = time.perf_counter() - t0
    return results, elapsed


async def get_json(url: str):
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.get(url, headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            return await r.json()


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
        from src.scorer.decode import install_fixed_decode

        install_fixed_decode(model)
    if args.device.startswith("cuda") and args.dtype != "fp32":
        model.encoder.to({"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype])
    return model


def predict_kwargs(args):
    return dict(gpus=1 if args.device.startswith("cuda") else 0, progress_bar=False)


def time_per_request(model, items, args) -> float:
    t0 = time.perf_counter()
    for it in items:
        model.predict([it], batch_size=1, **predict_kwargs(args))
    return time.perf_counter() - t0


def time_offline(model, items, args):
    t0 = time.perf_counter()
    out = model.predict(items, batch_size=args.offline_batch_size, **predict_kwargs(args))
    return out.scores, time.perf_counter() - t0


def main() -> int:
    args = parse_args()
    args.dtype = args.dtype or ("bf16" if args.device.startswith("cuda") else "fp32")
    from tests.fixtures import build_tiny_comet as fixture

    out = fixture.ensure_built(with_small=True)
    ckpt = fixture.checkpoint(out, args.model)
    kind = {"comet-da": "comet-da", "referenceless": "referenceless", "cometkiwi": "cometkiwi",
            "unified-wl": "unified"}.get(args.model, "xcomet")
    corpus = out / "spm" / "corpus.txt"
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
            model.predict(warm[:2], batch_size=1, **predict_kwargs(args))
            time_offline(model, warm, args)
            for r in range(args.rounds):
                a_scores, t = asyncio.run(run_clients(url, items, args.clients))
                times["a"].append(t)
                c_scores, t = time_offline(model, items, args)
                times["c"].append(t)
                times["b"].append(time_per_request(model, b_items, args))
                print(f"round {r + 1}: a {len(items) / times['a'][-1]:.1f}  "
                      f"b {len(b_items) / times['b'][-1]:.1f}  c {len(items) / times['c'][-1]:.1f} "
                      f"items/s", flush=True)
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
    diff = max(abs(x - y) for x, y in zip(a_scores, c_scores))
    print(f"max |score(a) - score(c)| = {diff:.2e}; "
          f"loadavg end {[round(x, 2) for x in os.getloadavg()]}")
    print("per-round a/b: " + " ".join(f"{r[0]:.2f}" for r in per_round)
          + "   a/c: " + " ".join(f"{r[1]:.2f}" for r in per_round))
    print(f"ratio a/b={a / b:.2f} a/c={a / c:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
