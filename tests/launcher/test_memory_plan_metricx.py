"""The memory plan sizes a MetricX-24 scorer (the scorer's metricx backend) from its measured forward peaks
(src/scorer/backends/metricx/__init__.py METRICX_PEAKS, benches/memory.py metricx), and a run with reward=metricx
reserves that on the scorer's GPU. GiB = 2^30 bytes."""
import pytest
import yaml

from src.plan import build_plan
from src.plan.memory import ScorerModel, scorer_need_gb
from src.scorer.backends.comet.memory import SCORER_BYTES_PER_HIDDEN
from src.scorer.backends.metricx import METRICX_BYTES_PER_HEAD_POSITION, METRICX_HEADS, METRICX_PEAKS, METRICX_SEQ_LEN
from src.config import PROJECT_ROOT as REPO

SCORER_MODELS = yaml.safe_load((REPO / "conf" / "scorer" / "default.yaml").read_text(encoding="utf-8"))["models"]


def conf_model(name: str) -> ScorerModel:
    m = SCORER_MODELS[name]
    s = m["encoder_shape"]
    return ScorerModel(name, m["params_b"], s["layers"], s["hidden"], s["ffn"], s["heads"], backend="metricx")


def test_conf_scorer_metricx_entries_match_what_was_measured():
    for name, heads in METRICX_HEADS.items():
        assert SCORER_MODELS[name]["kind"] == "metricx" and SCORER_MODELS[name]["encoder_shape"]["heads"] == heads
        weights = {w for (n, d, _), (w, _) in METRICX_PEAKS.items() if n == name and d == "bf16"}.pop()
        assert SCORER_MODELS[name]["params_b"] * 1e9 * 2 / 2 ** 30 == pytest.approx(weights, rel=0.01)


@pytest.mark.parametrize("row", list(METRICX_PEAKS), ids=["-".join(map(str, r)) for r in METRICX_PEAKS])
def test_metricx_figure_covers_the_measured_forward_peak(row):
    """At least the measured peak of the backend's forward (weights within 1%), at most 10% above it (a
    budget that is not a multiple of 1535 tokens is counted whole)."""
    name, dtype, tokens = row
    weights, acts, _ = scorer_need_gb((conf_model(name),), dtype, tokens)
    m_weights, m_acts = METRICX_PEAKS[row]
    assert acts >= m_acts and weights >= 0.99 * m_weights
    assert weights + acts <= 1.10 * (m_weights + m_acts)


def test_metricx_activations_follow_heads_and_length_not_the_comet_formula():
    """Measured: 12.5 B per token per head per position of the row in bf16, for XL and XXL alike. The comet
    formula (hidden x (layers + 1) x c, c the largest comet ratio) would count 74% of what MetricX-24-XXL holds at
    16384 tokens."""
    assert METRICX_BYTES_PER_HEAD_POSITION["bf16"] == pytest.approx(12.5, abs=0.01)
    xxl = conf_model("metricx24_xxl")
    comet_formula = 16384 * xxl.hidden * (xxl.layers + 1) * SCORER_BYTES_PER_HIDDEN["bf16"] / 2 ** 30
    assert comet_formula < 0.8 * METRICX_PEAKS[("metricx24_xxl", "bf16", 16384)][1]
    # a lone item at the longest input is a batch even under a smaller budget
    _, small, _ = scorer_need_gb((xxl,), "bf16", 512)
    assert small * 2 ** 30 == pytest.approx(METRICX_SEQ_LEN * 64 * METRICX_SEQ_LEN * METRICX_BYTES_PER_HEAD_POSITION["bf16"])


@pytest.mark.parametrize("model", ["metricx24_xl", "metricx24_xxl"])
def test_a_run_with_reward_metricx_reserves_the_metricx_figure(model):
    """reward=metricx (CometKiwi stays the validation model): the scorer hosts both; its activations are the
    MetricX model's (the larger batch), its weights both models'."""
    from src.config import compose_config

    cfg = compose_config(["reward=metricx", f"reward.sentence_models=[{model}]"])
    plan = build_plan(cfg, run_dir="r", gpu_memory_gb=141.0)
    assert [m.name for m in plan.scorer.models] == [model, "cometkiwi_da"]
    mx = plan.scorer.models[0]
    assert mx.kind == "metricx" and mx.tokenizer.endswith("/mt5-xl")
    kiwi = SCORER_MODELS["cometkiwi_da"]
    kiwi_model = ScorerModel("cometkiwi_da", kiwi["params_b"], *kiwi["encoder_shape"].values())
    weights, acts, _ = scorer_need_gb((conf_model(model), kiwi_model), plan.scorer.dtype, plan.scorer.batch_tokens)
    assert plan.scorer.dtype == "bf16" and plan.scorer.batch_tokens == 16384
    assert plan.memory.scorer_weights_gb == pytest.approx(weights)
    assert plan.memory.scorer_activations_gb == pytest.approx(acts)
    assert acts == pytest.approx(scorer_need_gb((conf_model(model),), "bf16", 16384)[1])
    assert acts >= METRICX_PEAKS[(model, "bf16", 16384)][1]
