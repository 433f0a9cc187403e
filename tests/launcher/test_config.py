"""src/config: composition through the schema, the one-line errors, and each use of Hydra's private API
(src/config/hydra_internal.py) run against the installed Hydra."""
import shutil

import pytest

from src.config import CONF_DIR, compose_config, hydra_internal, one_line, register, sweep_jobs
from src.config.schema import Config


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
