"""`python -m src.launch experiment=smoke_tiny`: the smoke run with nothing to download, up to the launch.

- a dry run works in a fresh-clone-like copy of the checkout (no conf/local/, no models/, no data/, no
  .cache/) and builds nothing;
- the builds (tiny policy, tiny QE checkpoints, prompts) load where they are used: the prompts in verl's
  RLHFDataset through the tiny tokenizer's chat template; a second prepare reuses all three builds;
- shapes vLLM cannot serve are refused before anything is built; a node without the GPUs it asked for
  (accelerator=cuda given) is told so before anything is built; with no GPU and no accelerator given, the
  launch picks the CPU loop and says so.
The real launch, every stage PASS on verl's own trainer on this machine's CPU: tests/loop/test_smoke_on_cpu.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from src.config import compose_config
from src.pipeline import tiny_build
from src.plan import build_plan
from tests.helpers.env import LEAKY_ENV

REPO = Path(__file__).resolve().parents[2]


def _fresh_clone(dst: Path) -> Path:
    """The files a clone of this working tree has (tracked + new, not ignored), minus conf/local/."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = REPO / rel
        if rel.startswith("conf/local/") or not src.is_file():
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)
    return dst


def test_dry_run_works_in_a_fresh_clone_without_local_config_models_or_data(tmp_path):
    clone = _fresh_clone(tmp_path / "clone")
    assert not (clone / "conf" / "local").exists() and not (clone / ".cache").exists()
    assert not (clone / "models").exists() and not (clone / "data").exists()
    env = {k: v for k, v in os.environ.items() if k not in LEAKY_ENV and not k.startswith("SLURM_")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "src.launch", "experiment=smoke_tiny", "dry_run=true"], cwd=clone,
                          env=env, capture_output=True, text=True, timeout=600)
    print(f"fresh-clone dry run: {time.perf_counter() - t0:.1f} s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Run plan: tiny_qwen2 / comet / grpo" in proc.stdout and "dry run: nothing started" in proc.stdout
    assert not (clone / ".cache" / "tiny-models").exists()  # a dry run builds nothing
    (snap,) = (clone / "outputs" / "runs").glob("*/snapshot")
    verl = yaml.safe_load((snap / "verl_config.yaml").read_text())
    # the taught policy, on the synthetic task's prompts (issue 51, finding 17)
    assert verl["actor_rollout_ref"]["model"]["path"] == f"{clone}/.cache/tiny-models/learn/taught"
    assert verl["data"]["train_files"] == f"{clone}/.cache/tiny-models/learn/data/train.parquet"
    assert verl["actor_rollout_ref"]["model"]["override_config"]["attn_implementation"] == "sdpa"
    # in the config verl validates and trains with, not only in ours
    assert verl["actor_rollout_ref"]["rollout"]["enforce_eager"] is True
    assert verl["actor_rollout_ref"]["rollout"]["agent"]["num_workers"] == 1 and verl["reward"]["num_workers"] == 1
    assert json.loads((snap / "plan.json").read_text())["attention"]["implementation"] == "sdpa"


def test_preset_plans_on_one_gpu_with_the_same_stages_as_smoke(tmp_path):
    composed = compose_config(["experiment=smoke_tiny", f"paths.output_dir={tmp_path}"])
    smoke_cfg = compose_config(["experiment=smoke", f"paths.output_dir={tmp_path}"])
    assert composed["smoke"] is True and composed["gpus"] == 1 and composed["model"]["name"] == "tiny_qwen2"
    # the smoke's trainer, but for the stall guard's first-step floor: tiny models start in minutes
    first_step = "stall_first_step_s"
    assert {**composed["trainer"], first_step: 0} == {**smoke_cfg["trainer"], first_step: 0}
    assert composed["trainer"][first_step] == 900 < smoke_cfg["trainer"][first_step]
    assert composed["batch"] == smoke_cfg["batch"]
    assert composed["scorer"]["placement"] == "shared"
    plan = build_plan(composed, run_dir=str(tmp_path / "run"), flash_attn=None)
    assert plan.world_size == 1 and plan.scorer_models == ("cometkiwi_da",) and plan.adjustments == ()
    assert plan.scorer.training_gpu_index == 0  # shared: the scorer sits on the one training GPU
    # what smoke_tiny cuts from the start-up (its yaml says why); experiment=smoke keeps vLLM's torch.compile and
    # CUDA graphs and verl's worker counts, the production path on a new cluster
    assert composed["verl"]["actor_rollout_ref"] == {"rollout": {"enforce_eager": True, "agent": {"num_workers": 1}}}
    assert composed["verl"]["reward"] == {"num_workers": 1}
    assert set(smoke_cfg["verl"]) == {"data"}


def test_prompts_load_in_verls_dataset_and_a_second_prepare_reuses_every_build(tmp_path, taught_build, capsys):
    """The first prepare builds the five parts (or reuses those learn_tiny's build made: the session's one build
    dir, tests/conftest.py), the second reuses all five. Building all five from nothing: the smoke's own launch
    (tests/loop/test_smoke_on_cpu.py)."""
    build_dir = taught_build
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    composed = compose_config(["experiment=smoke_tiny", f"model.build_dir={build_dir}",
                               f"paths.output_dir={tmp_path}/out"])
    plan = build_plan(composed, run_dir=str(tmp_path / "run"), flash_attn=None)
    tiny_build.prepare(plan, composed)
    first = capsys.readouterr().out
    assert first.count(" built in ") + first.count(" reused in ") == 5, first
    assert "smoke_tiny: taught policy" in first, first
    t0 = time.perf_counter()
    tiny_build.prepare(plan, composed)
    again = capsys.readouterr().out
    assert again.count(" reused in ") == 5, again
    assert time.perf_counter() - t0 < 60  # no model is built again (a scorer-env start is most of it)

    tok = AutoTokenizer.from_pretrained(composed["model"]["path"], local_files_only=True)
    cfg = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": composed["data"]["max_prompt_length"],
                            "filter_overlong_prompts": True, "truncation": "error", "return_raw_chat": True,
                            "cache_dir": str(tmp_path / "rlhf_cache")})
    ds = RLHFDataset(data_files=[composed["data"]["val_files"]], tokenizer=tok, config=cfg)
    assert len(ds) == 48  # the task's held-out sentences, none filtered as overlong
    messages = ds[0]["raw_prompt"]
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    # the rl template: one user turn asking for <translate> tags, in the tiny tokenizer's chat frame
    assert rendered.startswith("<|im_start|>user\n") and rendered.endswith("<|im_start|>assistant\n")
    assert "<translate>" in rendered


# --- the vLLM 0.24.0 constraints on the tiny policy (src/tiny_models/vllm_rules.py) ---

def _problems(hidden=128, heads=2, kv=1, vocab=640, tok=640, block=16):
    from src.tiny_models import vllm_rules

    return vllm_rules.problems(hidden_size=hidden, num_attention_heads=heads, num_kv_heads=kv, vocab_size=vocab,
                               tokenizer_len=tok, block_size=block)


@pytest.mark.parametrize("change, words", [
    (dict(hidden=72), "head size 36"),            # not a multiple of 8 (FlashAttention)
    (dict(hidden=1024, heads=2), "at most 256"),  # head size 512
    (dict(hidden=32, heads=2), "Triton"),         # head size 16 < 32
    (dict(vocab=600, tok=600), "multiple of 64"),
    (dict(vocab=704, tok=640), "!= len(tokenizer)"),
    (dict(block=24), "block size 24"),
    (dict(kv=3), "num_kv_heads 3"),
])
def test_each_vllm_rule_is_enforced(change, words):
    assert _problems() == []
    found = _problems(**change)
    assert len(found) == 1 and words in found[0], found


@pytest.mark.parametrize("flag, value, says", [
    ("--hidden-size", "72", "error: vLLM 0.24.0 cannot serve this model: head size 36"),
    # a multiple of 64, but fewer rows than the BPE trainer made tokens: found once the tokenizer is trained
    ("--vocab-size", "512", "error: vocab_size=512 is below the 576 tokens the BPE trainer made"),
])
def test_the_builder_refuses_a_shape_vllm_cannot_serve_and_leaves_nothing(tmp_path, flag, value, says):
    out = tmp_path / "policy"
    proc = subprocess.run([sys.executable, "-m", "src.tiny_models", "policy", str(out), flag, value],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(says), proc.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_a_launch_with_such_a_shape_or_block_size_stops_with_one_line_and_builds_nothing(tmp_path):
    from src.pipeline import RunError

    for override, words in (("model.hidden_size=72", "head size 36"),
                            ("+verl.actor_rollout_ref.rollout.engine_kwargs.vllm.block_size=24", "block size 24")):
        composed = compose_config(["experiment=smoke_tiny", f"model.build_dir={tmp_path}/tiny", override,
                                   f"paths.output_dir={tmp_path}/out"])
        plan = build_plan(composed, run_dir=str(tmp_path / "run"), flash_attn=None)
        with pytest.raises(RunError) as err:
            tiny_build.prepare(plan, composed)
        assert "smoke_tiny: building the tiny policy failed" in str(err.value) and words in str(err.value)
        assert "\n" not in str(err.value) and not (tmp_path / "tiny").exists()


def test_a_node_without_gpus_is_told_so_before_anything_is_built(tmp_path):
    """Issue 33: without dry_run on a machine with no GPU, the tiny models were built (34 s) before the
    preflight said the node has no GPU. The node's checks come first; nothing is built or written."""
    from tests.helpers.launches import launch

    build, out = tmp_path / "tiny-models", tmp_path / "out"
    # accelerator=cuda given: the GPU run was asked for, so it is not moved to the CPU loop
    result = launch(["experiment=smoke_tiny", "accelerator=cuda", f"model.build_dir={build}",
                     f"paths.output_dir={out}", f"paths.results_root={tmp_path}/results"])
    # one line: verl's "Disabled critic" warning no longer precedes it (issue 33, finding 15)
    errors = result.stderr.splitlines()
    assert result.returncode == 2 and len(errors) == 1, result.stderr
    assert errors[0].startswith("error: this node needs 1 GPUs for gpus=1") and "but 0 are visible" in errors[0]
    assert not build.exists() and not (tmp_path / "results").exists()
    assert [p for p in out.rglob("*") if p.is_file()] == []  # no run dir, no snapshot


@pytest.mark.parametrize("argv, moved", [
    (["experiment=smoke_tiny"], True),
    (["experiment=smoke_tiny", "seed=2"], True),
    (["experiment=smoke_tiny", "accelerator=cuda"], False),   # asked for: refused later if there is no GPU
    (["experiment=smoke_tiny", "dry_run=true"], False),       # a dry run plans the GPU run as asked
    (["--multirun", "experiment=smoke_tiny", "seed=1,2"], False),
    (["experiment=smoke"], False),                            # real weights: a GPU run
    (["experiment=learn_tiny"], True),
    (["experiment=learn_tiny", "accelerator=cuda"], False),
])
def test_smoke_tiny_without_a_gpu_runs_on_the_cpu_loop_and_says_so(argv, moved):
    from src.pipeline import on_cpu_without_gpu

    out, note = on_cpu_without_gpu(argv, gpu_absent=lambda: True)
    assert (out == argv + ["accelerator=cpu"]) if moved else (out == argv and note is None)
    if moved:
        assert note == (f"no GPU on this machine: {argv[0]} runs on the CPU (accelerator=cpu; "
                        "docs/cpu-loop.md)")
    assert on_cpu_without_gpu(argv, gpu_absent=lambda: False) == (argv, None)  # a GPU node: as asked
