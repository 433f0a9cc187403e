"""Scorer config: defaults, YAML round trip, one-line validation errors, light imports."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from src.scorer.config import (KINDS, ConfigError, ModelSpec, ScorerConfig, dump_config,
                               from_dict, load_config, to_dict)

from tests.helpers.scorer_service import REPO


def test_defaults_bind_localhost_and_pick_a_free_port():
    cfg = from_dict({"models": {"m": {"path": "/x", "kind": "xcomet"}}})
    assert cfg.host == "127.0.0.1" and cfg.port == 0
    assert cfg.device == "cpu" and cfg.dtype == "fp32"
    assert cfg.models["m"] == ModelSpec(path="/x", kind="xcomet")


def test_round_trip(tmp_path):
    cfg = ScorerConfig(
        models={"xl": ModelSpec(path="hf:Unbabel/XCOMET-XL", kind="xcomet", encoder="/enc",
                                decoding_threshold=0.4),
                "da": ModelSpec(path="/m/da", kind="comet-da", empty_mt_score=-1.0)},
        host="0.0.0.0", port=8123, device="cuda:1", dtype="bf16", batch_tokens=4096,
        max_batch_items=64, max_wait_ms=2.5, max_queue=100, max_body_bytes=65536,
        max_items_per_request=10, torch_threads=4, inference_threads=3, drain_timeout_s=3.0)
    dump_config(cfg, tmp_path / "s.yaml")
    assert load_config(tmp_path / "s.yaml") == cfg
    assert yaml.safe_load((tmp_path / "s.yaml").read_text()) == to_dict(cfg)


def test_kind_capabilities_known_without_loading():
    assert ModelSpec("/x", "comet-da").needs_ref
    assert not ModelSpec("/x", "cometkiwi").needs_ref
    assert ModelSpec("/x", "xcomet").word_level and ModelSpec("/x", "unified").word_level
    assert not ModelSpec("/x", "cometkiwi").word_level
    assert set(KINDS) == {"comet-da", "referenceless", "cometkiwi", "unified", "xcomet", "metricx"}
    assert {k for k, info in KINDS.items() if info.backend != "comet"} == {"metricx"}


def test_inference_threads_one_on_a_gpu_two_on_a_cpu(monkeypatch):
    import os

    from src.scorer.serve import inference_threads

    m = {"m": ModelSpec("/x", "xcomet")}
    assert inference_threads(ScorerConfig(models=m, device="cuda")) == 1
    assert inference_threads(ScorerConfig(models=m, device="cuda:1", inference_threads=2)) == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert inference_threads(ScorerConfig(models=m, device="cpu")) == 2
    assert inference_threads(ScorerConfig(models=m, device="cpu", inference_threads=1)) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert inference_threads(ScorerConfig(models=m, device="cpu")) == 1


GOOD_MODEL = {"path": "/x", "kind": "xcomet"}


@pytest.mark.parametrize("data, needle", [
    ([], "top level must be a mapping"),
    ({}, "models must be a non-empty mapping"),
    ({"models": {}}, "models must be a non-empty mapping"),
    ({"models": {"m": GOOD_MODEL}, "prot": 1}, "unknown key 'prot'"),
    ({"models": {"m": GOOD_MODEL}, "port": 70000}, "port must be in [0, 65535]"),
    ({"models": {"m": GOOD_MODEL}, "port": "80"}, "port must be an integer"),
    ({"models": {"m": GOOD_MODEL}, "port": True}, "port must be an integer"),
    ({"models": {"m": GOOD_MODEL}, "device": "gpu"}, "device must be cpu, cuda or cuda:N"),
    ({"models": {"m": GOOD_MODEL}, "dtype": "float16"}, "dtype must be one of fp32, bf16, fp16"),
    ({"models": {"m": GOOD_MODEL}, "batch_tokens": 0}, "batch_tokens must be >= 1"),
    ({"models": {"m": GOOD_MODEL}, "inference_threads": -1}, "inference_threads must be in [0, 64]"),
    ({"models": {"m": GOOD_MODEL}, "inference_threads": 1.5}, "inference_threads must be an integer"),
    ({"models": {"m": GOOD_MODEL}, "max_wait_ms": float("nan")}, "max_wait_ms must be a number"),
    ({"models": {"m": GOOD_MODEL}, "host": ""}, "host must be a non-empty string"),
    ({"models": {"bad name": GOOD_MODEL}}, "model name 'bad name'"),
    ({"models": {"m": "/x"}}, "models.m must be a mapping"),
    ({"models": {"m": {"kind": "xcomet"}}}, "models.m.path is required"),
    ({"models": {"m": {"path": "/x"}}}, "models.m.kind is required"),
    ({"models": {"m": {"path": "/x", "kind": "bleu"}}}, "models.m.kind must be one of"),
    ({"models": {"m": {"path": "", "kind": "xcomet"}}}, "models.m.path must be a non-empty"),
    ({"models": {"m": {**GOOD_MODEL, "ref": True}}}, "models.m: unknown key 'ref'"),
    ({"models": {"m": {**GOOD_MODEL, "decoding_threshold": 1.5}}}, "decoding_threshold must be in (0, 1)"),
    ({"models": {"m": {"path": "/x", "kind": "comet-da", "decoding_threshold": 0.5}}},
     "only applies to word-level kinds"),
    ({"models": {"m": {**GOOD_MODEL, "empty_mt_score": "low"}}}, "empty_mt_score must be a finite"),
])
def test_bad_config_gives_one_clear_line(tmp_path, data, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert needle in msg
    assert "\n" not in msg and msg.startswith(f"scorer config {path}: ")


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "broken.yaml").write_text("models: {m: [\n")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "broken.yaml")
    assert "invalid YAML" in str(e.value) and "\n" not in str(e.value)


def test_dump_refuses_an_invalid_config(tmp_path):
    with pytest.raises(ConfigError):
        dump_config(ScorerConfig(models={}), tmp_path / "x.yaml")
    assert not (tmp_path / "x.yaml").exists()


def test_config_module_imports_only_stdlib_and_yaml():
    """The train env builds scorer configs with this module; it has no torch/comet/aiohttp."""
    code = ("import sys; import src.scorer.config; "
            "heavy = {'torch', 'comet', 'aiohttp', 'transformers', 'numpy'} & set(sys.modules); "
            "print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_scorer_package_imports_nothing_from_verl_or_the_rest_of_src():
    import ast

    for path in (REPO / "src" / "scorer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level > 1:
                    raise AssertionError(f"{path}: relative import above src/scorer")
                names = [node.module or ""] if node.level == 0 else []
            else:
                continue
            for name in names:
                assert not name.startswith("verl"), f"{path} imports {name}"
                assert not name.startswith("src.") or name.startswith("src.scorer"), f"{path} imports {name}"
