"""Bad input a careless user types (issue 26), refused by the launcher with one `error:` line and
exit 2 before anything is written: values no training can want, misspelt verl keys and config
groups, data files src.data.prepare did not write, unquoted odd paths, a broken local config, an
output dir that cannot be written; plus what --help, --resume and --from-snapshot say.

Refusals of the pre-launch check run in-process through `src.launch.main` (the same function
`python -m src.launch` runs; it stops before Hydra on a refusal); cases that need a fresh process
(a copied checkout, a real non-dry launch) run it as a user does."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from src import launch as launcher
from src.config import CODE_ROOT
from src.data.parquet_io import write_parquet_atomic
from src.data.rows import Example, make_row
from src.verl_config import VERL_KEYS, checks, user_keys
from tests.helpers.launches import files_under, launch
from tests.helpers.refusals import assert_one_line_refusal

EX = Example(src="这只猫坐在垫子上。", tgt="The cat sat on the mat.", src_lang="zh", tgt_lang="en")


def refused(capsys, args: list[str]) -> str:
    """The one error line of `python -m src.launch ARGS`, run in-process; asserts exit 2."""
    code = launcher.main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    return assert_one_line_refusal(err, "error: ")


@pytest.mark.parametrize("args,needle", [
    # value ranges: our keys (src/plan/values.py RANGES) and verl's reached through +verl (VERL_RANGES)
    (["trainer.lr=-1"], "trainer.lr must be a number > 0, got -1.0"),
    (["trainer.lr=nan"], "trainer.lr must be a number > 0, got nan"),
    (["+verl.actor_rollout_ref.actor.optim.lr=-1"], "verl.actor_rollout_ref.actor.optim.lr must be a number > 0, got -1"),
    (["+verl.algorithm.kl_ctrl.kl_coef=-5"], "verl.algorithm.kl_ctrl.kl_coef must be a number >= 0, got -5"),
    (["trainer.total_training_steps=-3"], "trainer.total_training_steps must be an integer >= 1, got -3"),
    (["+verl.actor_rollout_ref.rollout.top_p=1.5"], "verl.actor_rollout_ref.rollout.top_p must be a number in (0, 1]"),
    (["algo.clip_ratio_low=1.2"], "algo.clip_ratio_low must be a number in [0, 1]"),
    (["seed=-1"], "seed must be an integer in [0, 4294967295]"),
    # a guard's penalty lowers the score (its interval on the reward schema, src/config/reward_schema.py)
    (["reward.guards.repetition.penalty=5"], "reward.guards.repetition.penalty must be a number <= 0, got 5.0"),
    # a misspelt key of the reward group, refused by its types with the nearest key
    (["+reward.guards.wrong_language.penlty=-2"], "did you mean reward.guards.wrong_language.penalty?"),
    # a misspelt verl key, with the nearest existing one
    (["+verl.data.max_prompt_lenght=100"], "verl has no key data.max_prompt_lenght"),
    (["+verl.algorithm.kl_ctrl.kl_coeff=0.1"], "did you mean +verl.algorithm.kl_ctrl.kl_coef?"),
    # a group that does not exist, with or without the `+` Hydra's own hint suggests
    (["+rewad=comet"], "+rewad=comet names no config group"),
    (["rewad=comet"], "rewad=comet names no config group"),
    (["+trainer.learning_rate=1e-6"], "trainer has no key 'learning_rate'"),
    # data.template names a template of src/data/templates.py
    (["data.template=bogus"], "data.template='bogus' is not a prompt template (known: base, chat, rl, base_terms, "
                              "chat_terms, rl_terms)"),
    # Hydra's lexer on a non-ASCII path: the quoted form to type
    (["paths.data_root=/data/数据"], "\"paths.data_root='/data/数据'\""),
])
def test_refused_with_one_line(capsys, isolated_paths, args, needle):
    out, paths = isolated_paths
    line = refused(capsys, args + paths + ["dry_run=true"])
    assert needle in line, line
    assert files_under(out) == []


def test_misspelt_verl_key_names_the_nearest_and_a_misspelt_group_the_right_form(capsys, isolated_paths):
    out, paths = isolated_paths
    assert refused(capsys, ["+verl.data.max_prompt_lenght=100", "dry_run=true"] + paths).endswith(
        "did you mean +verl.data.max_prompt_length?")
    assert refused(capsys, ["+rewad=comet", "dry_run=true"] + paths).endswith("did you mean reward=comet?")
    assert refused(capsys, ["+swep=seeds", "--multirun", "dry_run=true"] + paths).endswith(
        "did you mean +sweep=seeds?")


def test_verl_keys_in_open_dicts_and_dataclass_fields_pass():
    added = [k for k, _ in VERL_KEYS]
    user_keys.check_passthrough_keys([
        "actor_rollout_ref.actor.optim.lr",                         # a yaml key
        "actor_rollout_ref.model.override_config.attn_implementation",  # verl's `override_config: {}`
        "actor_rollout_ref.rollout.engine_kwargs.vllm.enforce_eager",   # `engine_kwargs.vllm: {}`
        "ray_kwargs.ray_init.include_dashboard",                    # ray.init's kwargs (OPEN_DICTS)
        "reward.custom_reward_function.reward_kwargs.extra",        # our table's `+` kwargs dict
        "actor_rollout_ref.rollout.agent.agent_loop_manager_class",  # AgentLoopConfig field, not in the yaml
    ], added)
    with pytest.raises(checks.VerlValueError, match="did you mean \\+verl.reward.num_workers"):
        user_keys.check_passthrough_keys(["reward.num_workerz"], added)


def _prepared(path: Path, template: str = "base", split: str = "train", rows: int = 2) -> Path:
    write_parquet_atomic([make_row(EX, dataset_name="wmt_zh_en", template=template, split=split, index=i)
                          for i in range(rows)], path)
    return path


def _data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data" / "wmt_zh_en"
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_train_file_without_extra_info_is_refused(capsys, isolated_paths, tmp_path):
    out, paths = isolated_paths
    d = _data_dir(tmp_path)
    row = {"prompt": [{"role": "user", "content": EX.src}], "data_source": "wmt_zh_en/zh-en",
           "reward_model": {"style": "rule", "ground_truth": EX.tgt}}
    pq.write_table(pa.Table.from_pylist([row, row]), d / "train.parquet")
    _prepared(d / "val.parquet", split="val")
    line = refused(capsys, ["reward=comet", "dry_run=true"] + paths)
    assert line.startswith(f"error: train data {d / 'train.parquet'} was not written by src.data.prepare: "
                           f"it lacks column extra_info"), line
    assert "python -m src.data.prepare --split train" in line
    assert files_under(out) == []


def test_empty_val_file_is_refused(capsys, isolated_paths, tmp_path):
    out, paths = isolated_paths
    d = _data_dir(tmp_path)
    _prepared(d / "train.parquet")
    table = pa.Table.from_pylist([make_row(EX, dataset_name="wmt_zh_en", template="base", split="val", index=0)])
    pq.write_table(table.slice(0, 0), d / "val.parquet")
    line = refused(capsys, ["reward=comet", "dry_run=true"] + paths)
    assert line == (f"error: val data {d / 'val.parquet'} has 0 rows; prepare it with `python -m src.data.prepare "
                    f"--split val --template base ...` (docs/data-and-report.md)"), line


def test_data_prepared_with_another_template_is_refused(capsys, isolated_paths, tmp_path):
    out, paths = isolated_paths
    d = _data_dir(tmp_path)
    _prepared(d / "train.parquet", template="rl")
    _prepared(d / "val.parquet", template="rl", split="val")
    line = refused(capsys, ["reward=comet", "dry_run=true"] + paths)
    assert "was prepared with template rl but data.template=base: set data.template=rl" in line, line
    # the config that says what the files hold passes the check
    from src.config import compose_config
    from src.pipeline.precheck import check_data_files
    from src.plan import build_plan

    cfg = compose_config(["reward=comet", "data.template=rl", "dry_run=true"] + paths)
    check_data_files(build_plan(cfg, "<run dir>"), cfg)


def test_resume_without_a_snapshot_says_what_it_needs(capsys):
    line = refused(capsys, ["--resume", "gpus=2"])
    assert line == ("error: --resume continues a past run and needs its snapshot: --from-snapshot "
                    "outputs/runs/<run>/snapshot --resume")


def test_help_names_our_flags_and_the_sweeps():
    result = launch(["--help"])
    assert result.returncode == 0, result.stderr
    for needle in ("--from-snapshot", "--resume", "+sweep=NAME", "gpu_scaling, reward_grid, seeds",
                   "== Configuration groups =="):
        assert needle in result.stdout, needle


def test_output_dir_that_cannot_be_made_is_refused_before_hydra(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a dir")
    line = refused(capsys, [f"paths.output_dir={blocker}/out", f"paths.results_root={tmp_path}/res", "dry_run=true"])
    assert f"cannot be made: {blocker} is not a directory; set paths.output_dir=" in line
    assert sorted(tmp_path.iterdir()) == [blocker]


def _read_only_dir() -> Path | None:
    """A dir even root cannot write into (a read-only mount such as /sys), or None."""
    for candidate in (Path("/sys"), Path("/proc/sys")):
        try:
            probe = candidate / ".qe-rl-probe"
            probe.mkdir()
            probe.rmdir()
        except OSError:
            return candidate
    return None


def test_real_launch_onto_a_read_only_results_root_writes_nothing(isolated_paths, tmp_path):
    """Everything a real launch needs is present (a stand-in training command, GPUs as
    CUDA_VISIBLE_DEVICES counts them, enough CPUs): only the checkpoint root is read-only. The
    launch used to write the run's snapshot, then fail with a traceback on the checkpoint dir,
    leaving a run dir holding only snapshot/."""
    ro = _read_only_dir()
    if ro is None:
        pytest.skip("no read-only mount here")  # not counted: every CI container has /sys read-only
    out, paths = isolated_paths
    (tmp_path / "models" / "Qwen2.5-0.5B-Instruct").mkdir(parents=True)
    d = _data_dir(tmp_path)
    _prepared(d / "train.parquet", rows=8)  # the two steps of experiment=smoke: 4 prompts each
    _prepared(d / "val.parquet", split="val")
    paths = [p for p in paths if not p.startswith("paths.results_root")] + [f"paths.results_root={ro}/qe-rl"]
    result = launch(["experiment=smoke", "gpus=1", "scorer.placement=cpu", "debug.skip_scorer=true",
                     f"debug.train_command_override='{sys.executable} -c pass'"] + paths,
                    env_extra={"CUDA_VISIBLE_DEVICES": "0", "SLURM_CPUS_PER_TASK": "64"})
    assert result.returncode == 2, result.stderr
    errors = [l for l in result.stderr.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and "the checkpoint dir" in errors[0] and "cannot be written" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert files_under(out) == [] and not list(out.rglob("snapshot"))


def test_broken_local_yaml_names_file_and_line(tmp_path):
    checkout = tmp_path / "checkout"
    for name in ("src", "conf", "hydra_plugins", "sweeps"):
        shutil.copytree(CODE_ROOT / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__", "local"))
    local = checkout / "conf" / "local" / "default.yaml"
    local.parent.mkdir()
    local.write_text("paths:\n  data_root: /data/mt\nslurm:\n  setup: [module load cuda\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    result = subprocess.run([sys.executable, "-m", "src.launch", "dry_run=true"], cwd=checkout, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: YAML syntax error in {local}, line 5"), result.stderr
    assert not (checkout / "outputs").exists()


def test_from_snapshot_of_a_dry_run_says_it_dry_runs_again(isolated_paths):
    out, paths = isolated_paths
    first = launch(["gpus=2", "dry_run=true"] + paths)
    assert first.returncode == 0, first.stderr
    snap = next(out.rglob("snapshot"))
    again = launch(["--from-snapshot", str(snap)])
    assert again.returncode == 0, again.stderr
    assert (f"note: {snap} is a dry run's snapshot, so this is a dry run again; add dry_run=false to start the run"
            in again.stderr)
    assert "dry run: nothing started" in again.stdout

    # a snapshot whose output dir cannot be written any more: one line, nothing written (it used to be
    # a traceback from the new run dir's mkdir)
    import yaml

    moved = out.parent / "moved" / "snapshot"
    shutil.copytree(snap, moved)
    blocker = out.parent / "a-file"
    blocker.write_text("")
    composed = yaml.safe_load((moved / "composed.yaml").read_text(encoding="utf-8"))
    composed["paths"]["output_dir"] = f"{blocker}/outputs"
    (moved / "composed.yaml").write_text(yaml.safe_dump(composed), encoding="utf-8")
    before = files_under(out.parent)
    blocked = launch(["--from-snapshot", str(moved)])
    assert blocked.returncode == 2, blocked.stderr
    errors = [l for l in blocked.stderr.splitlines() if l.startswith("error:")]
    assert len(errors) == 1 and f"cannot be made: {blocker} is not a directory" in errors[0], blocked.stderr
    assert "Traceback" not in blocked.stderr and files_under(out.parent) == before


def test_data_results_and_models_in_the_checkout_do_not_make_it_dirty():
    # conf/paths puts data/, results/ and models/ under the checkout by default: files there are not
    # code, and git_state's `dirty:` (git status --porcelain) must not count them
    ignored = subprocess.run(["git", "check-ignore", "data/wmt_zh_en/train.parquet", "results/qwen2.5_3b/x",
                              "models/Qwen2.5-3B-Instruct/config.json"], cwd=CODE_ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == ["data/wmt_zh_en/train.parquet", "results/qwen2.5_3b/x",
                                      "models/Qwen2.5-3B-Instruct/config.json"], ignored.stderr
    # and only those top-level dirs: the code's own src/data/ stays tracked
    assert subprocess.run(["git", "check-ignore", "-q", "src/data/rows.py"], cwd=CODE_ROOT).returncode == 1


def test_run_records_are_readable_as_the_umask_says(tmp_path):
    # mkdtemp/mkstemp make 0700 dirs and 0600 files whatever the umask: a teammate on a shared
    # output or checkpoint dir could not read the snapshot, a Slurm job's code copy, or run_identity.json
    import stat

    from src.record import code_snapshot, identity, snapshot

    old = os.umask(0o022)
    try:
        snap = snapshot.write(tmp_path / "run", composed={"a": 1}, overrides=[], plan={}, verl_yaml="a: 1\n",
                              command=["python", "-c", "pass"], scorer_python=None, environ={})
        code = code_snapshot.write(tmp_path / "code")
        identity.record(tmp_path / "ckpt", {"a": 1}, "feedbeef", None)
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(snap) == 0o755 and {mode(p) for p in snap.iterdir()} == {0o644}
    assert mode(code) == 0o755
    assert mode(tmp_path / "ckpt" / identity.IDENTITY_FILE) == 0o644


def test_a_qe_model_dir_without_its_backends_files_is_refused_before_launch(tmp_path):
    """The pre-launch check reads the files a model dir holds from its backend's descriptor
    (model_files): a dir that is not the model's own (a parent dir, a half download) is one line."""
    from types import SimpleNamespace

    from src.node import preflight
    from src.plan.scorer import ScorerModelSpec

    python = tmp_path / "python"
    python.write_text("")
    comet_dir, mx_dir = tmp_path / "kiwi", tmp_path / "mx"
    (comet_dir / "checkpoints").mkdir(parents=True)
    mx_dir.mkdir()

    def check(*models):
        preflight.check_scorer(SimpleNamespace(scorer=SimpleNamespace(python=str(python), models=models,
                                                                      placement="shared")))

    kiwi = ScorerModelSpec("cometkiwi_da", str(comet_dir), "cometkiwi", None)
    with pytest.raises(preflight.PreflightError, match=r"^QE model cometkiwi_da at .*kiwi lacks "
                                                      r"checkpoints/model\.ckpt, hparams\.yaml, which a kind cometkiwi"):
        check(kiwi)
    (comet_dir / "checkpoints" / "model.ckpt").write_text("")
    (comet_dir / "hparams.yaml").write_text("")
    mx = ScorerModelSpec("metricx24_xl", str(mx_dir), "metricx", None)
    with pytest.raises(preflight.PreflightError, match=r"lacks config\.json, which a kind metricx model dir holds"):
        check(kiwi, mx)
    (mx_dir / "config.json").write_text("{}")
    check(kiwi, mx, ScorerModelSpec("cometkiwi_da", str(comet_dir / "checkpoints" / "model.ckpt"), "cometkiwi", None))
