"""8 concurrent clients x 500 requests of random lengths against one service: every answer is
the offline score of exactly the item that request sent; nothing is lost or answered twice."""
from __future__ import annotations

import asyncio
import random

import aiohttp

from tests.helpers.scorer_service import TOKEN

from .conftest import comet_predict

CLIENTS = 8
REQUESTS_PER_CLIENT = 500
POOL = 400  # distinct items; requests draw from it so the offline reference stays cheap


def test_eight_clients_five_hundred_requests_each(service, comet_models, tiny_dir):
    corpus = (tiny_dir / "spm" / "corpus.txt").read_text(encoding="utf-8").splitlines()
    rng = random.Random(2024)

    def seg(lo, hi):
        return " ".join(rng.choice(corpus) for _ in range(rng.randint(lo, hi)))

    pool = [{"src": seg(1, 3), "mt": seg(1, 6)} for _ in range(POOL)]
    expected = comet_predict(comet_models("cometkiwi"), pool, batch_size=64).scores
    # Each client's plan: 500 requests of 1-3 random pool items.
    plans = [[[rng.randrange(POOL) for _ in range(rng.randint(1, 3))]
              for _ in range(REQUESTS_PER_CLIENT)] for _ in range(CLIENTS)]
    _, before, _ = service.request("GET", "/metrics")

    async def client(session, plan):
        answers = []
        for idx in plan:
            async with session.post(f"{service.url}/score",
                                    json={"model": "kiwi", "items": [pool[i] for i in idx]},
                                    headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                assert r.status == 200, await r.text()
                answers.append((idx, (await r.json())["results"]))
        return answers

    async def main():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS)) as s:
            return await asyncio.gather(*(client(s, p) for p in plans))

    answers = asyncio.run(main())
    n_items = 0
    worst = 0.0
    for plan, client_answers in zip(plans, answers):
        assert len(client_answers) == REQUESTS_PER_CLIENT
        for (idx, results), planned in zip(client_answers, plan):
            assert idx == planned and len(results) == len(idx)
            for i, res in zip(idx, results):
                worst = max(worst, abs(res["score"] - expected[i]))
            n_items += len(idx)
    assert worst <= 1e-5
    _, after, _ = service.request("GET", "/metrics")
    assert after["items"] - before["items"] == n_items
    assert after["batch_failures"] == before["batch_failures"]
    # Requests were really batched together, not run one by one.
    batches = after["batches"] - before["batches"]
    assert n_items / batches > 2.0
