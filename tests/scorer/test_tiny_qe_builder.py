"""The tiny QE checkpoints experiment=smoke_tiny builds (`python -m src.tiny_models qe OUT`, scorer env):
every kind the reward groups name loads with unbabel-comet through the scorer's own loader, with the
encoder dir conf/scorer/tiny.yaml gives, and scores; a complete tree is reused, an
incomplete or older one rebuilt."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest
import yaml

from src.tiny_models import atomic, qe
from tests.helpers.scorer_service import REPO

# conf/scorer/tiny.yaml (experiment=smoke_tiny): scorer model name -> (tiny model dir, encoder dir, scorer kind)
SMOKE_TINY = {"cometkiwi_da": ("cometkiwi", "xlmr", "cometkiwi"), "comet_da": ("comet-da", "xlmr", "comet-da"),
              "xcomet_xl": ("xcomet", "xlmr-xl", "xcomet")}


def _build(out):
    proc = subprocess.run([sys.executable, "-m", "src.tiny_models", "qe", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    return lines[-2], lines[-1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke_tiny") / "qe"
    status, path = _build(out)
    assert status == "tiny QE checkpoints built" and path == str(out.resolve())
    return out


def test_the_preset_names_the_checkpoints_the_builder_writes(built):
    preset = yaml.safe_load((REPO / "conf" / "scorer" / "tiny.yaml").read_text(encoding="utf-8"))
    for name, (model_dir, encoder, _) in SMOKE_TINY.items():
        spec = preset["models"][name]
        assert spec["path"] == f"${{model.build_dir}}/qe/models/{model_dir}/checkpoints/model.ckpt"
        assert spec["encoder"] == f"${{model.build_dir}}/qe/encoders/{encoder}"
        assert spec["encoder_shape"] == qe.ENCODER_SHAPE  # what the memory plan sizes them by
        assert qe.checkpoint(built, model_dir).is_file() and (built / "encoders" / encoder / "config.json").is_file()


@pytest.mark.parametrize("name", sorted(SMOKE_TINY))
def test_each_kind_loads_through_the_scorer_with_the_presets_encoder_and_scores(built, name):
    import torch

    from src.scorer.config import ModelSpec
    from src.scorer.backends.comet.loading import load_comet_model

    model_dir, encoder, kind = SMOKE_TINY[name]
    spec = ModelSpec(path=str(qe.checkpoint(built, model_dir)), kind=kind, encoder=str(built / "encoders" / encoder))
    model = load_comet_model(name, spec, qe.checkpoint(built, model_dir))
    sample = {"src": "今天天气很好。", "mt": "The weather is nice today.", "ref": "It is a fine day."}
    with torch.inference_mode():
        out = model.predict([sample], batch_size=1, gpus=0, progress_bar=False)
    assert len(out.scores) == 1 and math.isfinite(out.scores[0])


def test_a_complete_tree_is_reused_and_an_older_or_incomplete_one_rebuilt(built):
    t0 = time.perf_counter()
    status, _ = _build(built)
    assert status == "tiny QE checkpoints reused" and time.perf_counter() - t0 < 60
    marker = built / atomic.MARKER
    assert json.loads(marker.read_text()) == {"builder": "qe", "hash": qe.builder_hash()}
    marker.write_text(json.dumps({"builder": "qe", "hash": "an-older-builder"}))
    assert _build(built)[0] == "tiny QE checkpoints built"
    marker.unlink()  # e.g. a tree copied in half by hand
    assert _build(built)[0] == "tiny QE checkpoints built" and marker.is_file()
    assert not list(built.parent.glob(atomic.TMP_PREFIX + "*"))  # the old trees are gone


def test_the_metricx_checkpoint_loads_through_the_scorers_backend_and_scores(built):
    """The same build holds a MetricX-24 shaped model and mT5-style tokenizer (src/tiny_models/metricx.py),
    as the real checkpoints come: config.json naming MT5ForRegression, a tokenizer dir with spiece.model."""
    import json as _json

    from src.scorer.backends import backend_for
    from src.scorer.config import ModelSpec
    from src.scorer.schema import Item, ItemOptions
    from src.tiny_models import metricx

    model_dir, tok_dir = built / metricx.MODEL_DIR, built / metricx.TOKENIZER_DIR
    assert _json.loads((model_dir / "config.json").read_text())["architectures"] == ["MT5ForRegression"]
    assert (tok_dir / "spiece.model").is_file() and not (tok_dir / "tokenizer.json").exists()
    spec = ModelSpec(path=str(model_dir), kind="metricx", tokenizer=str(tok_dir))
    backend = backend_for("metricx")
    runner = backend.load("mx", spec, backend.resolve("mx", spec), "cpu", "fp32")
    items = [Item(src="今天天气很好。", mt="The weather is nice today."),
             Item(src="今天天气很好。", mt="The weather is nice today.", ref="It is a fine day.")]
    scores = [r["score"] for r in runner.run(items, [ItemOptions()] * 2, runner.measure(items))]
    assert all(0.0 < s < 25.0 for s in scores) and scores[0] != scores[1]
