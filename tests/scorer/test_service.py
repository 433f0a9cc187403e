"""The HTTP service end to end (subprocess, all tiny models): scores, spans, word tags, auth,
and every kind of bad request answered with its 4xx while the next good request succeeds."""
from __future__ import annotations

import copy
import http.client
import json
import random
from urllib.parse import urlparse

import pytest

from src.scorer.backends.comet.decode import install_fixed_decode
from tests.helpers.scorer_service import TOKEN

from .conftest import comet_predict


@pytest.fixture(scope="module")
def corpus(tiny_dir):
    return (tiny_dir / "spm" / "corpus.txt").read_text(encoding="utf-8").splitlines()


def items_from(corpus, n, with_ref, seed):
    rng = random.Random(seed)
    seg = lambda: " ".join(rng.choice(corpus) for _ in range(rng.randint(1, 3)))  # noqa: E731
    return [dict(src=seg(), mt=seg(), **({"ref": seg()} if with_ref else {})) for _ in range(n)]


def test_health_lists_models_and_runtime(service):
    status, body, _ = service.request("GET", "/health")
    assert status == 200 and body["status"] == "ok" and body["ready"] is True
    assert body["device"] == "cpu" and body["dtype"] == "fp32" and body["queue_depth"] == 0
    assert set(body["models"]) == {"da", "qe", "kiwi", "uni", "xc", "xc-thr"}
    assert body["models"]["da"]["needs_ref"] is True
    assert body["models"]["xc"] == {"kind": "xcomet", "class": "XCOMETMetric", "needs_ref": False,
                                    "accepts_ref": True, "word_level": True, "mqm": True,
                                    "max_tokens": 510, "checkpoint": "xcomet"}
    assert body["models"]["kiwi"]["accepts_ref"] is False


@pytest.mark.parametrize("method, path", [("GET", "/health"), ("GET", "/metrics"),
                                          ("POST", "/score"), ("GET", "/nothing-here")])
@pytest.mark.parametrize("auth", [None, "Bearer wrong-token", f"Basic {TOKEN}", f"Bearer {TOKEN}x",
                                  "Bearer"])
def test_no_or_wrong_token_is_401_everywhere(service, method, path, auth):
    headers = {"Authorization": auth} if auth else {}
    body = {"model": "kiwi", "items": [{"src": "a", "mt": "b"}]} if method == "POST" else None
    status, resp, hdrs = service.request(method, path, body, token=None, headers=headers)
    assert status == 401 and "token" in resp["error"]
    assert hdrs.get("WWW-Authenticate", "").startswith("Bearer")


@pytest.mark.parametrize("model, fixture, with_ref", [
    ("da", "comet-da", True), ("qe", "referenceless", False), ("kiwi", "cometkiwi", False),
    ("uni", "unified-wl", True), ("uni", "unified-wl", False), ("xc", "xcomet", False),
    ("xc", "xcomet", True)])
def test_scores_equal_comet_predict(service, comet_models, corpus, model, fixture, with_ref):
    items = items_from(corpus, 20, with_ref, seed=len(model) * 7 + with_ref)
    reference = comet_models(fixture)
    if fixture == "xcomet":
        reference = copy.deepcopy(reference)
        install_fixed_decode(reference)  # the service's documented span fix feeds MQM
    expected = comet_predict(reference, items).scores
    status, body, _ = service.score(model, items)
    assert status == 200, body
    got = [r["score"] for r in body["results"]]
    assert max(abs(g - e) for g, e in zip(got, expected)) <= 1e-5
    assert all(r["truncated"] is False for r in body["results"])
    assert all(("mqm" in r) == (fixture == "xcomet") for r in body["results"])


def test_ref_and_no_ref_items_in_one_request(service, comet_models, corpus):
    with_ref = items_from(corpus, 5, True, seed=11)
    no_ref = items_from(corpus, 5, False, seed=12)
    mixed = [x for pair in zip(with_ref, no_ref) for x in pair]
    reference = copy.deepcopy(comet_models("xcomet"))
    install_fixed_decode(reference)
    expected = [comet_predict(reference, [it]).scores[0] for it in mixed]
    status, body, _ = service.score("xc", mixed)
    assert status == 200
    assert [r["score"] for r in body["results"]] == pytest.approx(expected, abs=1e-5)


def test_spans_and_word_tags_zh_ja_en(service):
    items = [
        {"src": "The translation quality is very good.", "mt": "翻译质量很好，老师打开了书。", "lang": "zh"},
        {"src": "The teacher opened the book.", "mt": "先生は本を開けました。", "lang": "ja"},
        {"src": "Der Lehrer öffnete das Buch.", "mt": "The teacher opened the book quickly.", "lang": "en"},
    ]
    status, body, _ = service.score("xc-thr", items, want=["score", "spans", "word_tags"])
    assert status == 200
    expected_words = [["翻译", "质量", "很", "好", "，", "老师", "打开", "了", "书", "。"],
                      ["先生", "は", "本", "を", "開け", "まし", "た", "。"],
                      ["The", "teacher", "opened", "the", "book", "quickly."]]
    for it, res, exp in zip(items, body["results"], expected_words):
        assert [w["word"] for w in res["word_tags"]] == exp
        for sp in res["spans"]:
            assert set(sp) == {"text", "start", "end", "severity", "confidence"}
            assert sp["text"] == it["mt"][sp["start"]:sp["end"]] and sp["text"].strip() == sp["text"]
            assert sp["severity"] in ("minor", "major", "critical") and 0 < sp["confidence"] <= 1
        for w in res["word_tags"]:
            overlaps = any(w["start"] < sp["end"] and sp["start"] < w["end"] for sp in res["spans"])
            assert w["tag"] == ("BAD" if overlaps else "OK")
        n_penalty = sum({"minor": 1, "major": 5, "critical": 10}[s["severity"]] for s in res["spans"])
        assert res["mqm"] == pytest.approx((25 - min(25, n_penalty)) / 25, abs=1e-6)
    tags = {w["tag"] for r in body["results"] for w in r["word_tags"]}
    assert tags == {"OK", "BAD"}


def test_word_tags_from_probabilities(service):
    item = {"src": "The teacher opened the book.", "mt": "老师打开了书。"}  # zh guessed from script
    status, body, _ = service.score("uni", [item], want=["word_tags"], word_tag_source="probs",
                                    word_tag_threshold=0.7)
    assert status == 200
    res = body["results"][0]
    assert "spans" not in res
    assert [w["word"] for w in res["word_tags"]] == ["老师", "打开", "了", "书", "。"]
    for w in res["word_tags"]:
        assert w["tag"] == ("BAD" if w["p_bad"] > 0.7 else "OK")


def test_empty_and_whitespace_mt_get_a_defined_score(service, corpus):
    normal = items_from(corpus, 2, False, seed=3)
    items = [normal[0], {"src": "Hallo.", "mt": ""}, {"src": "Hallo.", "mt": " \t\n "}, normal[1]]
    status, body, _ = service.score("xc", items, want=["spans", "word_tags"])
    assert status == 200
    r = body["results"]
    for empty in (r[1], r[2]):
        assert empty == {"score": 0.0, "mqm": 0.0, "spans": [], "word_tags": [], "truncated": False,
                         "empty_mt": True}
    assert "empty_mt" not in r[0] and "empty_mt" not in r[3]
    status, body, _ = service.score("kiwi", [{"src": "x", "mt": ""}])
    assert body["results"][0] == {"score": 0.0, "truncated": False, "empty_mt": True}


def test_long_inputs_are_truncated_and_flagged(service, comet_models, corpus):
    long_mt = " ".join(corpus[:80])
    items = [{"src": corpus[1], "mt": long_mt}, {"src": corpus[2], "mt": corpus[3]}]
    status, body, _ = service.score("xc", items, want=["word_tags"])
    assert status == 200
    assert [r["truncated"] for r in body["results"]] == [True, False]
    tags = body["results"][0]["word_tags"]
    assert tags[0]["tag"] in ("OK", "BAD") and tags[-1]["tag"] is None  # never seen by the model
    reference = copy.deepcopy(comet_models("xcomet"))
    install_fixed_decode(reference)
    expected = comet_predict(reference, items).scores
    assert [r["score"] for r in body["results"]] == pytest.approx(expected, abs=1e-5)


def raw_post(service, body: bytes, headers=None):
    u = urlparse(service.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request("POST", "/score", body=body,
                     headers={"Authorization": f"Bearer {TOKEN}", **(headers or {})})
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null"), dict(r.getheaders())
    finally:
        conn.close()


GOOD = {"model": "kiwi", "items": [{"src": "Der Hund.", "mt": "The dog."}]}
ITEM = {"src": "a", "mt": "b"}
BAD_REQUESTS = [
    ("invalid utf-8", b'{"model": "kiwi", "items": [{"src": "\xff\xfe", "mt": "b"}]}', 400, "UTF-8"),
    ("malformed json", b'{"model": "kiwi", "items": [', 400, "malformed JSON"),
    ("not an object", b"[1, 2]", 400, "JSON object"),
    ("empty body", b"", 400, "malformed JSON"),
    ("missing model", {"items": [ITEM]}, 400, "'model' is required"),
    ("unknown model", {"model": "bleu", "items": [ITEM]}, 404, "unknown model 'bleu'"),
    ("missing items", {"model": "kiwi"}, 400, "'items' is required"),
    ("empty items", {"model": "kiwi", "items": []}, 400, "non-empty list"),
    ("item not object", {"model": "kiwi", "items": ["a"]}, 400, "items[0] must be an object"),
    ("missing mt", {"model": "kiwi", "items": [{"src": "a"}]}, 400, "items[0].mt is required"),
    ("missing src", {"model": "kiwi", "items": [ITEM, {"mt": "a"}]}, 400, "items[1].src is required"),
    ("mt not a string", {"model": "kiwi", "items": [{"src": "a", "mt": 3}]}, 400, "must be a string"),
    ("unknown item field", {"model": "kiwi", "items": [{**ITEM, "reference": "c"}]}, 400, "'reference'"),
    ("unknown top field", {"model": "kiwi", "items": [ITEM], "batch": 3}, 400, "unknown field 'batch'"),
    ("missing ref", {"model": "da", "items": [ITEM]}, 400, "items[0].ref is required"),
    ("unknown want", {"model": "kiwi", "items": [ITEM], "want": ["bleu"]}, 400, "unknown want"),
    ("want not list", {"model": "kiwi", "items": [ITEM], "want": "score"}, 400, "'want' must be a list"),
    ("spans from sentence model", {"model": "kiwi", "items": [ITEM], "want": ["spans"]}, 400,
     "no word-level head"),
    ("bad word tag source", {"model": "uni", "items": [ITEM], "want": ["word_tags"],
                             "word_tag_source": "magic"}, 400, "word_tag_source"),
    ("bad threshold", {"model": "uni", "items": [ITEM], "word_tag_threshold": 2}, 400,
     "word_tag_threshold"),
    ("lone surrogate", b'{"model": "kiwi", "items": [{"src": "a", "mt": "\\ud800"}]}', 400,
     "lone surrogate"),
    ("too many items", {"model": "kiwi", "items": [ITEM] * 101}, 413, "too many items"),
    ("oversized body", {"model": "kiwi", "items": [{"src": "a", "mt": "x" * 300_000}]}, 413, ""),
    ("queue full", {"model": "kiwi", "items": [ITEM] * 80}, 503, "queue full"),
]


@pytest.mark.parametrize("name, body, status, needle", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_request_then_good_request(service, name, body, status, needle):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    got, resp, headers = raw_post(service, raw, {"Content-Type": "application/json"})
    assert got == status, resp
    assert isinstance(resp, dict) and needle in resp["error"]
    if status == 503:
        assert headers.get("Retry-After") == "1"
    ok, good, _ = service.request("POST", "/score", GOOD)
    assert ok == 200 and isinstance(good["results"][0]["score"], float)


@pytest.mark.parametrize("method, path, status", [("GET", "/score", 405), ("POST", "/health", 405),
                                                  ("GET", "/nope", 404)])
def test_wrong_method_or_path(service, method, path, status):
    got, resp, _ = service.request(method, path, {} if method == "POST" else None)
    assert got == status and "error" in resp
    assert service.request("POST", "/score", GOOD)[0] == 200


def test_metrics(service):
    service.request("POST", "/score", GOOD)
    service.request("GET", "/health", token=None)  # a 401
    service.request("POST", "/score", {"model": "kiwi", "items": [ITEM] * 80})  # a 503
    status, m, _ = service.request("GET", "/metrics")
    assert status == 200
    assert m["items"] >= 1 and m["batches"] >= 1 and m["mean_batch_size"] >= 1
    for key in ("request_latency_ms", "batch_latency_ms", "queue_wait_ms"):
        assert set(m[key]) == {"p50", "p90", "p99", "max", "n"}
    assert m["request_latency_ms"]["p50"] > 0
    assert m["peak_gpu_memory_bytes"] is None and m["queue_depth"] == 0
    assert m["requests"].get("200", 0) >= 1 and m["requests"].get("401", 0) >= 1
    assert m["rejected_queue_full"] >= 1


def test_token_is_not_on_the_command_line_or_in_the_log(service):
    cmdline = open(f"/proc/{service.proc.pid}/cmdline", "rb").read().decode()
    assert TOKEN not in cmdline
    assert TOKEN not in service.log.read_text()
