"""src/verl_config/cache.py: a remembered composition or verdict is what verl itself gives for the same
inputs, a refusal is never remembered, and every input of the key invalidates it."""
import warnings

import pytest
from omegaconf import OmegaConf

from src import verl_config
from src.verl_config import cache as verl_cache
from src.config import compose_config, hydra_internal
from src.plan import build_plan


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(verl_cache.ENV_DIR, str(tmp_path))
    monkeypatch.delenv(verl_cache.ENV_SWITCH, raising=False)
    return tmp_path / "verl"


def _overrides(*extra):
    cfg = compose_config(["reward=comet", "algo=dapo", "gpus=3", *extra])
    return verl_config.overrides(build_plan(cfg, run_dir="r"), cfg)


def _never(cfg):
    raise AssertionError("verl was asked although a pass for this config is stored")


def test_remembered_composition_equals_hydras(cache):
    ov = _overrides()
    # Hydra whole (neither this cache nor the process's remembered composition of verl's group choices)
    fresh = hydra_internal.compose_dir(str(verl_config.ppo_trainer.verl_config_dir()), "ppo_trainer", ov)
    first = verl_config.compose(ov)  # miss: composed by Hydra, stored
    again = verl_config.compose(ov)  # hit: read back
    # this list's entry (and, when this process had not composed verl's group choices yet, theirs:
    # src/verl_config/ppo_trainer.py _composed_choices)
    assert (cache / f"{verl_cache.composition_key(ov)}.json").is_file()
    assert len(list(cache.glob("*.json"))) in (1, 2)
    for cfg in (first, again):
        assert OmegaConf.to_yaml(cfg, resolve=True) == OmegaConf.to_yaml(fresh, resolve=True)
        assert OmegaConf.to_yaml(cfg) == OmegaConf.to_yaml(fresh)  # interpolations kept as verl wrote them
    assert OmegaConf.is_struct(again)
    with pytest.raises(Exception):
        again.trainer.no_such_key = 1  # struct, as Hydra returns it: a typo'd key still fails


def test_pass_is_reused_silently_and_refusal_is_not_stored(cache, capfd):
    """Issue 33 (finding 15): verl's warnings ("Disabled critic", its platform probe, the pass line) were
    shown on every launch, before the one `error:` line of a later refusal; validated or cached, the
    launcher shows none of them (the trainer's own validation puts them in train.log)."""
    cfg = verl_config.compose(_overrides())
    with warnings.catch_warnings(record=True) as first:
        warnings.simplefilter("always")
        assert verl_cache.validated(cfg, verl_config.ppo_trainer._run_verl_validation) is False  # verl ran
    with warnings.catch_warnings(record=True) as second:
        warnings.simplefilter("always")
        assert verl_cache.validated(cfg, _never) is True
    assert first == [] and second == []
    out, err = capfd.readouterr()
    assert (out, err) == ("", ""), (out, err)

    bad = cfg.copy()
    OmegaConf.update(bad, "actor_rollout_ref.rollout.name", "bogus")
    for _ in range(2):  # refused both times by verl itself: nothing stored for it
        with pytest.raises(Exception, match="bogus"):
            verl_cache.validated(bad, verl_config.ppo_trainer._run_verl_validation)
    assert not any(f.name.startswith(verl_cache.verdict_key(bad)) for f in cache.glob("*.json"))


def test_every_input_changes_the_key(cache, monkeypatch, tmp_path):
    cfg = verl_config.compose(_overrides())
    base = verl_cache.verdict_key(cfg)
    other = cfg.copy()
    OmegaConf.update(other, "actor_rollout_ref.actor.optim.lr", 2e-6)
    assert verl_cache.verdict_key(other) != base
    assert verl_cache.composition_key(["a=1"]) != verl_cache.composition_key(["a=2"])

    monkeypatch.setattr(verl_cache, "verl_identity", lambda: "verl 0.9.2 at /elsewhere")
    assert verl_cache.verdict_key(cfg) != base
    monkeypatch.undo()

    # an edit to our own check code re-runs verl
    root = tmp_path / "code"
    for rel in verl_cache.CHECK_CODE:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes((verl_cache._ROOT / rel).read_bytes())
    monkeypatch.setattr(verl_cache, "_ROOT", root)
    assert verl_cache.verdict_key(cfg) == base
    (root / "src/verl_config/checks.py").write_text((root / "src/verl_config/checks.py").read_text() + "\n# edited\n")
    assert verl_cache.verdict_key(cfg) != base


def test_switched_off_or_unreadable_cache_asks_verl(cache, monkeypatch):
    cfg = verl_config.compose(_overrides())
    calls = []

    def counting(c):
        calls.append(1)
        return []

    monkeypatch.setenv(verl_cache.ENV_SWITCH, "0")
    verl_cache.validated(cfg, counting)
    verl_cache.validated(cfg, counting)
    assert len(calls) == 2 and not list(cache.glob(f"{verl_cache.verdict_key(cfg)}.json"))

    monkeypatch.delenv(verl_cache.ENV_SWITCH)
    entry = cache / f"{verl_cache.verdict_key(cfg)}.json"
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text('{"format": 1, "verdict": "pa')  # torn write
    assert verl_cache.validated(cfg, counting) is False and len(calls) == 3
    assert verl_cache.validated(cfg, _never) is True  # overwritten with a whole entry


def test_unwritable_cache_does_not_fail_the_launch(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    monkeypatch.setenv(verl_cache.ENV_DIR, str(blocker))
    cfg = verl_config.compose(_overrides())
    assert verl_cache.validated(cfg, lambda c: []) is False


def test_the_checkpoint_dir_alone_does_not_change_the_key(cache):
    """A launch's checkpoint dir (with the launch time in it, for the smoke and learn_tiny) and the output paths
    under it are read by neither verl's validate_config nor our checks: the same config launched again finds its
    verdict. Any other path still changes the key."""
    cfg = verl_config.compose(_overrides())
    base = verl_cache.verdict_key(cfg)
    ckpt = cfg.trainer.default_local_dir
    moved = cfg.copy()
    for key in ("trainer.default_local_dir", "trainer.validation_data_dir", "global_profiler.save_path"):
        value = OmegaConf.select(moved, key) or f"{ckpt}/x"
        OmegaConf.update(moved, key, value.replace(ckpt, "/elsewhere/launched-later"))
    assert OmegaConf.select(moved, "trainer.default_local_dir") == "/elsewhere/launched-later"
    assert verl_cache.verdict_key(moved) == base
    other = cfg.copy()
    OmegaConf.update(other, "actor_rollout_ref.model.path", "/elsewhere/model")
    assert verl_cache.verdict_key(other) != base


@pytest.mark.parametrize("value", [(1, 2), {1: "a"}, object()], ids=["tuple", "int-key", "not-json"])
def test_a_body_json_would_not_give_back_as_it_was_is_not_stored(tmp_path, value):
    """A tuple comes back a list, an int key a string: a reader would get another config or identity."""
    path = tmp_path / "entry.json"
    verl_cache.store_entry(path, {"format": verl_cache.FORMAT, "value": value})
    assert list(tmp_path.iterdir()) == []
    verl_cache.store_entry(path, {"format": verl_cache.FORMAT, "value": [1, 2]})
    assert verl_cache.read_entry(path) == {"format": verl_cache.FORMAT, "value": [1, 2]}
