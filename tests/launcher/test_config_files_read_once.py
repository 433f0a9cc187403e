"""src/config/hydra_internal.py remember_config_files: Hydra's file source reads each config file once per process,
and what it gives a composition is what Hydra's own reading gives, file by file and composition by composition."""
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hydra._internal.core_plugins import file_config_source
from hydra._internal.sources_registry import SourcesRegistry
from hydra.core.plugins import Plugins
from omegaconf import OmegaConf, open_dict

from src.config import CONF_DIR, hydra_internal, register
from src.verl_config.ppo_trainer import verl_config_dir

REPO = Path(__file__).resolve().parents[2]
DIRS = {"conf": CONF_DIR, "verl": verl_config_dir()}


def _source(path) -> "file_config_source.FileConfigSource":
    """A file source of the class Hydra reads through: its plugin scan runs the module again (a new class), so the
    class is taken from the module after it, not imported before it."""
    register()  # as every composing process does first: it installs the remembering read
    Plugins.instance()
    return file_config_source.FileConfigSource(provider="test", path=str(path))


def _loaded(source, name: str):
    result = source.load_config(name)
    return (type(result.config), OmegaConf.to_yaml(result.config), result.header, result.path, result.provider,
            result.config._get_flag("struct"), result.config._get_flag("readonly"))


def _both(source, name: str):
    with hydra_internal.config_files_read_each_time():
        hydras = _loaded(source, name)
    return hydras, _loaded(source, name)


def test_it_is_installed_on_the_pinned_hydra_in_the_class_hydra_reads_through():
    source = _source(CONF_DIR)
    assert hydra_internal.remember_config_files()
    assert type(source).load_config.__name__ == "_load_config_remembered"
    with hydra_internal.config_files_read_each_time():
        assert type(source).load_config.__qualname__ == "FileConfigSource.load_config"
    assert type(source).load_config.__name__ == "_load_config_remembered"
    # the class Hydra's config repository reads through (hydra/_internal/config_repository.py resolves the scheme)
    assert SourcesRegistry.instance().resolve("file") is type(source)


@pytest.mark.parametrize("where", sorted(DIRS))
def test_every_config_file_reads_as_hydra_reads_it(where):
    root = DIRS[where]
    source = _source(root)
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*.yaml"))
    assert len(names) > 20, names
    for name in names:
        hydras, remembered = _both(source, name)
        assert remembered == hydras, name
        assert _loaded(source, name) == hydras, name  # and again, from what was remembered


@pytest.mark.parametrize("config_dir, name, overrides", [
    (CONF_DIR, "config", []),
    (CONF_DIR, "config", ["reward=xcomet_xl", "algo=dapo", "gpus=4"]),
    (CONF_DIR, "config", ["experiment=learn_tiny", "accelerator=cpu"]),
    (verl_config_dir(), "ppo_trainer", []),
    (verl_config_dir(), "ppo_trainer", ["actor_rollout_ref.actor.ppo_mini_batch_size=8", "trainer.nnodes=2"]),
])
def test_whole_compositions_are_hydras(config_dir, name, overrides):
    register()
    with hydra_internal.config_files_read_each_time():
        hydras = OmegaConf.to_yaml(hydra_internal.compose_dir(str(config_dir), name, overrides))
    for _ in range(2):  # the first fills what is remembered, the second reads from it
        assert OmegaConf.to_yaml(hydra_internal.compose_dir(str(config_dir), name, overrides)) == hydras


def test_a_config_changed_by_its_composition_leaves_the_remembered_file_alone():
    source = _source(CONF_DIR)
    first = source.load_config("config.yaml").config
    before = OmegaConf.to_yaml(first)
    with open_dict(first):
        first["added_by_a_composition"] = 1
        first.pop(next(iter(first)))
    OmegaConf.set_readonly(first, True)
    again = source.load_config("config.yaml").config
    assert OmegaConf.to_yaml(again) == before and not again._get_flag("readonly")


def test_an_edited_or_replaced_file_is_read_again(tmp_path):
    register()
    config = tmp_path / "config.yaml"
    config.write_text("a: 1\n")
    assert hydra_internal.compose_dir(str(tmp_path), "config", []).a == 1
    # the same size and inode, edited: told apart by its modification time
    stat = config.stat()
    config.write_text("a: 2\n")
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert hydra_internal.compose_dir(str(tmp_path), "config", []).a == 2
    # edited in place with its modification time set back, as `cp -p` or `touch -r` leave it: the change time moves
    stat = config.stat()
    config.write_text("a: 5\n")
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert config.stat().st_mtime_ns == stat.st_mtime_ns and config.stat().st_size == stat.st_size
    assert hydra_internal.compose_dir(str(tmp_path), "config", []).a == 5
    # replaced by another file (an editor's save, a checkout)
    fresh = tmp_path / "fresh.yaml"
    fresh.write_text("a: 3\nb: 4\n")
    os.replace(fresh, config)
    cfg = hydra_internal.compose_dir(str(tmp_path), "config", [])
    assert (cfg.a, cfg.b) == (3, 4)


@pytest.mark.parametrize("content", ["5\n", "a: [1\n", None])
def test_a_missing_or_malformed_file_fails_as_in_hydra(tmp_path, content):
    if content is not None:
        (tmp_path / "bad.yaml").write_text(content)
    source = _source(tmp_path)
    failures = []
    for read_each_time in (True, False, False):
        with hydra_internal.config_files_read_each_time() if read_each_time else open(os.devnull):
            with pytest.raises(Exception) as err:
                source.load_config("bad.yaml")
        failures.append((type(err.value), str(err.value)))
    assert failures[0] == failures[1] == failures[2], failures


def test_what_is_remembered_is_a_pickle_of_what_omegaconf_loads():
    # the copy each composition gets is pickle's: OmegaConf's own load, node for node
    register()
    path = CONF_DIR / "config.yaml"
    loaded = OmegaConf.load(path)
    assert OmegaConf.to_yaml(pickle.loads(pickle.dumps(loaded))) == OmegaConf.to_yaml(loaded)


def test_files_read_beforehand_are_what_a_composition_reads(tmp_path):
    # a process that forks commands reads every file first (tests/launch_server.py): a composition after it gets
    # what it would have read itself, and a file changed after it is read again
    register()
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yaml").write_text("defaults:\n  - part: one\n  - _self_\na: 1\n")
    (conf / "part").mkdir()
    (conf / "part" / "one.yaml").write_text("b: 2\n")
    assert hydra_internal.read_config_files(str(conf)) == 2
    assert OmegaConf.to_container(hydra_internal.compose_dir(str(conf), "config", [])) == {"a": 1, "part": {"b": 2}}
    (conf / "part" / "one.yaml").write_text("b: 3\nc: 4\n")
    assert OmegaConf.to_container(hydra_internal.compose_dir(str(conf), "config", [])) == {
        "a": 1, "part": {"b": 3, "c": 4}}
    assert hydra_internal.read_config_files(str(CONF_DIR)) > 20


def test_a_fresh_process_reads_each_time_within_the_block_and_once_outside_it():
    # the block's switch reaches the class Hydra reads through even where nothing composed before (a bench's process)
    code = """
from src.config import compose_config, hydra_internal
with hydra_internal.config_files_read_each_time():
    compose_config(["model=qwen2.5_3b"]); compose_config(["model=qwen2.5_7b"])
inside = hydra_internal.config_files_remembered()
compose_config(["model=qwen2.5_0.5b"])
first = hydra_internal.config_files_remembered()
compose_config(["model=tiny_qwen2"])
print(inside, first, hydra_internal.config_files_remembered())
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    inside, first, second = map(int, out.stdout.split()[-3:])
    # outside the block, a second composition reads only the file the first did not: the model's
    assert inside == 0 and first > 5 and second == first + 1, out.stdout
