"""Each launch gets a run dir of its own (src/pipeline/run_dirs.py): the dir's name has its start time in seconds,
and two launches of different configs in one second were given one dir, the second refused with "a run dir holds
one run" (a fast tier failed so: a dry run started in the same second as the one before the quick refusal between
them). A hydra.run.dir on the command line is the user's own and is used as given."""
from __future__ import annotations

import datetime as dt
import json
import re

from src.pipeline import claim_run_dir
from tests.helpers.launches import launch

STEM = "qwen2.5_3b_comet_grpo_g4x1_seed1"   # conf/config.yaml hydra.run.dir for reward=comet's defaults


def _run_dir(stdout: str) -> str:
    return re.search(r"^run dir\s+(\S+)", stdout, re.M).group(1)


def test_a_dir_another_launch_holds_gives_this_one_the_next_free_name(tmp_path):
    base = tmp_path / "runs" / "2026-12-06_10-00-00_x"
    assert claim_run_dir(base) == base and base.is_dir()
    assert claim_run_dir(base) == tmp_path / "runs" / "2026-12-06_10-00-00_x-2"
    assert claim_run_dir(base) == tmp_path / "runs" / "2026-12-06_10-00-00_x-3"


def test_a_launch_in_the_second_of_another_runs_dir_gets_its_own(isolated_paths):
    out, paths = isolated_paths
    runs = out / "outputs" / "runs"
    # another run's dirs, for every second this launch may start in
    now = dt.datetime.now()
    taken = [runs / f"{now + dt.timedelta(seconds=s):%Y-%m-%d_%H-%M-%S}_{STEM}" for s in range(-1, 30)]
    for d in taken:
        (d / "snapshot").mkdir(parents=True)
        (d / "snapshot" / "verl_config.yaml").write_text("another run\n")
    done = launch(["reward=comet", "dry_run=true"] + paths)
    assert done.returncode == 0, done.stderr[-2000:]
    mine = _run_dir(done.stdout)
    assert mine.endswith(f"_{STEM}-2") and mine[:-2] in map(str, taken), mine
    assert json.loads(next((runs / mine.rsplit("/", 1)[1]).glob("snapshot/plan.json")).read_text())
    assert all((d / "snapshot" / "verl_config.yaml").read_text() == "another run\n" for d in taken)


def test_a_run_dir_given_on_the_command_line_is_used_as_given(isolated_paths):
    out, paths = isolated_paths
    own = out / "mine"
    done = launch(["reward=comet", "dry_run=true", f"hydra.run.dir={own}"] + paths)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _run_dir(done.stdout) == str(own) and (own / "snapshot" / "plan.json").is_file()
    again = launch(["reward=comet", "dry_run=true", "batch.prompts_per_step=96", f"hydra.run.dir={own}"] + paths)
    assert again.returncode == 2 and "holds the snapshot of another run" in again.stderr, again.stderr[-2000:]
