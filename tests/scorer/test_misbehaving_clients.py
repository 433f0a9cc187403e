"""The service keeps serving while some clients misbehave (issue 23 part 5).

One storm, all at once against one service on 127.0.0.1:
- 8 well-formed clients, each the real reward-worker client (src/rewards/client.py ScorerClient,
  its own connection pool, retries off so no failure is hidden), each trajectory a CometKiwi
  score and an XCOMET score + spans request of one item, as src/rewards/qe.py sends them;
- clients that send malformed JSON, invalid UTF-8, NUL bytes (raw in the body, escaped in a
  string, in a header), unknown model names, bodies exactly at `max_body_bytes` and one byte over;
- 200 connections held open at all times that send nothing, half a header, or the headers and
  half the body, then stall (each cut is answered by a new one, until the storm ends).

The well-formed clients send their requests in rounds until every stalled connection has been
cut and replaced at least once, so they are served through the cuts and the reconnections too.

Asserted: every well-formed request gets the same result as in a quiet run of the same requests,
each within LATENCY_BOUND_S (or twice the quiet run's slowest, on a machine slower than that);
every misbehaving request gets its documented answer; every stalled connection is cut
READ_TIMEOUT_S after its last byte (not before; at most CUT_SLACK_S after, or twice the quiet run's slowest
request on a slower machine); the service's resident memory
stays within MEMORY_BOUND_BYTES of its quiet-run level; its log holds no traceback and at most
one line per 10 s for requests that are not HTTP; the service raised its open-files limit
itself (started here with a soft limit too small for the storm).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import resource
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from src.rewards.client import ScorerClient
from src.rewards.settings import ClientSettings
from tests.helpers.scorer_service import TOKEN, start_service, stop_service

from .conftest import SERVICE_MODELS, write_config

READ_TIMEOUT_S = 2.0
MAX_BODY = 256 * 1024
CLIENTS = 8
TRAJECTORIES = 24  # per client; each is 2 requests (kiwi, xc)
IN_FLIGHT = 4  # trajectories a client has open at once (verl's workers score many at a time)
STALLERS = {"silent": 40, "half_header": 80, "half_body": 80}  # 200 connections at all times
# A stalled connection is cut READ_TIMEOUT_S after its last byte; the slack is for a loaded
# 2-core machine (the cut is a timer on the service's event loop, the measurement one on ours).
CUT_SLACK_S = 2.0
# Every well-formed request is answered within this during the storm, or within twice the quiet
# run's slowest if that is more (a machine busy with other work). A quiet run's slowest request
# takes ~1 s on a loaded 2-core machine (up to 2.6 s seen); the rest is for the storm's CPU, whose
# client side shares those cores.
LATENCY_BOUND_S = 4.0
ROUNDS_MAX = 5  # rounds of the well-formed requests during the storm
# Resident memory above the quiet run's, at the storm's peak. Measured one kind at a time: a body
# being received costs about twice the bytes received (aiohttp's read buffer and the bytearray
# it is gathered in): 80 stalled half bodies of MAX_BODY / 2 took +20 MiB; 200 connections
# without a body < 0.1 MiB; the well-formed traffic +3 MiB. The bound: the 80 half bodies
# counted twice (2 x 80 x MAX_BODY / 2 = 20 MiB, and as much again: a wave of cut connections'
# buffers freed but kept by the allocator while the next wave's fill) + 2 bodies at the limit
# read and parsed at once (bytes, str, parsed JSON: ~4 x MAX_BODY each, 2 MiB) + the well-formed
# traffic's batches (4 MiB) + 10 MiB of other allocator slack. The whole storm measured +25 to
# +34 MiB.
MEMORY_BOUND_BYTES = 56 * 1024 * 1024
# The service starts with this soft open-files limit: the storm needs more (200 stalled
# connections + 8 pools + the misbehaving clients + the service's own files), so it must
# raise its limit itself (src/scorer/serve.py raise_fd_limit).
SERVICE_START_NOFILE = 256
# /health's slowest answer while long texts are measured; measured on the loop, each would hold
# it for their whole tokenisation (~0.5 s, more on a busy machine; three of them: 1.6 s). The bound
# is this or HEALTH_BUSY_FACTOR x /health's slowest answer under the well-formed traffic alone, measured
# just before: on a machine busy with other work (a second test worker, another job) every answer is
# slower, and 0.68 s was seen with the tokenisation off the loop
HEALTH_BOUND_S = 0.3
HEALTH_BUSY_FACTOR = 3.0
# The well-formed requests' slowest answer beside them (or twice the quiet run's slowest); with
# comet tokenising the whole texts under the model's lock it was 3.3 s (quiet: 0.8 s)
LONG_TEXT_LATENCY_S = 1.5
STORM_MAX_S = 40.0  # the storm's well-formed rounds end by this at the latest

MODELS = {name: SERVICE_MODELS[name] for name in ("kiwi", "xc")}


@pytest.fixture(scope="module")
def storm_service(tiny_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("storm")
    cfg = write_config(d / "scorer.yaml", tiny_dir, models=MODELS, max_body_bytes=MAX_BODY,
                       read_timeout_s=READ_TIMEOUT_S, max_wait_ms=3.0, inference_threads=2)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # The child inherits the lowered soft limit; ours is restored before the storm.
    resource.setrlimit(resource.RLIMIT_NOFILE, (SERVICE_START_NOFILE, hard))
    try:
        svc = start_service(cfg, d / "ready.json")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    # This process holds the storm's client side of every connection.
    need = 2048
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    yield svc
    rc = stop_service(svc)
    assert rc == 0, svc.log.read_text()[-3000:]


@pytest.fixture(scope="module")
def quiet(storm_service, tiny_dir):
    """The well-formed workload once with nothing else on the wire: (works, results, latencies,
    seconds). Every test here compares its busy runs with it."""
    corpus = (tiny_dir / "spm" / "corpus.txt").read_text(encoding="utf-8").splitlines()
    works = [trajectories(corpus, TRAJECTORIES, seed=100 + c) for c in range(CLIENTS)]
    t0 = time.monotonic()
    results, latencies = asyncio.run(run_good(storm_service.url, works))
    return works, results, latencies, time.monotonic() - t0


def same_results(quiet_results, busy_results):
    for q_client, s_client in zip(quiet_results, busy_results):
        assert len(s_client) == len(q_client) == TRAJECTORIES
        for (q_kiwi, q_xc), (s_kiwi, s_xc) in zip(q_client, s_client):
            assert s_kiwi["score"] == pytest.approx(q_kiwi["score"], abs=1e-5)
            assert s_xc["score"] == pytest.approx(q_xc["score"], abs=1e-5)
            assert s_xc["mqm"] == pytest.approx(q_xc["mqm"], abs=1e-5)
            assert [(sp["start"], sp["end"], sp["severity"]) for sp in s_xc["spans"]] == \
                   [(sp["start"], sp["end"], sp["severity"]) for sp in q_xc["spans"]]


# --------------------------------------------------------------------------------------------
# the well-formed clients


def trajectories(corpus, n, seed):
    import random

    rng = random.Random(seed)
    seg = lambda lo, hi: " ".join(rng.choice(corpus) for _ in range(rng.randint(lo, hi)))  # noqa: E731
    return [(seg(1, 3), seg(1, 5)) for _ in range(n)]


@contextlib.contextmanager
def pools_idle_at_most(seconds: float):
    """The reward client's pools (aiohttp.TCPConnector, made in ScorerClient._get_session) close
    idle connections after `seconds` instead of aiohttp's 15 s. In production 15 s is below the
    service's read_timeout_s (30 s), so the client closes an idle connection before the service
    does; this test's read_timeout_s is 2 s, and a pooled connection idle between 2 and 15 s could
    be reused just as the service closes it (ServerDisconnectedError: a race of keep-alive, not a
    fault of either side). Scaled down with the timeout, the order stays production's."""
    import aiohttp

    made = aiohttp.TCPConnector
    aiohttp.TCPConnector = functools.partial(made, keepalive_timeout=seconds)
    try:
        yield
    finally:
        aiohttp.TCPConnector = made


async def good_client(url: str, work, latencies: list):
    """One reward worker: its own pool; IN_FLIGHT trajectories at a time, each a kiwi request
    and an xc spans request sent together (src/rewards/qe.py assess)."""
    client = ScorerClient(url, TOKEN, ClientSettings(timeout_s=60.0, retries=0, backoff_s=0.1,
                                                     max_connections=64), ready_timeout_s=0.0)
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def timed(call):
        t0 = time.monotonic()
        out = await call
        latencies.append(time.monotonic() - t0)
        return out

    async def one(src, mt):
        async with gate:
            kiwi, xc = await asyncio.gather(
                timed(client.score("kiwi", [{"src": src, "mt": mt}], ["score"])),
                timed(client.score("xc", [{"src": src, "mt": mt, "lang": "en"}], ["score", "spans"])))
            return kiwi[0], xc[0]

    try:
        return await asyncio.gather(*(one(s, m) for s, m in work))
    finally:
        await client.close()


async def run_good(url: str, works):
    latencies: list = []
    with pools_idle_at_most(READ_TIMEOUT_S / 2):
        results = await asyncio.gather(*(good_client(url, w, latencies) for w in works))
    return results, latencies


# --------------------------------------------------------------------------------------------
# the misbehaving clients (raw HTTP/1.1 over asyncio streams: they send what no client library would)


def http_request(host: str, body: bytes, headers: dict | None = None, auth: bool = True) -> bytes:
    head = ["POST /score HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", "Connection: close"]
    if auth:
        head.append(f"Authorization: Bearer {TOKEN}")
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


async def exchange(host: str, port: int, raw: bytes, timeout: float = 30.0):
    """Send `raw`, read until the service closes. -> (status, parsed JSON body or None)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def padded(body: dict, size: int) -> bytes:
    """`body` as JSON, padded with trailing whitespace (still valid JSON) to exactly `size` bytes."""
    raw = json.dumps(body).encode()
    assert len(raw) <= size
    return raw + b" " * (size - len(raw))


ITEM = {"src": "Der Hund.", "mt": "The dog."}
# A text as long as the size limit allows: valid, scored, cut at the encoder's limit. Taking its
# cost (tokenising it) takes ~0.5 s with the tiny tokenizer on a loaded 2-core machine. Not part
# of the storm: long texts are heavy work, not misbehaviour (8 items of 512 tokens at once add
# ~100 MiB of activations here, bounded by batch_tokens: the memory plan's business).
LONG = "The quick brown fox jumps over the lazy dog by the old river bank, then runs home. " * 3000
LONG_AT_LIMIT = padded({"model": "kiwi", "items": [{"src": "Der Fuchs.", "mt": LONG}]}, MAX_BODY)
ESCAPED_NUL = json.dumps({"model": "kiwi", "items": [{"src": "a\u0000b", "mt": "The\u0000dog."}]})
# (name, request bytes for http_request or a full raw request, expected status, needle in error)
BAD = [
    ("malformed json", b'{"model": "kiwi", "items": [{"src": "a", "mt": ', 400, "malformed JSON"),
    ("invalid utf-8", b'{"model": "kiwi", "items": [{"src": "\xc3\x28", "mt": "\xff"}]}', 400, "UTF-8"),
    ("nul in body", b'{"model": "kiwi", "items": [{"src": "a\x00", "mt": "b"}]}', 400, "malformed JSON"),
    ("escaped nul in text", ESCAPED_NUL.encode(), 200, None),
    ("unknown model", json.dumps({"model": "bleurt", "items": [ITEM]}).encode(), 404, "unknown model"),
    ("body at the limit", padded({"model": "kiwi", "items": [ITEM]}, MAX_BODY), 200, None),
    ("one byte over", padded({"model": "kiwi", "items": [ITEM]}, MAX_BODY + 1), 413, ""),
]


async def bad_client(host: str, port: int, kind, stop: asyncio.Event, seen: dict, limit: int):
    name, body, status, needle = kind
    n = 0
    while not stop.is_set() and n < limit:
        got, resp = await exchange(host, port, http_request(host, body))
        assert got == status, (name, got, resp)
        if needle is not None:
            assert needle in resp["error"], (name, resp)
        else:
            assert all(math.isfinite(r["score"]) for r in resp["results"]), (name, resp)
        n += 1
        await asyncio.sleep(0.01)  # misbehaving, not a flood: a few requests per second
    seen[name] = n


async def nul_header_client(host: str, port: int, stop: asyncio.Event, seen: dict, limit: int):
    """A NUL in a header, every other time in the Authorization line: aiohttp's parser error
    quotes the offending line, which must not bring the token into the log."""
    n = 0
    body = json.dumps({"model": "kiwi", "items": [ITEM]}).encode()
    while not stop.is_set() and n < limit:
        if n % 2:
            raw = http_request(host, body, {"Authorization": f"Bearer {TOKEN}\x00"}, auth=False)
        else:
            raw = http_request(host, body, {"X-Trace": "a\x00b"})
        got, _ = await exchange(host, port, raw)
        assert got == 400
        n += 1
        await asyncio.sleep(0.05)
    seen["nul in a header"] = n


# --------------------------------------------------------------------------------------------
# the stalled connections


async def staller(host: str, port: int, kind: str, stop: asyncio.Event, cuts: list, limit: int):
    """Holds one stalled connection open at all times until `stop`; records how long after its
    last byte each connection was cut, and what it was told."""
    header = (f"POST /score HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
              f"Content-Type: application/json\r\nContent-Length: {MAX_BODY}\r\n\r\n").encode()
    half_body = padded({"model": "kiwi", "items": [ITEM]}, MAX_BODY)[:MAX_BODY // 2]
    sent = {"silent": b"", "half_header": header[:len(header) // 2], "half_body": header + half_body}[kind]
    for _ in range(limit):
        if stop.is_set():
            return
        # The clock starts no later than the service's: at the connect for a connection that
        # sends no complete header (its timer starts at the accept), before the write for the
        # half body (its timer starts once the headers are parsed). Our event loop is busy, so
        # a clock read after the await could start late and see the cut early.
        t0 = time.monotonic()
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 30.0)
        try:
            if sent:
                if kind == "half_body":
                    t0 = time.monotonic()
                writer.write(sent)
                await writer.drain()
            try:
                data = await asyncio.wait_for(reader.read(), READ_TIMEOUT_S + 4 * CUT_SLACK_S)
            except ConnectionResetError:
                data = b""
            except asyncio.TimeoutError:
                data = None  # never cut: recorded as such
            cuts.append((kind, time.monotonic() - t0, data))
        finally:
            writer.close()


# --------------------------------------------------------------------------------------------
# the service's memory


class MemorySampler:
    """VmRSS of `pid` every 20 ms on a thread (the storm's event loop is busy)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def status(self) -> dict:
        out = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
        return out

    def _run(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.status()["VmRSS"])

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.status()["VmRSS"])


def open_files_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open files limit in /proc")


# --------------------------------------------------------------------------------------------


def test_well_formed_clients_are_served_while_others_misbehave(storm_service, quiet):
    svc = storm_service
    u = urlparse(svc.url)
    host, port = u.hostname, u.port
    assert host == "127.0.0.1"
    works, quiet_results, quiet_lat, quiet_s = quiet
    # The service raised its soft limit from the SERVICE_START_NOFILE it was started with.
    assert open_files_limit(svc.proc.pid) >= 1024
    sampler = MemorySampler(svc.proc.pid)
    before = sampler.status()

    async def storm():
        stop = asyncio.Event()
        cuts: list = []
        seen: dict = {}
        background = [asyncio.create_task(staller(host, port, kind, stop, cuts, limit=20))
                      for kind, n in STALLERS.items() for _ in range(n)]
        await asyncio.sleep(0.5)  # the 200 are connected and stalled before the good traffic starts
        background += [asyncio.create_task(bad_client(host, port, k, stop, seen, limit=400))
                       for k in BAD]
        background.append(asyncio.create_task(nul_header_client(host, port, stop, seen, limit=100)))

        def every_slot_cut():
            return all(sum(1 for k, _, _ in cuts if k == kind) >= n for kind, n in STALLERS.items())

        rounds, through = [], False
        try:
            deadline = time.monotonic() + STORM_MAX_S
            while len(rounds) < ROUNDS_MAX and time.monotonic() < deadline:
                rounds.append(await asyncio.wait_for(run_good(svc.url, works), STORM_MAX_S))
                through = every_slot_cut()
                if through:
                    break
        finally:
            stop.set()
        done = await asyncio.gather(*background, return_exceptions=True)
        errors = [e for e in done if isinstance(e, BaseException)]
        assert not errors, errors[:3]
        return rounds, through, cuts, seen

    t0 = time.monotonic()
    with sampler:
        rounds, through, cuts, seen = asyncio.run(storm())
    storm_s = time.monotonic() - t0
    storm_lat = [x for _, lat in rounds for x in lat]
    after = sampler.status()
    growth = sampler.peak - before["VmRSS"]
    print(f"\nquiet run {quiet_s:.1f}s (max latency {max(quiet_lat):.2f}s), storm {storm_s:.1f}s: "
          f"{len(rounds)} rounds of well-formed requests (max latency {max(storm_lat):.2f}s); "
          f"stalled connections cut: {len(cuts)}; misbehaving requests: {seen}; "
          f"service VmRSS quiet {before['VmRSS'] / 2**20:.1f} MiB, storm peak "
          f"{sampler.peak / 2**20:.1f} MiB (+{growth / 2**20:.1f} MiB, bound "
          f"{MEMORY_BOUND_BYTES / 2**20:.0f}), VmHWM {before['VmHWM'] / 2**20:.1f} -> "
          f"{after['VmHWM'] / 2**20:.1f} MiB")

    # Well-formed: every request answered, the same as in the quiet run, within the bound, and
    # served through a whole wave of cuts and reconnections.
    assert through, f"{len(rounds)} rounds ended before every stalled connection was cut once"
    for stormy, lat in rounds:
        assert len(lat) == len(quiet_lat) == CLIENTS * TRAJECTORIES * 2
        same_results(quiet_results, stormy)
    bound = max(LATENCY_BOUND_S, 2 * max(quiet_lat))
    assert max(storm_lat) <= bound, (bound, sorted(storm_lat)[-5:])

    # Misbehaving: each kind was really sent during the storm (its answers checked as they came).
    assert set(seen) == {k[0] for k in BAD} | {"nul in a header"}
    assert min(seen.values()) >= 3, seen

    # Stalled: every connection cut after the read timeout (not before, not much after); a
    # stalled body is told 408 first.
    never = [k for k, _, data in cuts if data is None]
    assert not never, f"{len(never)} stalled connections never cut: {never[:5]}"
    # "not much after": CUT_SLACK_S, or twice the quiet run's slowest request on a machine busy with other
    # work, as the latency bound above (both clocks are event loops on those cores: a 3x loaded machine
    # took 2.9 s for the quiet run's slowest request and saw a cut 4.5 s late)
    slack = max(CUT_SLACK_S, 2 * max(quiet_lat))
    for kind in STALLERS:
        times = [t for k, t, _ in cuts if k == kind]
        assert len(times) >= STALLERS[kind], (kind, len(times))
        assert READ_TIMEOUT_S - 0.2 <= min(times) and max(times) <= READ_TIMEOUT_S + slack, \
            (kind, min(times), max(times), slack)
    for kind, _, data in cuts:
        if kind == "half_body":
            assert data.startswith(b"HTTP/1.1 408 "), data[:100]
            assert b"read_timeout_s" in data
        else:
            assert data == b"", data[:100]

    # Memory: the storm's peak stays within the stated bound above the quiet level.
    assert growth <= MEMORY_BOUND_BYTES, f"VmRSS grew {growth / 2**20:.1f} MiB during the storm"

    # The service log: no traceback for the clients' mistakes, and requests that are not HTTP
    # (the NUL in a header) at most one line per 10 s, however many were sent.
    log = svc.log.read_text()
    assert "Traceback" not in log and TOKEN not in log, log[-3000:]
    malformed = log.count("malformed HTTP request from")
    assert 1 <= malformed <= storm_s / 10 + 1, malformed

    # Still serving normally afterwards, with the storm's 4xx counted and no batch failed.
    status, metrics, _ = svc.request("GET", "/metrics")
    assert status == 200 and metrics["batch_failures"] == 0
    for code in ("400", "404", "408", "413"):
        assert metrics["requests"].get(code, 0) >= 3, metrics["requests"]


def test_long_texts_hold_up_nobody(storm_service, quiet):
    """Bodies at the size limit holding one long text, beside the well-formed clients. The
    service tokenises such a text twice: once to know its cost before queueing it, on its
    measuring thread (on the event loop it would hold every client, /health included, for its
    whole tokenisation: ~0.5 s each here, /health held 1.6 s by three), and once by comet, cut
    first at a space past what the encoder sees (else comet tokenises all of it under the
    model's lock, holding every batch of that model: the well-formed clients' slowest request
    took 3.3 s instead of 0.8 s). Asserted: /health answers within HEALTH_BOUND_S (or
    HEALTH_BUSY_FACTOR x its slowest under the well-formed traffic alone, on a busy machine)
    throughout, the well-formed requests within LONG_TEXT_LATENCY_S (or twice the quiet run's
    slowest) and with the quiet run's results."""
    svc = storm_service
    u = urlparse(svc.url)
    host, port = u.hostname, u.port
    works, quiet_results, quiet_lat, _ = quiet

    async def main():
        import aiohttp

        async def heavy():
            t0 = time.monotonic()
            got = await exchange(host, port, http_request(host, LONG_AT_LIMIT))
            return got, time.monotonic() - t0

        async def probe(s, tasks) -> list[float]:
            health = []
            while not all(t.done() for t in tasks) and len(health) < 2000:
                t0 = time.monotonic()
                async with s.get(f"{svc.url}/health") as r:
                    assert r.status == 200
                health.append(time.monotonic() - t0)
                await asyncio.sleep(0.02)
            return health

        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as s:
            async with s.get(f"{svc.url}/health") as r:  # the probe's connection is open
                assert r.status == 200
            # the same traffic without the long texts: how fast /health answers on this machine now
            alone = asyncio.create_task(run_good(svc.url, works))
            baseline = await probe(s, [alone])
            await alone
            tasks = [asyncio.create_task(heavy()) for _ in range(3)]
            good = asyncio.create_task(run_good(svc.url, works))
            health = await probe(s, [*tasks, good])
            return [await t for t in tasks], await good, health, baseline

    heavy, (results, latencies), health, baseline = asyncio.run(main())
    slowest_heavy = max(t for _, t in heavy)
    print(f"\n3 bodies of a long text at the limit: answered in {slowest_heavy:.2f}s; /health meanwhile: "
          f"{len(health)} probes, slowest {max(health) * 1000:.0f} ms (without them {max(baseline) * 1000:.0f} ms); "
          f"well-formed requests: slowest "
          f"{max(latencies):.2f}s (quiet {max(quiet_lat):.2f}s)")
    for (status, body), _ in heavy:
        assert status == 200 and all(r["truncated"] for r in body["results"]), body
    assert len(health) >= 5 and baseline
    health_bound = max(HEALTH_BOUND_S, HEALTH_BUSY_FACTOR * max(baseline))
    assert max(health) <= health_bound, (max(health), health_bound, max(baseline), slowest_heavy)
    same_results(quiet_results, results)
    bound = max(LONG_TEXT_LATENCY_S, 2 * max(quiet_lat))
    assert max(latencies) <= bound, (bound, sorted(latencies)[-5:])


def test_cut_long_texts_score_as_comet_predict_on_the_whole_texts(storm_service, comet_models,
                                                                  tiny_dir):
    """The cut (src/scorer/backends/comet/runner.py ModelRunner._cut) changes nothing comet computes: long mt,
    src and ref (thousands of tokens) score as stock comet.predict scores the uncut texts, word
    tags still cover the whole MT; and the texts are really cut."""
    import copy

    from src.scorer.config import ModelSpec
    from src.scorer.backends.comet.decode import install_fixed_decode
    from src.scorer.backends.comet.runner import ModelRunner
    from src.scorer.schema import Item

    from .conftest import comet_predict

    corpus = (tiny_dir / "spm" / "corpus.txt").read_text(encoding="utf-8").splitlines()
    long_text = " ".join(corpus * 4)[:12_000]  # thousands of tokens; the bodies stay under MAX_BODY
    short = corpus[3]
    kiwi_items = [{"src": short, "mt": long_text}, {"src": long_text, "mt": short},
                  {"src": long_text, "mt": long_text}, {"src": short, "mt": corpus[5]}]
    xc_items = kiwi_items + [{"src": short, "mt": long_text, "ref": long_text},
                             {"src": long_text, "mt": short, "ref": corpus[7]}]
    status, kiwi, _ = storm_service.score("kiwi", kiwi_items)
    assert status == 200, kiwi
    status, xc, _ = storm_service.score("xc", xc_items, want=["spans", "word_tags"])
    assert status == 200, xc
    expected_kiwi = comet_predict(comet_models("cometkiwi"), kiwi_items).scores
    reference = copy.deepcopy(comet_models("xcomet"))
    install_fixed_decode(reference)  # the service's documented span fix feeds MQM
    expected_xc = [comet_predict(reference, [it]).scores[0] for it in xc_items]
    assert [r["score"] for r in kiwi["results"]] == pytest.approx(expected_kiwi, abs=1e-5)
    assert [r["score"] for r in xc["results"]] == pytest.approx(expected_xc, abs=1e-5)
    assert [r["truncated"] for r in kiwi["results"]] == [True, True, True, False]
    tags = xc["results"][0]["word_tags"]
    assert tags[0]["tag"] in ("OK", "BAD") and tags[-1]["tag"] is None
    assert tags[-1]["end"] == len(long_text.rstrip())

    # The texts the service scored were really cut (else this test would show nothing).
    spec = ModelSpec(path=str(tiny_dir / "models" / "xcomet"), kind="xcomet")
    runner = ModelRunner("xc", spec, copy.deepcopy(comet_models("xcomet")), device="cpu", dtype="fp32")
    m = runner.measure([Item(src=long_text, mt=long_text, ref=long_text), Item(src=short, mt=short)])
    assert set(m[0].cuts) == {"src", "mt", "ref"} and m[1].cuts == {}
    assert all(0 < at < len(long_text) and long_text[at] == " " for at in m[0].cuts.values())
