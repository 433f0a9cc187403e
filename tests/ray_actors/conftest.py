"""What tests/ray_actors share: one project config as the launcher builds it (token credit on,
DAPO, the training guard), the tiny policy and data it names, and the environment the runner gives
a node's training processes (src/node/environment.py run_env, plus the scorer's variables that
src/node/scorer_service.py adds, plus the stop file of src/node/training.py).

Ray gets the logical CPUs the plan asks for (3 per GPU + 10, src/plan/run_plan.py): `num_cpus` is
Ray's bookkeeping, not cores, so verl's actors start on this 2-core machine.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.scorer_service import TOKEN

REPO = Path(__file__).resolve().parents[2]
PAIRS = [{"src": "这只猫坐在垫子上。", "tgt": "The cat sat on the mat.", "lang_pair": "zh-en"},
         {"src": "今天天气很好。", "tgt": "The weather is nice today.", "lang_pair": "zh-en"},
         {"src": "我喜欢读书。", "tgt": "I like reading books.", "lang_pair": "zh-en"},
         {"src": "他明天去北京。", "tgt": "He goes to Beijing tomorrow.", "lang_pair": "zh-en"}]
# the full project config: span reward with token-level credit, DAPO (its filter and bound), the
# guard with an allowance, one GPU (the plan then asks Ray for 13 logical CPUs)
OVERRIDES = ["reward=xcomet_xl", "reward.credit=token", "algo=dapo", "scorer.lost_groups_allowed=1", "gpus=1",
             "model=qwen2.5_0.5b", "scorer.placement=cpu", "batch.prompts_per_step=4", "batch.samples_per_prompt=4",
             "batch.mini_batch_prompts=4", "batch.micro_batch_per_gpu=4", "batch.log_prob_micro_batch_per_gpu=8"]
# verl needs the policy only up to the GPU boundary (tokenizer, RLHFDataset): the tiny one
MODEL_DIR = "Qwen2.5-0.5B-Instruct"  # conf/model/qwen2.5_0.5b.yaml path under paths.model_root


@dataclass
class Project:
    root: Path
    composed: dict
    plan: object
    verl_config: object     # verl's DictConfig, validated by verl
    snapshot: Path          # holds verl_config.yaml, as the launcher's snapshot does

    def node_env(self, scorer_url: str, scorer_log: str) -> dict:
        """The environment of this node's training processes, as the runner builds it."""
        from src.node import environment
        from src.trainer.stop_reason import STOP_FILE_ENV

        # nothing of this test process leaks in: no PYTHONPATH (the runner's own code root is
        # what makes `src` importable), no Ray, Slurm or scorer variables of the caller
        environ = {k: v for k, v in os.environ.items()
                   if k != "PYTHONPATH" and not k.startswith(("SLURM_", "RAY_", "QE_"))}
        env, _ = environment.run_env(self.plan, environ)
        env.update(QE_SCORER_URL=scorer_url, QE_SCORER_TOKEN=TOKEN, QE_SCORER_LOG=scorer_log,
                   **{STOP_FILE_ENV: str(self.root / "training_stop.txt")})
        # Ray's socket paths must stay under 108 bytes: not under pytest's tmp dirs
        env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="qe-ray-", dir="/tmp")
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        return env


@pytest.fixture(scope="session")
def project(tmp_path_factory) -> Project:
    from src import verl_config
    from src.config import compose_config
    from src.data.prepare import main as prepare
    from src.plan import build_plan
    from src.tiny_models.policy import ensure_built

    root = tmp_path_factory.mktemp("ray_actors")
    ensure_built(root / "models" / MODEL_DIR)
    cfg = compose_config([*OVERRIDES, f"paths.data_root={root}/data", f"paths.model_root={root}/models",
                          f"paths.results_root={root}/results"])
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in PAIRS), encoding="utf-8")
    for split, key in (("train", "train_files"), ("val", "val_files")):
        assert prepare(["--input", str(pairs), "--directions", "both", "--split", split, "--name", "wmt_zh_en",
                        "--template", cfg["data"]["template"], "--tokenizer", str(root / "models" / MODEL_DIR),
                        "--out", cfg["data"][key]]) == 0
    plan = build_plan(cfg, run_dir=str(root / "run"))
    v = verl_config.build(plan, cfg)
    snapshot = root / "run" / "snapshot"
    snapshot.mkdir(parents=True)
    (snapshot / "verl_config.yaml").write_text(verl_config.to_yaml(v), encoding="utf-8")  # the launcher's writer
    return Project(root=root, composed=cfg, plan=plan, verl_config=v, snapshot=snapshot)
