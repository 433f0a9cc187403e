"""The MetricX-24 backend (kind `metricx`) against google-research/metricx's own inference code
(tests/fixtures/metricx_reference.py, a faithful copy) on the tiny random mT5 the builder makes
(src/tiny_models/metricx.py): the same scores in QE and reference mode, whatever the batching; the
service serves it as it serves comet (auth, dynamic batching, /metrics, a restart on the same port);
start-up mistakes are one line."""
from __future__ import annotations

import json
import random
import shutil
import signal
import socket

import pytest

from src.scorer.backends import backend_for
from src.scorer.backends.interface import StartupError
from src.scorer.backends.metricx.backend import MAX_INPUT_LENGTH, model_input
from src.scorer.config import ModelSpec, ScorerConfig, dump_config
from src.scorer.schema import Item, ItemOptions
from src.tiny_models import metricx as tiny_metricx
from tests.helpers.refusals import assert_one_line_refusal
from tests.helpers.scorer_service import run_serve, start_service, stop_service

TOL = 1e-5


@pytest.fixture(scope="module")
def mx_files(tiny_dir):
    return tiny_dir / tiny_metricx.MODEL_DIR, tiny_dir / tiny_metricx.TOKENIZER_DIR


def mx_spec(mx_files, **kw) -> ModelSpec:
    model_dir, tok_dir = mx_files
    return ModelSpec(path=str(model_dir), kind="metricx", tokenizer=str(tok_dir), **kw)


@pytest.fixture(scope="module")
def reference(mx_files):
    from tests.fixtures import metricx_reference

    model, tokenizer = metricx_reference.load(str(mx_files[0]), str(mx_files[1]))

    def predict(src, mt, ref=None):
        return metricx_reference.predict(model, tokenizer, src, mt, ref)

    predict.tokenizer = tokenizer
    return predict


@pytest.fixture(scope="module")
def runner(mx_files):
    backend = backend_for("metricx")
    spec = mx_spec(mx_files)
    r = backend.load("mx", spec, backend.resolve("mx", spec), "cpu", "fp32")
    r.warm_up()
    return r


@pytest.fixture(scope="module")
def corpus(tiny_dir):
    return (tiny_dir / "spm" / "corpus.txt").read_text(encoding="utf-8").splitlines()


def make_items(corpus, n, with_ref, seed):
    rng = random.Random(seed)
    seg = lambda: " ".join(rng.choice(corpus) for _ in range(rng.randint(1, 3)))  # noqa: E731
    return [dict(src=seg(), mt=seg(), **({"ref": seg()} if with_ref else {})) for _ in range(n)]


def score_in_batches(runner, items, batch):
    items = [Item(**it) for it in items]
    out = []
    for i in range(0, len(items), batch):
        chunk = items[i:i + batch]
        out += runner.run(chunk, [ItemOptions()] * len(chunk), runner.measure(chunk))
    return out


# ---------------------------------------------------------------------------------------------
# Scores against the reference implementation
# ---------------------------------------------------------------------------------------------
def test_input_text_is_metricx24s():
    assert model_input("S", "M", None) == "source: S candidate: M"
    assert model_input("S", "M", "R") == "source: S candidate: M reference: R"
    assert model_input("S", "M", "") == "source: S candidate: M reference: "


@pytest.mark.parametrize("with_ref", [False, True], ids=["qe", "reference"])
def test_scores_equal_the_reference_implementation(runner, reference, corpus, with_ref):
    items = make_items(corpus, 24, with_ref, seed=5 + with_ref)
    expected = [reference(it["src"], it["mt"], it.get("ref")) for it in items]
    got = [r["score"] for r in score_in_batches(runner, items, batch=24)]
    assert max(abs(g - e) for g, e in zip(got, expected)) <= TOL
    # the comparison means something: the tiny model's scores are spread inside (0, 25), not clipped
    assert sum(0.0 < e < 25.0 for e in expected) >= 20 and max(expected) - min(expected) > 2.0


def test_reference_mode_differs_from_qe_mode(runner, corpus):
    items = make_items(corpus, 6, True, seed=9)
    with_ref = score_in_batches(runner, items, 6)
    without = score_in_batches(runner, [{"src": it["src"], "mt": it["mt"]} for it in items], 6)
    assert all(abs(a["score"] - b["score"]) > 1e-4 for a, b in zip(with_ref, without))


def test_batching_and_padding_do_not_change_scores(runner, corpus):
    items = make_items(corpus, 30, False, seed=3)
    one_by_one = [r["score"] for r in score_in_batches(runner, items, 1)]
    for batch in (4, 7, 30):
        got = [r["score"] for r in score_in_batches(runner, items, batch)]
        assert max(abs(g - e) for g, e in zip(got, one_by_one)) <= TOL, batch
    # lengths differ, so the batches above were padded
    costs = [m.cost for m in runner.measure([Item(**it) for it in items])]
    assert max(costs) > 2 * min(costs)


def test_long_input_is_truncated_as_the_reference_does(runner, reference, corpus):
    long_mt = " ".join(corpus[:200])
    items = [{"src": corpus[0], "mt": long_mt}, {"src": corpus[1], "mt": corpus[2], "ref": long_mt},
             {"src": corpus[3], "mt": corpus[4]}]
    measures = runner.measure([Item(**it) for it in items])
    assert [m.truncated for m in measures] == [True, True, False]
    assert measures[0].cost == MAX_INPUT_LENGTH - 1 and "input" in measures[0].cuts  # cut before tokenising again
    got = [r["score"] for r in score_in_batches(runner, items, 3)]
    expected = [reference(it["src"], it["mt"], it.get("ref")) for it in items]
    assert max(abs(g - e) for g, e in zip(got, expected)) <= TOL
    assert [r["truncated"] for r in score_in_batches(runner, items, 3)] == [True, True, False]


def test_tokenizer_built_from_spiece_model_matches_the_t5_tokenizer(runner, reference, corpus):
    """The backend builds mT5's fast tokenizer from spiece.model itself (as transformers' T5Converter
    does); the reference tokenises with the slow T5Tokenizer on the same file."""
    texts = [model_input(a, b, None) for a, b in zip(corpus[:200], corpus[1:201])]
    texts += ["source:  two  spaces  candidate: trailing   ", "source: Ｆｕｌｌｗｉｄｔｈ candidate: ①", "x"]
    for text in texts:
        assert runner._measure_tok.encode(text).ids == reference.tokenizer(text).input_ids, text


def test_empty_mt_gets_the_worst_score_unless_configured():
    assert ModelSpec("/x", "metricx").empty_score == 25.0
    assert ModelSpec("/x", "metricx", empty_mt_score=20.0).empty_score == 20.0
    assert ModelSpec("/x", "cometkiwi").empty_score == 0.0


# ---------------------------------------------------------------------------------------------
# The service
# ---------------------------------------------------------------------------------------------
def write_mx_config(path, mx_files, tiny_dir, **knobs):
    models = {"mx": mx_spec(mx_files),
              "kiwi": ModelSpec(path=str(tiny_dir / "models" / "cometkiwi"), kind="cometkiwi")}
    dump_config(ScorerConfig(models=models, **knobs), path)
    return path


@pytest.fixture(scope="module")
def mx_service(mx_files, tiny_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("mx_service")
    cfg = write_mx_config(d / "scorer.yaml", mx_files, tiny_dir, max_wait_ms=50.0, inference_threads=2)
    svc = start_service(cfg, d / "ready.json")
    yield svc
    assert stop_service(svc, signal.SIGINT) == 0, svc.log.read_text()[-3000:]


def test_health_describes_the_metricx_model(mx_service):
    status, body, _ = mx_service.request("GET", "/health")
    assert status == 200
    assert body["models"]["mx"] == {"kind": "metricx", "class": "MT5ForRegression", "needs_ref": False,
                                    "accepts_ref": True, "word_level": False, "mqm": False,
                                    "max_tokens": MAX_INPUT_LENGTH - 1,
                                    "checkpoint": "metricx"}


def test_service_scores_equal_the_reference_in_both_modes(mx_service, reference, corpus):
    items = make_items(corpus, 8, True, seed=21) + make_items(corpus, 8, False, seed=22)
    random.Random(1).shuffle(items)
    status, body, _ = mx_service.score("mx", items)
    assert status == 200, body
    expected = [reference(it["src"], it["mt"], it.get("ref")) for it in items]
    got = [r["score"] for r in body["results"]]
    assert max(abs(g - e) for g, e in zip(got, expected)) <= TOL
    assert all(set(r) == {"score", "truncated"} for r in body["results"])


def test_service_auth_empty_mt_and_word_level_requests(mx_service):
    item = {"src": "Der Hund bellt.", "mt": "The dog barks."}
    assert mx_service.request("POST", "/score", {"model": "mx", "items": [item]}, token="wrong")[0] == 401
    assert mx_service.request("GET", "/metrics", token=None)[0] == 401
    status, body, _ = mx_service.score("mx", [{"src": "x", "mt": "  "}, item])
    assert status == 200 and body["results"][0] == {"score": 25.0, "truncated": False, "empty_mt": True}
    status, body, _ = mx_service.score("mx", [item], want=["spans"])
    assert status == 400 and "no word-level head" in body["error"]


def test_concurrent_clients_are_batched_and_counted_in_metrics(mx_service, reference, corpus):
    import concurrent.futures

    _, before, _ = mx_service.request("GET", "/metrics")
    items = make_items(corpus, 24, False, seed=31)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda it: mx_service.score("mx", [it]), items))
    assert all(status == 200 for status, _, _ in answers)
    got = [body["results"][0]["score"] for _, body, _ in answers]
    expected = [reference(it["src"], it["mt"]) for it in items]
    assert max(abs(g - e) for g, e in zip(got, expected)) <= TOL
    _, after, _ = mx_service.request("GET", "/metrics")
    assert after["items_by_model"]["mx"] - before["items_by_model"].get("mx", 0) == 24
    new_batches = after["batches"] - before["batches"]
    assert 1 <= new_batches < 24  # single-item requests from 8 clients shared batches


def test_restart_on_the_same_port_serves_the_same_scores(mx_files, tiny_dir, tmp_path, corpus):
    """What the node's watcher does when the service dies (src/node/scorer_service.py): the same
    command on the same port; a killed metricx service comes back with the same answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = write_mx_config(tmp_path / "scorer.yaml", mx_files, tiny_dir, port=port)
    items = make_items(corpus, 5, True, seed=41)
    first = start_service(cfg, tmp_path / "ready1.json")
    status, before, _ = first.score("mx", items)
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=30)
    second = start_service(cfg, tmp_path / "ready2.json")
    try:
        assert second.url == first.url
        status2, after, _ = second.score("mx", items)
        assert status == status2 == 200 and after["results"] == before["results"]
    finally:
        assert stop_service(second) == 0


# ---------------------------------------------------------------------------------------------
# Start-up mistakes: one line, exit 2, before the model loads
# ---------------------------------------------------------------------------------------------
def _serve_one(tmp_path, model: dict):
    cfg = tmp_path / "scorer.yaml"
    cfg.write_text(json.dumps({"models": {"mx": model}}))
    p, secs = run_serve(cfg)
    assert p.returncode == 2 and p.stdout == ""
    return assert_one_line_refusal(p.stderr, "scorer: error: "), secs


def test_missing_checkpoint_dir_is_one_line(tmp_path, mx_files):
    missing = tmp_path / "metricx-24-hybrid-xl-v2p6"
    line, secs = _serve_one(tmp_path, {"path": str(missing), "kind": "metricx", "tokenizer": str(mx_files[1])})
    assert secs < 10 and str(missing / "config.json") in line and "'mx'" in line


def test_missing_tokenizer_is_one_line(tmp_path, mx_files):
    line, _ = _serve_one(tmp_path, {"path": str(mx_files[0]), "kind": "metricx"})
    assert "holds no tokenizer" in line and "models.mx.tokenizer" in line
    line, _ = _serve_one(tmp_path, {"path": str(mx_files[0]), "kind": "metricx",
                                    "tokenizer": str(tmp_path / "mt5-xl")})
    assert "tokenizer directory not found" in line and str(tmp_path / "mt5-xl") in line


def test_a_checkpoint_that_is_not_metricx_is_one_line(tmp_path, mx_files):
    bad = tmp_path / "bad"
    shutil.copytree(mx_files[0], bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "model_type": "xlm-roberta"}))
    line, _ = _serve_one(tmp_path, {"path": str(bad), "kind": "metricx", "tokenizer": str(mx_files[1])})
    assert "expects an mT5 checkpoint" in line
    (bad / "config.json").write_text(json.dumps({**config, "vocab_size": 32128}))
    line, _ = _serve_one(tmp_path, {"path": str(bad), "kind": "metricx", "tokenizer": str(mx_files[1])})
    assert "vocab_size 32128" in line and "250089" in line
    (bad / "config.json").write_text("{not json")
    line, _ = _serve_one(tmp_path, {"path": str(bad), "kind": "metricx", "tokenizer": str(mx_files[1])})
    assert "cannot read" in line
    (bad / "config.json").write_text(json.dumps(config))
    (bad / "model.safetensors").unlink()
    line, _ = _serve_one(tmp_path, {"path": str(bad), "kind": "metricx", "tokenizer": str(mx_files[1])})
    assert "no weights in" in line


def test_backend_keys_of_the_other_backend_are_config_errors(tmp_path, mx_files):
    line, _ = _serve_one(tmp_path, {"path": str(mx_files[0]), "kind": "metricx", "encoder": "/enc"})
    assert "models.mx.encoder only applies to kinds comet-da" in line
    line, _ = _serve_one(tmp_path, {"path": "/x", "kind": "cometkiwi", "tokenizer": "/tok"})
    assert "models.mx.tokenizer only applies to kinds metricx" in line
    line, _ = _serve_one(tmp_path, {"path": "/x", "kind": "metricx", "decoding_threshold": 0.5})
    assert "only applies to word-level kinds" in line


def test_resolve_raises_startup_error_in_process(mx_files, tmp_path):
    with pytest.raises(StartupError, match="checkpoint not found"):
        backend_for("metricx").resolve("mx", ModelSpec(path=str(tmp_path), kind="metricx"))
