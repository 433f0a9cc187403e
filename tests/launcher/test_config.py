"""src/config: composition through the schema, the one-line errors, and each use of Hydra's private API
(src/config/hydra_internal.py) run against the installed Hydra."""
import shutil

import pytest
from omegaconf import OmegaConf

from src.config import CONF_DIR, compose_config, hydra_internal, one_line, register, sweep_jobs
from src.config.compose import compose
from src.config.dotted import flatten
from src.config.schema import Config
from src.verl_config import ppo_trainer


def test_a_typo_in_a_config_file_is_refused_with_its_key(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "local").mkdir(exist_ok=True)
    (conf / "local" / "default.yaml").write_text("# @package _global_\nscorer:\n  batch_token: 3\n")
    register()  # the schema, as every composing process does first
    with pytest.raises(Exception) as err:
        hydra_internal.compose_dir(str(conf), "config", [])
    assert one_line(err.value) == ("In 'local/default': ConfigKeyError raised while composing config: "
                                   "Key 'batch_token' not in 'ScorerSchema' (key: scorer.batch_token)")


def test_our_conf_composes_through_the_private_loader_as_through_compose():
    # a Slurm job composes from its code snapshot's conf/ this way (src/slurm/sweep.py run_job)
    register()
    cfg = hydra_internal.compose_dir(str(CONF_DIR), "config", ["gpus=3", "reward=comet"])
    assert cfg.gpus == 3 and cfg.reward.name == "comet"
    assert compose_config(["gpus=3", "reward=comet"])["scorer"] == compose_config(["gpus=3"])["scorer"]


def test_every_schema_section_is_filled_by_conf():
    # MISSING in the schema means "conf/ sets it": the default composition leaves none unset
    cfg = compose_config([])
    for name in Config.__dataclass_fields__:
        assert name in cfg, name
    assert "???" not in repr(cfg)


def test_enums_come_back_as_plain_strings():
    cfg = compose_config(["scorer.placement=dedicated", "scorer.dtype=fp16"])
    assert (cfg["scorer"]["placement"], cfg["scorer"]["dtype"]) == ("dedicated", "fp16")
    assert type(cfg["scorer"]["placement"]) is str


def test_sweep_jobs_are_the_basic_sweepers():
    jobs = sweep_jobs(["reward=comet,xcomet_xl", "gpus=2,4"], multirun=True, sweeper_params={})
    assert jobs == [["reward=comet", "gpus=2"], ["reward=comet", "gpus=4"],
                    ["reward=xcomet_xl", "gpus=2"], ["reward=xcomet_xl", "gpus=4"]]
    # a sweep file's params first, the command line wins per key
    jobs = sweep_jobs(["algo=dapo"], multirun=True, sweeper_params={"reward": "comet,word_qe", "algo": "grpo,dapo"})
    assert jobs == [["reward=comet", "algo=dapo"], ["reward=word_qe", "algo=dapo"]]


def test_a_sweep_file_composes_through_the_public_config_source():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["+sweep=gpu_scaling"], return_hydra_config=True)
    assert cfg.hydra.sweeper.params.gpus == "2,3,4,8"


def test_a_schema_fields_verl_key_is_one_row_of_the_verl_table_and_its_interval_checks_both_keys():
    """src/config/schema.py `setting(verl=...)` names the verl key a value goes to: the plan -> verl table
    (src/verl_config/ppo_trainer.py VERL_KEYS) has that key once, and the field's interval is the range of
    our key and of the verl key alike (src/plan/values.py RANGES, VERL_RANGES)."""
    from src.config.schema import settings
    from src.plan.values import RANGES, VERL_RANGES
    from src.verl_config import VERL_KEYS

    table = [key.lstrip("+") for key, _ in VERL_KEYS]
    mapped = [s for s in settings().values() if s.verl is not None]
    assert {s.key for s in mapped} >= {"algo.clip_ratio_high", "trainer.lr", "trainer.save_freq"}
    for s in mapped:
        assert table.count(s.verl) == 1, s.key
        if s.interval is not None:
            assert RANGES[s.key].interval == VERL_RANGES[s.verl].interval == s.interval, s.key
    assert RANGES["algo.clip_ratio_high"].example == "algo.clip_ratio_high=0.28"
    assert RANGES["trainer.save_freq"].example == "trainer.save_freq=50 (-1: never)"


def test_a_setting_with_an_interval_needs_its_example():
    from src.config.schema import setting

    with pytest.raises(ValueError, match="an interval needs its example"):
        setting(doc="x", interval="[0, 1]")


def _verl_compose_both_ways(overrides):
    """verl's ppo_trainer with `overrides`, by Hydra whole and on a composition of the group choices: (result
    with its key order, or error text) each."""
    config_dir = str(ppo_trainer.verl_config_dir())

    def choices(lines):
        return hydra_internal.compose_dir(config_dir, "ppo_trainer", list(lines))

    out = []
    for way in (lambda: hydra_internal.compose_dir(config_dir, "ppo_trainer", overrides),
                lambda: hydra_internal.compose_on_choices(config_dir, overrides, choices)):
        try:
            cfg = way()
        except Exception as err:  # noqa: BLE001  (the two must fail alike)
            out.append(f"{type(err).__name__}: {err}")
            continue
        plain = OmegaConf.to_container(cfg, resolve=False)
        out.append((plain, OmegaConf.is_struct(cfg), list(flatten(plain))))
    return out


@pytest.mark.parametrize("overrides", [
    [],
    # what a launch passes: plain keys, `+` new keys, `++` add-or-override with a dict, a list, null
    ["data.train_batch_size=48", "actor_rollout_ref.actor.clip_ratio_high=0.28",
     "+actor_rollout_ref.model.override_config.attn_implementation='sdpa'",
     "++trainer.v1.sampler.sampler_kwargs={lost_groups_allowed:0,max_gen_batches:10}",
     "trainer.logger=['console','file']", "actor_rollout_ref.actor.loss_scale_factor=null",
     "++data.apply_chat_template_kwargs={chat_template:'{% for m in messages %}{{ m[\\'content\\'] }}{% endfor %}'}"],
    ["~trainer.logger"],
    # refusals: a key verl lacks, `+` on a key it has, a parse error
    ["trainer.no_such_key=1"],
    ["+trainer.nnodes=2"],
    ["trainer.nnodes=[1,"],
    # a config group choice changes the defaults list: composed by Hydra whole
    ["model_engine=megatron"],
    ["critic@critic=megatron_critic", "trainer.nnodes=2"],
    # a dict value for a group's name is a config override (hydra/_internal/defaults_list.py Overrides)
    ["++algorithm={adv_estimator:rloo}"],
])
def test_verls_config_composed_on_a_reused_base_is_hydras_composition(overrides):
    whole, reused = _verl_compose_both_ways(overrides)
    assert reused == whole


def test_the_reused_composition_is_not_changed_by_a_composition_on_it():
    # verl's, through compose_on_choices with a remembered composition of its own (ppo_trainer.compose may be
    # answered by the on-disk cache, src/verl_config/cache.py, before it reaches the remembered one)
    config_dir = str(ppo_trainer.verl_config_dir())
    remembered = {}

    def choices(lines):
        return remembered.setdefault(lines, hydra_internal.compose_dir(config_dir, "ppo_trainer", list(lines)))

    first = hydra_internal.compose_on_choices(config_dir, ["trainer.nnodes=7"], choices)
    first.trainer.n_gpus_per_node = 5
    again = hydra_internal.compose_on_choices(config_dir, [], choices)
    assert list(remembered) == [()]
    assert (again.trainer.nnodes, again.trainer.n_gpus_per_node) == (1, 8)
    # ours, through compose (no on-disk cache)
    ours = compose(["gpus=3"])
    ours.seed = 99
    assert compose([]).seed != 99


@pytest.mark.parametrize("overrides", [
    [],
    ["gpus=4", "nodes=2", "algo=dapo", "reward=xcomet_xl", "reward.credit=token"],
    ["experiment=smoke_tiny", "seed=3", "+verl.trainer.balance_batch=false"],
    ["algo=gspo", "algo.clip_ratio_high=0.0004", "reward=comet", "reward.normalise=per_component", "gpus=2"],
    ["reward.guards.wrong_language.penalty=-2", "~reward.guards.repetition"],
    # refusals: a misspelt key, a value of the wrong type, an unknown choice, a sweep (Hydra's whole path)
    ["gpu=4"],
    ["gpus=four"],
    ["algo=no_such_algo"],
    ["gpus=1,2"],
])
def test_our_config_composed_on_reused_choices_is_hydras_composition(overrides):
    out = []
    # with the hydra node: Hydra's compose whole, every time
    for with_hydra in (True, False):
        try:
            cfg = compose(overrides, with_hydra=with_hydra)
        except Exception as err:  # noqa: BLE001  (the two must fail alike)
            out.append(f"{type(err).__name__}: {err}")
            continue
        plain = OmegaConf.to_container(cfg, resolve=False)
        plain.pop("hydra", None)
        out.append((plain, OmegaConf.is_struct(cfg)))
    assert out[1] == out[0]


def test_a_launch_composes_no_config_only_for_hydras_run_mode(monkeypatch, tmp_path, capsys):
    """A Hydra app composes the whole config in MULTIRUN mode only to read `hydra.mode` (Hydra.get_mode), then
    composes it again to run; the launcher hands it the mode its pre-launch check read (hydra_internal.mode_known),
    so a dry run composes nothing in that mode. A config that sets the mode still has it: `hydra.mode=MULTIRUN`
    without --multirun is a sweep of one job, as Hydra makes it."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.types import RunMode

    from src import launch

    modes = []
    composes = ConfigLoaderImpl.load_configuration

    def seen(self, *args, **kwargs):  # every composition of a Hydra config, with the mode it is made for
        modes.append(kwargs["run_mode"] if "run_mode" in kwargs else args[2])
        return composes(self, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", seen)
    common = ["reward=comet", "gpus=2", f"paths.output_dir={tmp_path}/out", f"paths.results_root={tmp_path}/res",
              "dry_run=true"]
    assert launch.main(common) == 0, capsys.readouterr().err
    assert RunMode.RUN in modes and RunMode.MULTIRUN not in modes, modes
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["runs"]

    modes.clear()
    assert launch.main([*common, "hydra.mode=MULTIRUN"]) == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "multirun").is_dir() and modes.count(RunMode.MULTIRUN) == 1, modes  # the sweep's own
    assert [p.name for p in (tmp_path / "out" / "multirun").glob("*/multirun.yaml")] == ["multirun.yaml"]
