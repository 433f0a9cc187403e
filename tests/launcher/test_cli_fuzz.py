"""Random command lines for the launcher: valid keys with bad values, unknown keys and flags, bad
groups, odd unicode and quotes. Each ends with the launch going ahead or with exit 2 and exactly
one `error:` line, never a traceback, and nothing in the output dir.

Driven in-process through `src.launch.check`, the part of `python -m src.launch` that refuses bad
input before Hydra runs (a passing command line would then be Hydra's and the pipeline's,
covered by test_cli.py); a few examples keep it under a minute on a 2-core machine."""
from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from src import launch as launcher
from tests.helpers.launches import files_under

KEYS = ["trainer.lr", "trainer.total_training_steps", "trainer.save_freq", "gpus", "nodes", "seed",
        "batch.prompts_per_step", "data.max_prompt_length", "data.template", "scorer.placement", "scorer.restarts",
        "algo.clip_ratio_low", "memory.gpu_gb", "+verl.actor_rollout_ref.actor.optim.lr",
        "+verl.algorithm.kl_ctrl.kl_coef", "+verl.data.max_prompt_lenght", "+verl.actor_rollout_ref.rollout.top_p",
        "reward", "algo", "model", "+rewad", "rewad", "+sweep", "paths.data_root", "+foo.bar", "trainer.foo",
        "+trainer.foo", "~trainer.lr", "hydra.run.dir"]
ODD = ["null", "true", "comet", "grpo", "bogus", "'quoted'", '"dq"', "[1,2]", "{a:1}", "1e-6", "-0.0", "inf", "nan",
       "${oc.env:HOME}", "${nope}", "a,b", "/data/数据", "it's", "~/x", "a=b", "(x)", "数据", "'", "\\", ""]
VALUES = st.one_of(st.integers(-5, 100).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.sampled_from(ODD), st.text(st.characters(blacklist_categories=("Cs",)), max_size=10))
OVERRIDE = st.one_of(st.tuples(st.sampled_from(KEYS), VALUES).map("=".join),
                     st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
                     .filter(lambda s: not s.startswith("-")),
                     st.sampled_from(["--resum", "--resume", "--multirun", "-x", "--from-snapshots"]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(OVERRIDE, min_size=1, max_size=3))
def test_any_command_line_goes_ahead_or_is_one_error_line(capsys, isolated_paths, args):
    out, paths = isolated_paths
    capsys.readouterr()
    found = launcher.check(args + paths + ["dry_run=true"])   # raising here would be a traceback
    code = found if isinstance(found, int) else None   # an exit code, or what the check found for Hydra to run
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.strip()]
    event(f"exit {0 if code is None else code}")
    if code is None:
        assert not any(l.startswith("error:") for l in lines), err
    else:
        assert code == 2, err
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, err)
    assert files_under(out) == [], args


def test_a_line_break_in_an_override_stays_inside_the_one_error_line(capsys, isolated_paths):
    """Found by the fuzz above: `'=\\r'` made Hydra's lexer refuse it and the refusal, which quotes
    the override back, printed the carriage return raw (two lines for splitlines)."""
    out, paths = isolated_paths
    for bad in ["=\r", "seed=1\r2", "paths.data_root=/x\u2028y"]:
        capsys.readouterr()
        assert launcher.check([bad] + paths + ["dry_run=true"]) == 2
        lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (bad, lines)
    assert files_under(out) == []
