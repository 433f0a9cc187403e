"""Run identity: every verl key classified, the id ignores names/paths and override order,
and a checkpoint dir refuses a run with another training config."""
import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from src import verl_config
from src.record import identity as run_identity
from src.config import compose_config
from src.pipeline import identify
from src.plan import build_plan, run_names
from tests.helpers.run_identity import identified

REPO = Path(__file__).resolve().parents[2]


def _verl_keys() -> dict:
    # verl's own ppo_trainer, composed the way src/verl_config.compose composes it
    return run_identity._flatten(OmegaConf.to_container(verl_config.compose([]), resolve=False))


def test_every_verl_key_is_either_training_or_excluded():
    unclassified = [k for k in _verl_keys() if run_identity.classify(k) is None]
    assert unclassified == [], ("verl has keys neither training nor excluded; add each to "
                                f"src/record/identity.py EXCLUDED (with why) or the training rules: {unclassified}")


def test_every_exclusion_rule_still_names_a_verl_key():
    keys = list(_verl_keys())
    stale = [p for p, _ in run_identity.EXCLUDED if not any(run_identity._matches(k, p) for k in keys)]
    assert stale == [], f"exclusion rules that match no key of verl's ppo_trainer (renamed upstream?): {stale}"


def test_core_training_keys_are_in_the_identity_and_names_are_not():
    for key in ("actor_rollout_ref.actor.optim.lr", "data.train_files", "actor_rollout_ref.rollout.n",
                "algorithm.adv_estimator", "trainer.total_training_steps", "trainer.n_gpus_per_node"):
        assert run_identity.classify(key) == "training", key
    for key in ("trainer.default_local_dir", "trainer.experiment_name", "trainer.save_freq", "trainer.logger",
                "trainer.resume_mode", "actor_rollout_ref.actor.profiler.tool",
                "actor_rollout_ref.rollout.trace.experiment_name", "ray_kwargs.ray_init.num_cpus"):
        assert run_identity.classify(key) == "excluded", key


def test_id_ignores_where_it_logs_and_saves_but_not_what_it_trains(tmp_path):
    plan, verl_cfg, ident = identified(["trainer.lr=3e-6"], tmp_path)
    assert len(plan.run_id) == 8 and int(plan.run_id, 16) >= 0
    assert verl_cfg.trainer.default_local_dir == plan.checkpoint_dir
    assert plan.checkpoint_dir.endswith(f"/gpus4/seed1_lr3e-6-{plan.run_id}")
    assert verl_cfg.trainer.experiment_name == plan.wandb_run_name
    assert verl_cfg.actor_rollout_ref.rollout.trace.experiment_name == plan.wandb_run_name
    assert "trainer.default_local_dir" not in ident and "actor_rollout_ref.actor.optim.lr" in ident
    logging_only = identified(["trainer.lr=3e-6", "trainer.save_freq=7", "trainer.test_freq=3",
                                "logger.backends=[console]"], tmp_path)[0]
    assert logging_only.run_id == plan.run_id
    other_lr = identified(["trainer.lr=1e-6"], tmp_path)[0]
    assert other_lr.run_id != plan.run_id
    # a results root elsewhere: another dir, the same training config
    elsewhere = compose_config(["trainer.lr=3e-6", f"paths.results_root={tmp_path}/elsewhere"])
    p2 = build_plan(elsewhere, run_dir="x")
    assert identify(p2, elsewhere, ["trainer.lr=3e-6"], verl_config.build(p2, elsewhere), None)[0].run_id == plan.run_id


def test_every_roles_profiler_writes_under_its_own_runs_dir(tmp_path):
    """Issue 33: each role's profiler.save_path (verl derives it from global_profiler.save_path) held the
    dir without seed or id, so every run of a sweep profiled into one dir."""
    plan, verl_cfg, _ = identified(["reward=comet", "profile.enable=true"], tmp_path)
    other, other_cfg, _ = identified(["reward=comet", "profile.enable=true", "seed=2"], tmp_path)
    assert verl_cfg.global_profiler.save_path == f"{plan.checkpoint_dir}/profile"
    roles = {"actor_rollout_ref.actor", "actor_rollout_ref.ref", "actor_rollout_ref.rollout", "critic"}
    paths = {role: OmegaConf.select(verl_cfg, f"{role}.profiler.save_path") for role in roles}
    assert paths == {role: verl_cfg.global_profiler.save_path for role in roles}
    assert plan.run_id in paths["critic"] and other.run_id != plan.run_id
    assert {OmegaConf.select(other_cfg, f"{role}.profiler.save_path") for role in roles} == {
        f"{other.checkpoint_dir}/profile"}


def test_name_is_read_from_the_identity_in_a_researchers_words():
    base = {"actor_rollout_ref.actor.optim.lr": 1e-6, "actor_rollout_ref.rollout.n": 8,
            "actor_rollout_ref.actor.rollout_n": 8, "data.train_files": "/d/wmt_zh_en/train.parquet",
            "data.val_files": "/d/wmt_zh_en/val.parquet", "trainer.total_training_steps": None,
            "reward.custom_reward_function.reward_kwargs.guards.repetition.enable": True,
            "reward.custom_reward_function.reward_kwargs.train_weights.bleu": 1.0}
    run = {**base, "actor_rollout_ref.actor.optim.lr": 3e-6, "actor_rollout_ref.rollout.n": 16,
           "actor_rollout_ref.actor.rollout_n": 16, "data.train_files": "/x/mypairs/train.parquet",
           "data.val_files": "/x/mypairs/val.parquet", "trainer.total_training_steps": 50,
           "reward.custom_reward_function.reward_kwargs.guards.repetition.enable": False,
           "reward.custom_reward_function.reward_kwargs.train_weights.bleu": 0.5}
    derived = frozenset({"actor_rollout_ref.actor.rollout_n"})  # verl's yaml copies rollout.n there

    def name(ident, preset=None):
        return run_names.run_name(preset, 3, run_names.differences(ident, base, derived), run_names.LIMIT)

    assert name(run) == "seed3_lr3e-6_n16_bleu0.5_data-mypairs_steps50_repetition-off"
    assert name(dict(reversed(list(run.items())))) == name(run)
    assert name(base) == "seed3" and name(base, "smoke_tiny") == "smoke_tiny_seed3"
    # another val set is named beside the train set's tag
    flores = {**run, "data.val_files": "/x/flores_dev.parquet"}
    assert "_data-mypairs_valdata-flores_dev_" in name(flores)
    # every word, with the key it reads and both values: what the plan and the identity file list
    found = run_names.differences(run, base, derived)
    assert found[0] == run_names.Difference("lr3e-6", "actor_rollout_ref.actor.optim.lr", 1e-6, 3e-6)


def test_batch_settings_are_named_by_the_words_of_the_batch_not_by_verls_keys(tmp_path):
    """Issue 51 (finding 7): `batch.prompts_per_step=7` named its dir
    `seed1_data.train_batch_size24_sampler_kwargs.train_batch_size24-<id>`. The plan trains 24 prompts per
    step (a multiple of the mini batch), so the name says 24: it claims only what verl trains."""
    plan, _, _ = identified(["batch.prompts_per_step=7"], tmp_path)
    assert plan.checkpoint_dir.endswith(f"/gpus4/seed1_prompts24-{plan.run_id}")
    assert plan.wandb_run_name == f"qwen2.5_3b-grpo-g4-seed1_prompts24-{plan.run_id}"
    assert [d["word"] for d in plan.differs_from_preset] == ["prompts24"]
    assert plan.differs_from_preset[0]["key"] == "data.train_batch_size"
    named = identified(["reward.weights.kiwi=0.5", "trainer.lr=2e-6", "seed=2"], tmp_path)[0]
    assert named.checkpoint_dir.endswith(f"/seed2_lr2e-6_kiwi0.5-{named.run_id}")


def test_a_weight_that_brings_a_component_in_or_out_is_named_alone_and_its_guard_only_where_set(tmp_path):
    """The term reward joins a run with its validation weight, clip and stuffing guard at the group's values (and
    leaves with them): `reward.weights.term=1` was named `seed1_term1.0_valterm0.0_maxextra1_+4more`. Those are
    read against the preset with the run's weight, so the weight is the word; a guard value set is still one."""
    for overrides, words in ((["reward.weights.term=1"], ["term1.0"]),
                             (["reward.weights.term=1", "reward.guards.term_stuffing.max_extra=2"],
                              ["term1.0", "maxextra2"]),
                             (["experiment=learn_terms_tiny", "reward.weights.term=0"], ["term0.0"]),
                             (["experiment=learn_terms_tiny"], [])):
        plan = identified(overrides, tmp_path)[0]
        assert [d["word"] for d in plan.differs_from_preset] == words, (overrides, plan.differs_from_preset)
        assert plan.checkpoint_dir.endswith("_".join(["seed1", *words]) + f"-{plan.run_id}"), plan.checkpoint_dir
    # the guard is in the run with the weight, and out of it without: what the name leaves out, verl still trains
    with_term = identified(["reward.weights.term=1"], tmp_path)[2]
    assert with_term["reward.custom_reward_function.reward_kwargs.guards.term_stuffing.enable"] is True


def test_a_preset_run_is_named_by_its_preset_and_what_differs_from_it(tmp_path):
    """Issue 51 (finding 7): `experiment=smoke_tiny` made a 185-character path: its name listed every key the
    preset sets, read against the plain model/reward/algo. Read against the preset, it is the preset's name."""
    plan = identified(["experiment=smoke_tiny"], tmp_path)[0]
    assert plan.checkpoint_dir.endswith(f"/tiny_qwen2/comet/grpo/gpus1/smoke_tiny_seed1-{plan.run_id}")
    assert len(plan.checkpoint_dir) - len(str(tmp_path)) < 80 and plan.differs_from_preset == ()
    lr = identified(["experiment=smoke_tiny", "trainer.lr=2e-6", "seed=2"], tmp_path)[0]
    assert lr.wandb_run_name == f"tiny_qwen2-grpo-g1-smoke_tiny_seed2_lr2e-6-{lr.run_id}"


def test_names_stay_within_the_limit_and_unique_by_the_run_id():
    base = {f"actor_rollout_ref.actor.k{i}": 0 for i in range(30)}
    run = {k: 1000 + i for i, k in enumerate(base)}
    found = run_names.differences(run, base)
    assert len(found) == 30
    for model, algo, world in (("qwen2.5_3b", "grpo", 4), ("tiny_qwen2", "grpo+rloo", 16),
                               ("a_very_long_model_name_of_someones_own_fine_tune_v2", "dapo", 8)):
        budget = run_names.name_budget(model, algo, world, "0123abcd")
        name = run_names.run_name("qwen3b_xcomet_3gpu", 12, found, budget)
        named = run_names.names(model, algo, world, name, "0123abcd")
        assert len(named.leaf) <= run_names.LIMIT and len(named.wandb_name) <= run_names.LIMIT, named
        assert named.leaf.endswith("-0123abcd") and named.wandb_name.endswith(named.leaf)
        # the words left out are counted, never cut in the middle
        assert re.search(r"_\+\d+more-0123abcd$", named.leaf), named.leaf
        assert name.startswith("qwen3b_xcomet_3gpu_seed12")
        kept = [w for w in name.split("_+")[0][len("qwen3b_xcomet_3gpu_seed12_"):].split("_") if w]
        assert kept == [d.word for d in found if d.word in kept]  # in the table's order
        assert int(re.search(r"\+(\d+)more", name).group(1)) == len(found) - len(kept)
        # the first nine reproductions fit too
        assert len(run_names.names(model, algo, world, name, "0123abcd", reproduction=9).wandb_name) <= run_names.LIMIT
    # the same words, another id: another dir
    assert run_names.names("m", "grpo", 4, "seed1", "0123abcd").leaf != run_names.names("m", "grpo", 4, "seed1",
                                                                                           "89abcdef").leaf


def _training_keys() -> list[str]:
    return [k for k in _verl_keys() if run_identity.classify(k) == "training"]


def test_every_key_the_launcher_sets_has_a_word_and_every_other_falls_back_readably(tmp_path):
    """Issue 51 (finding 7): one table of words (src/plan/run_names.py WORDS). Every training key the
    launcher writes into verl's config (VERL_KEYS, whose config keys the schema declares) and every key of the
    reward's settings has a word there (or is marked a copy); any other verl key a `+verl.` override may
    change falls back to a short, readable form."""
    set_by_launcher = [k.lstrip("+") for k, _ in verl_config.VERL_KEYS]
    ident = {**identified(["reward=comet"], tmp_path)[2], **identified(["algo=dapo"], tmp_path)[2]}
    # the identity's keys the launcher writes (a dict it writes, such as the reward's settings, key by key)
    launcher_keys = [k for k in ident if any(k == v or k.startswith(v + ".") for v in set_by_launcher)]
    reward_keys = [k for k in ident if k.startswith("qe_scorer.")]
    # keys of the reward settings whose values are its setup, not a knob one turns (the languages list,
    # the split names, the guards' thresholds, the scorer client's retries): a run that changes one is named
    # by the fallback
    unnamed_ok = re.compile(r"\.(degenerate|discrete|format|span|client|guards\.[a-z_]+)\.|validation_splits$")
    missing = [k for k in launcher_keys + reward_keys
               if run_names.word_of(k)[0] == len(run_names.WORDS) and not unnamed_ok.search(k)]
    assert missing == [], f"keys the launcher sets without a word in src/plan/run_names.py WORDS: {missing}"
    unreadable = {}
    for key in _training_keys() + reward_keys:
        word = run_names.word_of(key)[1]
        if word is not None and not (re.fullmatch(r"[a-z][a-z0-9]*", word) and len(word) <= run_names.FALLBACK_CHARS):
            unreadable[key] = word
    assert unreadable == {}
    stale = [p for p, _ in run_names.WORDS
             if not any(run_names.key_part(p, k) is not None for k in _training_keys() + reward_keys + launcher_keys)]
    assert stale == [], f"words for keys verl's config does not have (renamed upstream?): {stale}"
    assert run_names.fallback_word("actor_rollout_ref.actor.fsdp_config.param_offload") == "paramoffload"
    assert run_names.fallback_word("actor_rollout_ref.rollout.multi_turn.enable") == "multiturn"


def test_names_carry_only_what_the_id_hashes(tmp_path):
    """Issue 33 (finding 3): a default spelled out (trainer.lr=1e-6) or a key that changes nothing verl
    trains (data.template) was named, so two dirs with one run id had two names."""
    plain = identified(["reward=comet"], tmp_path)[0]
    for noop in (["trainer.lr=1e-6"], ["reward.weights.bleu=1"], ["data.template=chat"], ["trainer.save_freq=7"]):
        same = identified(["reward=comet", *noop], tmp_path)[0]
        assert (same.run_id, same.checkpoint_dir, same.wandb_run_name, same.wandb_project) == (
            plain.run_id, plain.checkpoint_dir, plain.wandb_run_name, plain.wandb_project), noop
    assert plain.checkpoint_dir.endswith(f"/seed1-{plain.run_id}")


def test_a_data_override_is_named_by_its_data_sets_tag_not_its_path(tmp_path):
    """Issue 33 (finding 10): data paths ended up in dir and wandb names
    (`seed1_templatechat_train_files-data-mypairs-train.parquet_val_files-...`)."""
    overrides = ["reward=comet", "data.template=chat", "data.train_files=data/mypairs/train.parquet",
                 "data.val_files=data/mypairs/val.parquet"]
    plan, verl_cfg, _ = identified(overrides, tmp_path)
    assert plan.checkpoint_dir.endswith(f"/seed1_data-mypairs-{plan.run_id}")
    assert plan.wandb_run_name.endswith(f"-seed1_data-mypairs-{plan.run_id}") and "parquet" not in plan.wandb_run_name
    assert verl_cfg.data.train_files == "data/mypairs/train.parquet"  # the path itself: the snapshot's verl config


def test_reward_is_named_with_its_mode_only_where_a_span_model_runs(tmp_path):
    """Issue 33 (finding 8): `reward=metricx` was named `metricx_off` / `qe-rl-metricx-off-s384`: "off" is
    the span model's mode and read as "MetricX off"."""
    metricx = identified(["reward=metricx"], tmp_path)[0]
    assert "/qwen2.5_3b/metricx/grpo/gpus4/" in metricx.checkpoint_dir and metricx.wandb_project == "qe-rl-metricx-s384"
    assert "off" not in metricx.checkpoint_dir and "off" not in metricx.wandb_project
    xcomet = identified(["reward=xcomet_xl"], tmp_path)[0]  # mode=train: the span model runs
    assert "/xcomet_xl_train/grpo/" in xcomet.checkpoint_dir and xcomet.wandb_project == "qe-rl-xcomet_xl-train-s384"
    comet_eval = identified(["reward=comet", "reward.mode=eval"], tmp_path)[0]
    assert "/comet_eval/grpo/" in comet_eval.checkpoint_dir
    # the plan table's title too
    import io

    from rich.console import Console

    from src.plan.table import render
    for plan, title in ((metricx, "Run plan: qwen2.5_3b / metricx / grpo"),
                        (xcomet, "Run plan: qwen2.5_3b / xcomet_xl (train) / grpo")):
        text = io.StringIO()
        render(plan, ["true"], "verl_config.yaml", console=Console(file=text, width=200))
        assert title in text.getvalue()


def test_a_run_launched_under_the_earlier_names_resumes_in_its_dir(tmp_path):
    """Issue 33 (findings 8, 10): renaming moved a run's checkpoint dir; a relaunch of an in-flight run
    (same config, same id) must find its checkpoints under the name it had, and its wandb run."""
    overrides = ["reward=comet", "trainer.lr=3e-6", "data.template=chat"]
    plan, _, ident = identified(overrides, tmp_path)
    old = tmp_path / "results/qwen2.5_3b/comet_off/grpo/gpus4" / f"seed1_lr3e-06_templatechat-{plan.run_id}"
    run_identity.record(old, ident, plan.run_id, None)
    (old / "global_step_50").mkdir()
    resumed, verl_cfg, _ = identified(overrides, tmp_path)
    assert resumed.checkpoint_dir == verl_cfg.trainer.default_local_dir == str(old)
    assert resumed.wandb_project == "qe-rl-comet-off-s384" and resumed.wandb_run_id == plan.wandb_run_id
    assert resumed.wandb_run_name.endswith(old.name) and resumed.earlier_dir_of == plan.checkpoint_dir
    # another config with a dir of the same id suffix (a collision) is not resumed there
    other = identified(["reward=comet", "trainer.lr=5e-6"], tmp_path)[0]
    assert other.checkpoint_dir != str(old) and other.earlier_dir_of is None
    # two dirs of the run: refused in one line naming both and how to choose
    twin = old.parent / f"seed1_lr3e-6-{plan.run_id}"
    run_identity.record(twin, ident, plan.run_id, None)
    with pytest.raises(Exception) as refused:
        identified(overrides, tmp_path)
    assert "\n" not in str(refused.value) and "+verl.trainer.default_local_dir=" in str(refused.value)
    assert str(old) in str(refused.value) and str(twin) in str(refused.value)


# Override sets drawn from choices whose many spellings train one config (a default spelled out, a float
# written two ways, the same lr through our key and verl's, settings that train nothing), and a few that
# change it: any two with one id must have one name.
CHOICES = {
    "trainer.lr": [None, "1e-6", "0.000001", "3e-6"],
    "+verl.actor_rollout_ref.actor.optim.lr": [None, "3e-6"],
    "reward.weights.bleu": [None, "1", "1.0", "0.5"],
    "data.template": [None, "base", "chat"],
    "data.train_files": [None, "${paths.data_root}/wmt_zh_en/train.parquet", "/x/wmt_zh_en/train.parquet",
                         "/x/mypairs/train.parquet"],
    "trainer.save_freq": [None, "7"],
    "paths.data_root": [None, "/x"],  # a setting that moves the data files: the id and the name change with it
    "logger": [None, "console"],
    "seed": [None, "1", "2"],
}


def _override_sets():
    from hypothesis import strategies as st
    return st.fixed_dictionaries({k: st.sampled_from(v) for k, v in CHOICES.items()}).map(
        lambda d: ["reward=comet"] + [f"{k}={v}" for k, v in d.items() if v is not None])


class _Names:
    """(run id, (checkpoint dir, wandb project, wandb run name)) per override set, each launch planned once."""

    def __init__(self, root):
        self.root, self.seen = root, {}

    def __call__(self, overrides: list[str]) -> tuple[str, tuple]:
        key = tuple(overrides)
        if key not in self.seen:
            plan = identified(list(overrides), self.root)[0]
            self.seen[key] = (plan.run_id, (plan.checkpoint_dir, plan.wandb_project, plan.wandb_run_name))
        return self.seen[key]


def test_two_override_sets_with_one_run_id_have_one_name(tmp_path_factory):
    """Issue 33, must hold: a run's dir and wandb names carry only what its run id hashes."""
    from hypothesis import given, settings

    names = _Names(tmp_path_factory.mktemp("names"))

    @settings(max_examples=12, deadline=None, database=None, derandomize=True)
    @given(_override_sets())
    def check(a):
        rid, named = names(a)
        # against every set drawn so far: any two with one id
        for other, (other_id, other_named) in names.seen.items():
            assert (rid == other_id) == (named == other_named), (a, other, named, other_named)

    check()
    # two spellings of one config must have met, or the property was not tried where it can fail
    by_id = {}
    for overrides, (rid, _) in names.seen.items():
        by_id.setdefault(rid, set()).add(overrides)
    assert any(len(sets) > 1 for sets in by_id.values()), by_id


def test_dir_with_another_identity_is_refused_with_the_differing_keys(tmp_path):
    ident = {"actor_rollout_ref.actor.optim.lr": 3e-6, "data.train_files": "a.parquet"}
    assert run_identity.check_dir(tmp_path, ident, "aaaa0000") is None  # nothing recorded yet
    run_identity.record(tmp_path, ident, "aaaa0000", None)
    recorded = json.loads((tmp_path / run_identity.IDENTITY_FILE).read_text())
    assert recorded == {"run_id": "aaaa0000", "reproduces": None, "identity": ident}
    assert [p.name for p in tmp_path.iterdir()] == [run_identity.IDENTITY_FILE]  # no temp file left
    assert run_identity.check_dir(tmp_path, dict(ident), "aaaa0000") is None
    refusal = run_identity.check_dir(tmp_path, {**ident, "actor_rollout_ref.actor.optim.lr": 1e-6}, "bbbb1111")
    assert "\n" not in refusal
    assert "holds run aaaa0000" in refusal and "actor_rollout_ref.actor.optim.lr (3e-06 -> 1e-06)" in refusal


@pytest.mark.parametrize("body", ["{not json", json.dumps({"run_id": "x"})])
def test_unreadable_identity_file_is_refused(tmp_path, body):
    (tmp_path / run_identity.IDENTITY_FILE).write_text(body)
    assert "unreadable" in run_identity.check_dir(tmp_path, {}, "aaaa0000")


# a stand-in for verl's trainer: says which checkpoint dir the launcher gave it (and verl's config holds)
SAYS_ITS_DIR = """
import os
from omegaconf import OmegaConf
cfg = OmegaConf.load(os.environ["QE_RL_VERL_CONFIG"])
print("trainer: dir", os.environ["QE_RL_CHECKPOINT_DIR"], cfg.trainer.default_local_dir, cfg.trainer.experiment_name,
      flush=True)
"""


def test_a_run_named_before_issue_51_resumes_in_its_dir(tmp_path):
    """Issue 51 (finding 7): names became a researcher's words; a run launched before, named by verl's keys
    (`seed1_data.train_batch_size4_..._sampler_kwargs.train_batch_size4-<id>`), relaunched with the same
    config, continues in that dir (a real launch, with a stand-in for verl's trainer) under its wandb name."""
    import sys

    from src.data.parquet_io import write_parquet_atomic
    from src.data.rows import Example, make_row
    from tests.helpers.launches import launch

    (tmp_path / "models" / "Qwen2.5-0.5B-Instruct").mkdir(parents=True)
    for split in ("train", "val"):
        rows = [make_row(Example("今天天气很好。", "The weather is nice today.", "zh", "en"), dataset_name="wmt_zh_en",
                         template="base", split=split, index=i) for i in range(4)]
        write_parquet_atomic(rows, tmp_path / "data" / "wmt_zh_en" / f"{split}.parquet")
    script = tmp_path / "says_its_dir.py"
    script.write_text(SAYS_ITS_DIR)
    args = ["model=qwen2.5_0.5b", "reward=comet", "gpus=1", "batch.prompts_per_step=4", "batch.mini_batch_prompts=4",
            "debug.skip_scorer=true", "logger=console", f"debug.train_command_override='{sys.executable} {script}'",
            f"paths.output_dir={tmp_path}/out", f"paths.results_root={tmp_path}/results",
            f"paths.model_root={tmp_path}/models", f"paths.data_root={tmp_path}/data"]
    env = {"CUDA_VISIBLE_DEVICES": "0", "SLURM_CPUS_PER_TASK": "16", "PYTHONPATH": str(REPO)}

    def trainer_dirs(result) -> list[str]:
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
        # the trainer's own lines are in the launch's train.log (the terminal shows progress lines only)
        log = max((tmp_path / "out" / "runs").glob("*/train.log"), key=lambda p: p.stat().st_mtime)
        return next(line for line in log.read_text().splitlines() if line.startswith("trainer: dir")).split()[2:]

    first = Path(trainer_dirs(launch(args, env_extra=env, timeout=600))[0])
    rid = first.name.rsplit("-", 1)[1]
    # paths.model_root and paths.data_root moved the model and data: that changes what is trained, so it is named
    # too, and the words the name has no room for are counted, each in the identity file
    assert first.name == f"seed1_prompts4_minibatch4_+3more-{rid}"
    recorded = json.loads((first / run_identity.IDENTITY_FILE).read_text())
    assert [d["word"] for d in recorded["differs_from_preset"]] == [
        "prompts4", "minibatch4", "data-wmt_zh_en", "model-Qwen2.5-0.5B-Instruct", "qe-wmt22-cometkiwi-da"]
    assert recorded["differs_from_preset"][0] == {"word": "prompts4", "key": "data.train_batch_size", "preset": 48,
                                                   "run": 4}
    # the same run as it was named before issue 51
    old = first.parent / f"seed1_data.train_batch_size4_ppo_mini_batch_size4_sampler_kwargs.train_batch_size4-{rid}"
    first.rename(old)
    (old / "global_step_2").mkdir()
    again = launch(args, env_extra=env, timeout=600)
    given, in_config, wandb_name = trainer_dirs(again)
    assert given == in_config == str(old) and wandb_name == f"qwen2.5_0.5b-grpo-g1-{old.name}"
    assert f"continues in its dir {old}" in again.stdout and not first.exists()
