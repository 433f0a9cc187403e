"""A QE scorer on another machine (issue 45, item 5): `scorer.placement=external scorer.url=...`, its token in
QE_SCORER_TOKEN. The service here is the real one, started apart from the launcher (the session's service on the
tiny COMET models, tests/conftest.py). Before anything is written or started, the launcher asks its /health with
the token and refuses in one line a missing token, a wrong one, a service that does not answer, one without a model
the reward needs, or one serving it as another kind or from another checkpoint; a dry run says the same in a
note. A run that passes starts no
scorer of its own, and the jobs of a sweep share the service. (Real steps against an external service:
tests/loop/test_lora_on_cpu.py.)"""
from __future__ import annotations

import pytest

from tests.helpers.launches import files_under, launch, small_qwen_inputs
from tests.helpers.refusals import assert_one_line_refusal
from tests.helpers.scorer_service import TOKEN


@pytest.fixture
def inputs(tmp_path) -> list[str]:
    """A model dir and one step's rows where preflight looks, the reward on CometKiwi alone, the stand-in trainer."""
    base = [a for a in small_qwen_inputs(tmp_path) if a != "debug.skip_scorer=true"]
    # the checkpoint the service loads (its tiny CometKiwi), by a path that need not exist here
    return base + ["reward.sentence_models=[cometkiwi_da]", "reward.weights.kiwi=1.0", "scorer.placement=external",
                   "scorer.models.cometkiwi_da.path=/on/the/server/cometkiwi/checkpoints/model.ckpt",
                   "debug.train_command_override=/bin/true"]


def _nothing_written(tmp_path) -> None:
    assert files_under(tmp_path / "out") == [] and files_under(tmp_path / "results") == []


def test_plan_needs_the_url_and_reads_it_only_when_external(tmp_path, inputs):
    res = launch(inputs + ["dry_run=true"])
    assert res.returncode == 2
    assert_one_line_refusal(res.stderr, "error: scorer.placement=external needs the running service's URL: "
                            "scorer.url=http://HOST:PORT (got None)", "QE_SCORER_TOKEN")
    res = launch([a for a in inputs if a != "scorer.placement=external"] + ["scorer.url=http://gpu7:8000",
                                                                           "dry_run=true"])
    assert res.returncode == 2
    assert_one_line_refusal(res.stderr, "error: scorer.url=http://gpu7:8000 is read only with scorer.placement="
                            "external (placement is shared)")
    _nothing_written(tmp_path)


def test_each_bad_service_is_refused_before_anything_is_written(tmp_path, inputs, scorer_service):
    url = scorer_service.url
    cases = [
        ([f"scorer.url={url}"], {"QE_SCORER_TOKEN": ""},
         "error: scorer.placement=external needs the service's bearer token in the environment variable "
         "QE_SCORER_TOKEN"),
        ([f"scorer.url={url}"], {"QE_SCORER_TOKEN": "not-the-token"},
         f"error: QE scorer at {url} (scorer.url) answered /health with HTTP 401 (QE_SCORER_TOKEN is not the "
         f"service's token)"),
        (["scorer.url=http://127.0.0.1:9"], {"QE_SCORER_TOKEN": TOKEN},
         "error: QE scorer at http://127.0.0.1:9 (scorer.url) is not reachable: "),
        ([f"scorer.url={url}", "reward.sentence_models=[metricx24_xl]", "reward.weights.kiwi=0.0",
          "reward.weights.metricx=1.0"], {"QE_SCORER_TOKEN": TOKEN},
         f"error: QE scorer at {url} (scorer.url) does not serve metricx24_xl, which the reward needs (it serves: "),
        ([f"scorer.url={url}", "scorer.models.cometkiwi_da.kind=comet-da"], {"QE_SCORER_TOKEN": TOKEN},
         f"error: QE scorer at {url} (scorer.url) serves cometkiwi_da as a cometkiwi model, but "
         f"scorer.models.cometkiwi_da.kind is comet-da"),
        ([f"scorer.url={url}", "scorer.models.cometkiwi_da.path=/m/wmt23-cometkiwi-da-xl/checkpoints/model.ckpt"],
         {"QE_SCORER_TOKEN": TOKEN},
         f"error: QE scorer at {url} (scorer.url) serves cometkiwi_da from checkpoint cometkiwi, but "
         f"scorer.models.cometkiwi_da.path names wmt23-cometkiwi-da-xl"),
    ]
    for args, env, prefix in cases:
        res = launch(inputs + args, env_extra=env)
        assert res.returncode == 2, (args, (res.stdout + res.stderr)[-3000:])
        assert_one_line_refusal(res.stderr, prefix)
        _nothing_written(tmp_path)
    # a dry run plans it and says what a real launch would refuse
    dry = launch(inputs + ["scorer.url=http://127.0.0.1:9", "dry_run=true"], env_extra={"QE_SCORER_TOKEN": TOKEN})
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
    assert any(line.startswith("note: QE scorer at http://127.0.0.1:9 (scorer.url) is not reachable")
               and line.endswith("(a real launch is refused)") for line in dry.stdout.splitlines()), dry.stdout[-3000:]


def test_a_sweep_shares_the_service_and_starts_no_scorer(tmp_path, inputs, scorer_service):
    res = launch(["--multirun"] + inputs + [f"scorer.url={scorer_service.url}", "seed=1,2"],
                 env_extra={"QE_SCORER_TOKEN": TOKEN, "CUDA_VISIBLE_DEVICES": "0", "SLURM_CPUS_PER_TASK": "16"})
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    runs = sorted(p.parent for p in (tmp_path / "out").rglob("snapshot/plan.json"))
    assert len(runs) == 2, runs
    for run in runs:
        assert not (run.parent / "scorer").exists()  # nothing started here
    said = f"QE scorer (node 0): the external service at {scorer_service.url} (cometkiwi_da)"
    assert res.stdout.count(said) == 2, res.stdout[-3000:]
    # the token is in no file the runs wrote
    assert not [p for p in files_under(tmp_path / "out") if p.is_file() and TOKEN in p.read_text(errors="replace")]
