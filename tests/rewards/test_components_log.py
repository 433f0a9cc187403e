"""The per-worker reward components sidecar, read back by src/report exactly as a report does."""
from __future__ import annotations

import json

from src.report.run_files import REWARD_COMPONENTS_DIR, load_reward_components
from src.rewards import components_log
from src.rewards.compute import compute_score
from tests.helpers.reward_config import extra_info, kwargs_for
from tests.helpers.reward_example import REF, RESPONSE, SRC


def test_written_when_the_env_var_is_set_and_read_by_the_report(loop, scorer_env, monkeypatch, tmp_path):
    out_dir = tmp_path / REWARD_COMPONENTS_DIR
    monkeypatch.setenv(components_log.ENV_DIR, str(out_dir))
    kw = kwargs_for("comet")
    rows = [("train", 3, RESPONSE), ("train", 3, "no format"), ("val", 4, RESPONSE)]
    results = [loop.run_until_complete(compute_score("wmt/zh-en", r, REF, extra_info(SRC, split=split,
                                                                                      global_steps=step), **kw))
               for split, step, r in rows]
    files = list(out_dir.glob("*.jsonl"))
    assert len(files) == 1  # one file per worker process
    lines = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert [(ln["step"], ln["split"]) for ln in lines] == [(3, "train"), (3, "train"), (4, "val")]
    assert lines[0]["kiwi"] == results[0]["kiwi"] and lines[0]["score"] == results[0]["score"]
    assert "kiwi" not in lines[1]  # not computed: left out, not written as 0
    assert all(isinstance(v, (int, float)) for ln in lines for k, v in ln.items() if k not in ("split", "step"))

    df = load_reward_components(out_dir)
    assert list(df["split"]) == ["train", "train", "val"]
    assert df.loc[0, "bleu"] == results[0]["bleu"]


def test_nothing_written_without_the_env_var(loop, no_scorer_env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loop.run_until_complete(compute_score("wmt/zh-en", "bad", REF, extra_info(SRC), **kwargs_for("comet")))
    assert list(tmp_path.iterdir()) == []


def test_step_is_the_rollout_policy_version():
    assert components_log.step_of({"global_steps": 7}) == 7
    assert components_log.step_of({"max_global_steps": 2}) == 2
    assert components_log.step_of({}) is None
