"""reward=metricx (issue 25 part 2): the group composes for every algo and GPU count, its verl config
passes verl's own checks (validate_config, worker config classes, batch splitting), the launcher's dry
run accepts it, and its scorer model is derived from its components: the plan's scorer rows and memory
figure follow from metricx24_xl (or _xxl) without naming it anywhere but reward.sentence_models."""
import itertools

import pytest

from src import verl_config
from src.plan import build_plan
from src.scorer.backends.comet.memory import SCORER_WEIGHTS_EXTRA_GB
from tests.helpers.config_groups import group_options
from tests.helpers.launches import files_under, launch
from tests.helpers.verl_oracle import verl_accepts

COMBOS = list(itertools.product(["grpo", "dapo"], ["2", "3", "4", "8"]))


def test_the_group_is_offered():
    assert "metricx" in group_options("reward")


@pytest.mark.parametrize("algo, gpus", COMBOS, ids=["-".join(c) for c in COMBOS])
def test_metricx_group_is_accepted_by_verl(compose, tmp_path, algo, gpus):
    cfg = compose(["reward=metricx", f"algo={algo}", f"gpus={gpus}", f"paths.results_root={tmp_path}/results"])
    plan = build_plan(cfg, run_dir=str(tmp_path / "run"))
    verl_cfg = verl_config.build(plan, cfg)  # runs verl's validate_config
    assert verl_accepts(verl_cfg)["padding"] == 0
    kw = verl_cfg.reward.custom_reward_function.reward_kwargs
    assert kw.models.metricx == "metricx24_xl" and kw.train_weights.metricx == 1.0
    assert kw.metricx.reference is False  # QE mode: source + translation
    assert "/metricx/" in plan.checkpoint_dir  # no span model runs: no mode in the name (issue 33)


def test_the_scorer_model_and_its_memory_follow_from_the_component(compose, tmp_path):
    base = ["gpus=4", f"paths.results_root={tmp_path}/results"]
    comet = build_plan(compose(["reward=comet", *base]), run_dir=str(tmp_path / "a"))
    xl = build_plan(compose(["reward=metricx", *base]), run_dir=str(tmp_path / "b"))
    xxl = build_plan(compose(["reward=metricx", "reward.sentence_models=[metricx24_xxl]", "memory.gpu_gb=141",
                              *base]), run_dir=str(tmp_path / "c"))
    assert comet.scorer_models == ("cometkiwi_da",)
    assert xl.scorer_models == ("metricx24_xl", "cometkiwi_da")  # the answer's model, the validation reward's
    assert xxl.scorer_models == ("metricx24_xxl", "cometkiwi_da")
    assert [(m.name, m.kind) for m in xl.scorer.models] == [("metricx24_xl", "metricx"), ("cometkiwi_da", "cometkiwi")]
    assert xl.scorer.models[0].tokenizer  # the mT5 tokenizer reaches the service's config
    # bf16 weights: MetricX-24 XL and CometKiwi (conf/scorer's params_b) on the scorer's GPU, plus the comet
    # model's fp32 heads and allocator rounding (measured on an H200); XXL more again
    models = compose([])["scorer"]["models"]
    params = models["metricx24_xl"]["params_b"] + models["cometkiwi_da"]["params_b"]
    assert xl.memory.scorer_weights_gb == pytest.approx(params * 1e9 * 2 / 2**30 + SCORER_WEIGHTS_EXTRA_GB, rel=0.01)
    assert comet.memory.scorer_gb < xl.memory.scorer_gb < xxl.memory.scorer_gb


def test_a_held_out_metricx_adds_its_model_to_another_groups_scorer(compose, tmp_path):
    plan = build_plan(compose(["reward=comet", "reward.validation_models=[cometkiwi_da,metricx24_xl]",
                               f"paths.results_root={tmp_path}/results"]), run_dir=str(tmp_path / "run"))
    assert plan.scorer_models == ("cometkiwi_da", "metricx24_xl")


def test_the_launchers_dry_run_accepts_it(isolated_paths):
    out, paths = isolated_paths
    result = launch(["reward=metricx", "algo=dapo", "gpus=3", "dry_run=true", *paths])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert "metricx24_xl, cometkiwi_da" in result.stdout  # the plan's scorer models row
    assert any(p.name == "verl_config.yaml" for p in files_under(out))


def test_weighting_metricx_without_its_model_is_one_line_before_anything_is_written(isolated_paths):
    out, paths = isolated_paths
    result = launch(["reward=comet", "reward.weights.metricx=1", "dry_run=true", *paths])
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
    assert lines[0] == ("error: reward.weights.metricx=1.0 needs a MetricX-24 model (e.g. metricx24_xl) in "
                        "reward.sentence_models or reward.validation_models")
    assert files_under(out) == []


def test_smoke_tiny_points_metricx_at_the_tiny_build(compose, tmp_path):
    """experiment=smoke_tiny reward=metricx scores with the tiny MetricX-24 that `python -m src.tiny_models qe`
    builds (src/tiny_models/metricx.py MODEL_DIR / TOKENIZER_DIR under the QE build), not the real checkpoint."""
    from pathlib import Path

    from src.tiny_models import metricx

    cfg = compose(["experiment=smoke_tiny", "reward=metricx", f"paths.output_dir={tmp_path}"])
    plan = build_plan(cfg, run_dir=str(tmp_path / "run"))
    (m,) = [m for m in plan.scorer.models if m.name == "metricx24_xl"]
    qe = Path(cfg["model"]["build_dir"]) / "qe"
    assert (m.kind, Path(m.path), Path(m.tokenizer)) == ("metricx", qe / metricx.MODEL_DIR, qe / metricx.TOKENIZER_DIR)
