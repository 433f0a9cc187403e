"""OmegaConf's interpolation parses remembered per process (src/config/parse_cache.py): installed on the pinned
OmegaConf, and every value resolves as OmegaConf's own parse resolves it."""
from __future__ import annotations

import importlib

import pytest
from omegaconf import OmegaConf, grammar_parser
from omegaconf.errors import GrammarParseError

from src.config import compose_config, parse_cache
from src.verl_config import ppo_trainer


@pytest.fixture
def unremembered(monkeypatch):
    """OmegaConf as shipped, for the length of a test: its callers parse with grammar_parser.parse."""
    for name in parse_cache.CALLERS:
        monkeypatch.setattr(importlib.import_module(name), "parse", grammar_parser.parse)


def test_the_pinned_omegaconf_parses_through_it_once_a_config_is_composed():
    compose_config(["reward=comet"])
    assert parse_cache.installed()
    assert parse_cache.install() and parse_cache.installed()  # idempotent


def test_a_remembered_tree_resolves_in_each_config_to_that_configs_values(unremembered):
    assert parse_cache.install()
    first = OmegaConf.create({"a": 1, "b": "${a}", "c": "x${a}y", "d": {"e": "${..a}"}})
    second = OmegaConf.create({"a": "two", "b": "${a}", "c": "x${a}y", "d": {"e": "${..a}"}})
    assert OmegaConf.to_container(first, resolve=True) == {"a": 1, "b": 1, "c": "x1y", "d": {"e": 1}}
    assert OmegaConf.to_container(second, resolve=True) == {"a": "two", "b": "two", "c": "xtwoy", "d": {"e": "two"}}
    # parsed again after other strings went through the same parser: the earlier tree still reads its own text
    assert OmegaConf.create({"a": 3, "b": "${a}"}).b == 3
    for _ in range(2):  # a string that does not parse is refused every time, with OmegaConf's own error
        with pytest.raises(GrammarParseError):
            OmegaConf.create({"a": "${a"})


def test_ours_and_verls_configs_resolve_to_the_same_values_with_and_without_it(unremembered, monkeypatch):
    def resolved():
        ours = compose_config(["experiment=qwen3b_xcomet_3gpu", "algo=dapo", "gpus=8"])
        verl = OmegaConf.to_container(ppo_trainer.compose([]), resolve=True)
        return ours, verl

    with monkeypatch.context() as shipped_only:
        shipped_only.setattr(parse_cache, "install", lambda: False)  # composing installs it otherwise
        shipped = resolved()
        assert not parse_cache.installed()
    assert parse_cache.install()
    assert resolved() == shipped
