"""Every command line we build is quoted for the program that parses it.

A checkout whose path has a space and non-ASCII characters: the dry run's saved command.txt is a
shell command that runs when pasted, and verl's entry (Hydra) composes its config from it: Hydra's
`--cfg job` makes the entry print the job config and stop before any training.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from src.config import CODE_ROOT
from src.config.override_grammar import override, quote
from src.node import training
from tests.helpers.launches import files_under


@pytest.mark.parametrize("value", ["/tmp/a b/verl", "/data/数据/run", "/x/it's", "a\\b", "a\\", "a\\'b", "x,y",
                                   "~/é (1)=[2]", " lead", "${x}"])
def test_quoted_values_parse_back_exactly(value):
    assert OverridesParser.create().parse_override(override("hydra.run.dir", value)).value() == value
    assert quote(value).startswith("'")


def test_verl_command_quotes_the_run_dir_for_hydra(tmp_path):
    run_dir = tmp_path / "my runs" / "翻译 é"
    command = training.verl_command(sys.executable, run_dir / "snapshot", run_dir)
    hydra_overrides = [a for a in command if a.startswith("hydra.")]
    parsed = OverridesParser.create().parse_overrides(hydra_overrides)
    assert {o.key_or_group: o.value() for o in parsed} == {"hydra.run.dir": f"{run_dir}/verl",
                                                           "hydra.output_subdir": None}


def test_dry_run_from_an_odd_checkout_path_saves_a_command_that_runs(tmp_path):
    checkout = tmp_path / "my checkout" / "翻译-é"
    for name in ("src", "conf", "hydra_plugins", "sweeps"):
        shutil.copytree(CODE_ROOT / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__", "local"))
    env = {k: v for k, v in os.environ.items()
           if k != "CUDA_VISIBLE_DEVICES" and not k.startswith(("SLURM_", "QE_RL_DATA", "QE_RL_RESULTS",
                                                                  "QE_RL_MODELS"))}
    # every path of the run under the odd checkout (conf/paths: root_dir is the checkout)
    result = subprocess.run([sys.executable, "-m", "src.launch", "gpus=2", "dry_run=true"], cwd=checkout,
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    snap = next((checkout / "outputs").rglob("snapshot"))
    assert "翻译-é" in str(snap) and " " in str(snap)
    command = (snap / "command.txt").read_text(encoding="utf-8").strip()
    assert "\n" not in command

    # pasted into a shell (from anywhere) with Hydra's --cfg job appended: verl's entry composes
    # the snapshot's verl config with the run dir override, prints it and stops
    pasted = subprocess.run(["bash", "-c", command + " --cfg job"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert pasted.returncode == 0, pasted.stderr[-2000:]
    printed = yaml.safe_load(pasted.stdout)
    saved = yaml.safe_load((snap / "verl_config.yaml").read_text(encoding="utf-8"))
    assert printed["trainer"]["default_local_dir"] == saved["trainer"]["default_local_dir"]
    assert "翻译-é" in printed["trainer"]["default_local_dir"]
    # nothing ran: no verl output dir was made
    assert not (snap.parent / "verl").exists()


def test_a_slurm_setup_line_broken_by_a_quote_in_a_path_is_refused_before_submission(capsys, isolated_paths):
    from src import launch as launcher

    out, paths = isolated_paths
    # conf/hydra/launcher/slurm.yaml: export HF_HOME='${paths.hf_home}': the value's own quote ends it
    code = launcher.check(["--multirun", "hydra/launcher=slurm", "paths.hf_home='/data/it\\'s/hf'", "dry_run=true"]
                          + paths)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: Slurm setup line \"export HF_HOME='/data/it's/hf'\" is not a valid shell line")
    assert files_under(out) == []
    # spaces and non-ASCII characters inside the quotes are fine
    from src.slurm.request import check
    check({"setup": ["export HF_HOME='/data/my data/数据'"]}, {"slurm": {"setup": []}}, {})
