"""`python -m src.report <sweep dir>` and `python -m src.report RUN_DIR RUN_DIR ...` (issue 36 parts 4-5).

The README's "Compare algorithms" task, run: a real local dry-run sweep (`algo=grpo,dapo seed=1,2`:
real snapshots and summary.json) whose runs then get metrics files in verl's own file-logger format
(tests/report/sweep_builder.py), compared by `python -m src.report <sweep dir>` (src.report's main):
grpo's two seeds train 6 steps, dapo seed 1 trains 6 and dapo seed 2 fails after 3 (its summary row
says failed, with an error carrying markup). compare.json's numbers are checked against the values
the builder logged, computed here from its formulas and from the files read with `json` only; the
page is opened in a real browser (tests/report/browser.py).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from src.record import sweep_summary
from src.record.run_params import describe
from src.report.cli import main
from src.report.compare import compare, metrics_of
from src.report.compare_plots import plot_metric
from src.report.run_files import load_run
from src.report.sweep_dirs import find_runs

from . import sweep_builder as sb
from .browser import png_size
from tests.helpers.refusals import assert_one_line_refusal

STEPS = {("grpo", 1): 6, ("grpo", 2): 6, ("dapo", 1): 6, ("dapo", 2): 3}
ERROR = "RunError: training command exited with code 1 <img src=x onerror=\"document.title='pwned'\">"
VAL_ZH_EN = "val-core/wmt_zh_en/zh-en/reward/mean@1"
COMET_EN_ZH = "val-aux/wmt_zh_en/en-zh/comet/mean@1"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    sweep = sb.trained_sweep(tmp_path_factory.mktemp("compare"), STEPS, ("dapo", 2), ERROR)
    return sweep


@pytest.fixture(scope="module")
def compared(sweep) -> dict:
    assert main([str(sweep)]) == 0
    return json.loads((sweep / "compare" / "compare.json").read_text(encoding="utf-8"))


def _logged(sweep: Path) -> dict[tuple[str, int], dict[int, dict]]:
    """{(algo, seed): {step: {metric: value}}} read from the metrics files with json only."""
    out = {}
    for key, run in sb.runs_by_params(sweep).items():
        ckpt = yaml.safe_load((run / "snapshot" / "verl_config.yaml").read_text())["trainer"]["default_local_dir"]
        steps: dict[int, dict] = {}
        for f in sorted((Path(ckpt) / "metrics").glob("*.jsonl")):
            for line in f.read_text().splitlines():
                rec = json.loads(line)
                steps.setdefault(rec["step"], {}).update(rec["data"])
        out[key] = steps
    return out


def _expected(values_by_seed: list[dict[int, float]], better: str | None) -> dict:
    """final and best at the last step every seed reached (issue 51 finding 9), from {step: value} per seed."""
    step = min(max(v) for v in values_by_seed)
    upto = [[v[t] for t in sorted(v) if t <= step] for v in values_by_seed]
    finals = [v[-1] for v in upto]
    bests = [(max(v) if better == "higher" else min(v)) for v in upto] if better else None
    def agg(xs):
        return {"mean": sum(xs) / len(xs), "min": min(xs), "max": max(xs), "spread": max(xs) - min(xs)}
    return {"final": agg(finals), "best": agg(bests) if bests else None}


def _close(got: dict | None, want: dict | None, tol: float = 1e-9):
    if want is None:
        assert got is None
        return
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=tol), (k, got, want)


def test_local_sweep_summary_is_read(sweep):
    rows = sweep_summary.read(sweep)
    assert [r["state"] for r in rows] == ["succeeded", "succeeded", "succeeded", "failed"]
    assert rows[3]["error"] == ERROR


def test_configurations_and_swept_parameters(compared):
    assert compared["swept"] == ["algo"]
    assert [c["label"] for c in compared["configurations"]] == ["algo=dapo", "algo=grpo"]
    dapo, grpo = compared["configurations"]
    assert dapo["seeds"] == [1, 2] and grpo["seeds"] == [1, 2]
    assert dapo["states"] == {"done": 1, "failed": 1} and grpo["states"] == {"done": 2}
    failed = [r for r in compared["runs"] if r["state"] == "failed"]
    assert len(failed) == 1 and failed[0]["seed"] == 2 and failed[0]["error"] == ERROR
    assert failed[0]["configuration"] == "algo=dapo"


def test_trained_reward_against_the_logged_formula(compared):
    """The trained reward's numbers from sweep_builder.train_score itself, not from any file (verl
    computes the batch's mean in float32: 1e-6)."""
    for config in compared["configurations"]:
        algo = config["params"]["algo"]
        series = [{t: sb.train_score(algo, s, t) for t in range(1, STEPS[(algo, s)] + 1)} for s in (1, 2)]
        got = config["metrics"]["critic/score/mean"]
        want = _expected(series, "higher")
        _close(got["final"], want["final"], 1e-6)
        _close(got["best"], want["best"], 1e-6)
        assert got["runs"] == 2
        assert got["last_step"] == {"min": min(STEPS[(algo, s)] for s in (1, 2)),
                                    "max": max(STEPS[(algo, s)] for s in (1, 2))}


@pytest.mark.parametrize("metric, better", [
    ("critic/score/mean", "higher"), (VAL_ZH_EN, "higher"), (COMET_EN_ZH, "higher"),
    ("actor/entropy", None), ("actor/kl_loss", None), ("response_length/mean", None),
    ("timing_s/step", "lower"), ("perf/throughput", "higher"),
])
def test_every_metric_against_the_files_read_with_json(sweep, compared, metric, better):
    logged = _logged(sweep)
    meta = {m["name"]: m for m in compared["metrics"]}
    assert meta[metric]["better"] == better
    for config in compared["configurations"]:
        algo = config["params"]["algo"]
        series = [{t: logged[(algo, s)][t][metric] for t in sorted(logged[(algo, s)]) if metric in logged[(algo, s)][t]}
                  for s in (1, 2)]
        want = _expected(series, better)
        got = config["metrics"][metric]
        _close(got["final"], want["final"])
        _close(got["best"], want["best"])


def test_held_out_and_trained_validation_metrics_are_marked(compared):
    roles = {m["name"]: m["role"] for m in compared["metrics"]}
    assert roles[COMET_EN_ZH] == "held out"
    assert roles["val-aux/wmt_zh_en/en-zh/xcomet/mean@1"] == "trained"
    assert roles[VAL_ZH_EN] is None
    # the trained reward first; the metrics no run logged are named
    assert compared["metrics"][0]["name"] == "critic/score/mean"
    assert compared["absent_metrics"] == ["actor/reward_kl_penalty"]


def test_plot_draws_the_mean_per_configuration_and_a_band_over_seeds(sweep):
    entries = find_runs([sweep])
    loaded = {e.run_dir: load_run(e.run_dir) for e in entries}
    comparison = compare(entries, loaded, {})
    metric = next(m for m in metrics_of(list(loaded.values()))[0] if m.name == "critic/score/mean")
    fig = plot_metric(comparison, metric)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"algo=dapo (2 seeds, 1 failed)", "algo=grpo (2 seeds)"}
    grpo = lines["algo=grpo (2 seeds)"]
    assert list(grpo.get_xdata()) == list(range(1, 7))
    assert list(grpo.get_ydata()) == pytest.approx(
        [(sb.train_score("grpo", 1, t) + sb.train_score("grpo", 2, t)) / 2 for t in range(1, 7)], abs=1e-6)
    dapo = lines["algo=dapo (2 seeds, 1 failed)"]
    # past step 3 only seed 1 is left: the mean is its value
    assert list(dapo.get_ydata()) == pytest.approx(
        [(sb.train_score("dapo", 1, t) + sb.train_score("dapo", 2, t)) / 2 for t in range(1, 4)]
        + [sb.train_score("dapo", 1, t) for t in range(4, 7)], abs=1e-6)
    assert dapo.get_linestyle() == "--" and grpo.get_linestyle() == "-"
    bands = ax.collections
    assert len(bands) == 2  # one min-max band per configuration with several seeds
    lo, hi = bands[1].get_paths()[0].vertices[:, 1].min(), bands[1].get_paths()[0].vertices[:, 1].max()
    assert lo == pytest.approx(sb.train_score("grpo", 1, 1), abs=1e-6)
    assert hi == pytest.approx(sb.train_score("grpo", 2, 6), abs=1e-6)


def test_files_and_the_markdown_table(sweep, compared):
    out = sweep / "compare"
    names = {p.name for p in out.iterdir()}
    assert {"compare.md", "compare.html", "compare.json"} <= names
    assert {m["plot"] for m in compared["metrics"]} == names - {"compare.md", "compare.html", "compare.json"}
    md = (out / "compare.md").read_text(encoding="utf-8")
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| algo | seeds | runs | step | reward final | reward best |")
    assert table[1].startswith("| dapo | 2 (1, 2 failed) | 1 done, 1 failed | 3 (reached 3-6) |")
    assert table[2].startswith("| grpo | 2 (1, 2) | 2 done | 6 |")
    grpo = compared["configurations"][1]["metrics"]["critic/score/mean"]["final"]
    assert f"{grpo['mean']:.4f} [{grpo['min']:.4f}, {grpo['max']:.4f}]" in table[2]
    assert "failed: " + ERROR in md


def test_runs_still_training_and_sweeps_without_a_summary(sweep, tmp_path):
    copy = tmp_path / sweep.name
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("compare"))
    sb.mark(copy, sb.runs_by_params(copy)[("grpo", 2)], sweep_summary.PENDING)
    assert main([str(copy)]) == 0
    runs = json.loads((copy / "compare" / "compare.json").read_text())["runs"]
    assert sorted(r["state"] for r in runs) == ["done", "done", "failed", "running"]
    # a sweep that has not written summary.json (still running, or written before local sweeps did)
    (copy / "summary.json").unlink()
    assert main([str(copy)]) == 0  # replaces its own earlier comparison
    runs = json.loads((copy / "compare" / "compare.json").read_text())["runs"]
    assert {r["state"] for r in runs} == {"no record"}


def test_the_sweeps_evaluations_are_shown_beside_the_curves(sweep, tmp_path):
    """What `python -m src.evaluate run=<sweep dir>` writes into <sweep dir>/eval/ by default (its writer,
    src/evaluate/run_results.py, here with one checkpoint's rows): compare.md shows its table, compare.html links
    its page, compare.json holds its results; an evaluation cut short (no results.json) is left out."""
    from src.evaluate import run_results

    copy = tmp_path / sweep.name
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("compare"))
    folder = copy / "eval" / "2026-11-29_10-00-00_test"
    # grpo's two seeds at step 6 and dapo's first, as run= names them: by their run dirs' names
    runs = sb.runs_by_params(copy)
    evaluated = []
    for (algo, seed), bleu in ((("grpo", 1), 31.0), (("grpo", 2), 33.0), (("dapo", 1), 29.0)):
        name = Path(runs[(algo, seed)]).name
        (folder / name / "step_6").mkdir(parents=True)
        rows = [{"direction": "zh-en", "segments": 48, "format_ok": 75.0, "bleu": bleu, "chrf": 52.5}]
        evaluated.append((name, 6, folder / name / "step_6", rows, {}))
    # as run= labels the runs: by the same grouping as the comparison's (src/record/run_params.py)
    labels = {e.name: e.configuration for e in describe([Path(runs[k]) for k in (("grpo", 1), ("grpo", 2), ("dapo", 1))], {})}
    run_results.write(folder, evaluated, None, labels)
    (copy / "eval" / "2026-11-29_11-00-00_cut").mkdir()
    (copy / "eval" / "2026-11-29_11-00-00_cut" / "results.md").write_text("| partial |")
    assert main([str(copy)]) == 0
    md = (copy / "compare" / "compare.md").read_text()
    assert "## Evaluations of the checkpoints (python -m src.evaluate run=)" in md
    assert "### eval/2026-11-29_10-00-00_test (3 checkpoints)" in md
    assert f"| {evaluated[0][0]} | 6 | zh-en | 48 | 75.0 | 31.00 |" in md and "partial" not in md
    # grpo's two seeds: mean and sample standard deviation (dapo has one seed here: no spread to give)
    (grpo,) = [line for line in md.splitlines() if line.startswith("| algo=grpo | 6 | zh-en | 2 |")]
    assert "32.00 ± 1.41" in grpo and "75.00 ± 0.00" in grpo, grpo
    assert not [line for line in md.splitlines() if line.startswith("| algo=dapo | 6 |")]
    page = (copy / "compare" / "compare.html").read_text()
    assert '<a href="../eval/2026-11-29_10-00-00_test/results.html">2026-11-29_10-00-00_test</a>' in page
    (found,) = json.loads((copy / "compare" / "compare.json").read_text())["evaluations"]
    assert found["results"] == json.loads((folder / "results.json").read_text())
    (seeds,) = found["over_seeds"]
    assert seeds["seeds"] == 2 and seeds["bleu"]["mean"] == pytest.approx(32.0)
    assert seeds["bleu"]["std"] == pytest.approx(2 ** 0.5)
    # the evaluation's own table averaged the same seeds of the same configuration
    assert found["results"]["over_seeds"] == found["over_seeds"]
    # an evaluation written before it averaged seeds itself: the comparison adds the table
    results = json.loads((folder / "results.json").read_text())
    del results["over_seeds"]
    (folder / "results.json").write_text(json.dumps(results))
    (folder / "results.md").write_text("| run | step |\n| --- | ---: |\n")
    assert main([str(copy)]) == 0
    md = (copy / "compare" / "compare.md").read_text()
    assert len([line for line in md.splitlines() if line.startswith("| algo=grpo | 6 | zh-en | 2 |")]) == 1


def test_a_slurm_sweep_dir(sweep, tmp_path):
    """A Slurm sweep's dir: the code snapshot and submitit's folder beside the run dirs, and the
    submitter's summary rows (job ids, requests) naming the run dirs where they were at submission."""
    copy = tmp_path / sweep.name
    shutil.copytree(sweep, copy, ignore=shutil.ignore_patterns("compare", "summary.json"))
    (copy / "code" / "src").mkdir(parents=True)
    (copy / "code" / "CODE_SNAPSHOT.json").write_text("{}")
    (copy / ".submitit" / "4242_0").mkdir(parents=True)
    jobs = []
    for i, ((algo, seed), run) in enumerate(sorted(sb.runs_by_params(copy).items())):
        failed = (algo, seed) == ("dapo", 2)
        jobs.append(sweep_summary.SweepJob(
            idx=i, overrides=[f"algo={algo}", f"seed={seed}"], run_dir=f"/elsewhere/at/submission/{run.name}",
            params={"gpus_per_node": 4, "cpus_per_task": 22, "nodes": 1}, job_id=f"4242_{i}",
            state=sweep_summary.FAILED if failed else sweep_summary.SUCCEEDED,
            error="UncompletedJobError: job 4242_3 was killed (Slurm state: OUT_OF_MEMORY)" if failed else None))
    sweep_summary.write(copy / sweep_summary.SUMMARY_FILE, jobs)
    assert main([str(copy)]) == 0
    body = json.loads((copy / "compare" / "compare.json").read_text())
    assert len(body["runs"]) == 4 and body["swept"] == ["algo"]
    states = {(r["params"]["algo"], r["seed"]): (r["state"], r["error"]) for r in body["runs"]}
    assert states[("dapo", 2)] == ("failed", "UncompletedJobError: job 4242_3 was killed (Slurm state: OUT_OF_MEMORY)")
    assert {v[0] for k, v in states.items() if k != ("dapo", 2)} == {"done"}


def test_run_dirs_given_one_by_one_and_older_layouts(sweep, built_run, tmp_path, capsys):
    """Two runs of the sweep, a run dir of an older layout (metrics.jsonl and a verl config in its
    snapshot only: no overrides, no composed config, no plan) and a checkpoint dir given directly."""
    runs = sb.runs_by_params(sweep)
    ckpt = yaml.safe_load((runs[("dapo", 1)] / "snapshot" / "verl_config.yaml").read_text())["trainer"][
        "default_local_dir"]
    out = tmp_path / "cmp"
    assert main([str(runs[("grpo", 1)]), str(runs[("dapo", 2)]), str(built_run), ckpt, "--out", str(out)]) == 0
    body = json.loads((out / "compare.json").read_text())
    by_dir = {r["run_dir"]: r for r in body["runs"]}
    assert by_dir[str(runs[("dapo", 2)])]["state"] == "failed"  # read from the sweep dir above it
    assert by_dir[str(built_run)]["state"] == "no record" and by_dir[str(built_run)]["seed"] is None
    assert by_dir[ckpt]["seed"] == 1  # the checkpoint dir's name: seed1_...
    assert len(body["configurations"]) == 4
    assert "comparison written to" in capsys.readouterr().out


def _refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    return assert_one_line_refusal(capsys.readouterr().err, "report: error: ")[len("report: error: "):]


def test_bad_input_is_one_line_and_writes_nothing(sweep, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    # one dir that is no sweep is a run's report (its own refusals, tests/report/test_report_refusals.py)
    assert "is neither a run dir" in _refused(capsys, [str(sweep), str(empty)])
    assert "no such directory" in _refused(capsys, [str(tmp_path / "nope"), str(empty)])
    assert "--gpus applies to one run's report" in _refused(capsys, [str(sweep), "--gpus", "4"])
    runs = sb.runs_by_params(sweep)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(runs[("grpo", 1)], elsewhere)
    assert "give --out DIR" in _refused(capsys, [str(runs[("grpo", 2)]), str(elsewhere)])
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert "holds files a comparison did not write (notes.txt)" in _refused(
        capsys, [str(sweep), "--out", str(foreign)])
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    # a dry sweep has nothing to compare
    dry = tmp_path / "dry"
    shutil.copytree(sweep, dry, ignore=shutil.ignore_patterns("compare"))
    for run in sb.runs_by_params(dry).values():
        (run / "snapshot" / "verl_config.yaml").write_text("trainer:\n  default_local_dir: /nonexistent\n")
    assert _refused(capsys, [str(dry)]).startswith("none of the 4 runs has metrics to compare (")
    assert "a dry run (dry_run=true)" in _refused(capsys, [str(dry)])
    assert not (dry / "compare").exists()
    # a damaged summary
    (dry / "summary.json").write_text("{not json")
    assert "summary.json is not readable JSON" in _refused(capsys, [str(dry)])


def test_the_page_in_a_browser(sweep, compared, browser):
    page = browser.open((sweep / "compare" / "compare.html").resolve().as_uri())
    assert page.eval("document.title") == f"Comparison: {sweep.name}"
    assert page.page_scripts() == [] and page.errors() == []
    rows = page.eval("""[...document.querySelectorAll('table.compare tbody tr')].map(r =>
        [r.className, ...[...r.cells].slice(0, 4).map(c => c.textContent)])""")
    assert rows == [["failed", "dapo", "2 (1, 2 failed)", "1 done, 1 failed", "3 (reached 3-6)"],
                    ["", "grpo", "2 (1, 2)", "2 done", "6"]]
    headers = page.eval("[...document.querySelectorAll('table.compare th')].map(h => h.textContent)")
    assert len(headers) == 4 + 2 * len(compared["metrics"])
    # the failed run's error, markup included, is text: no element made of it
    assert page.eval("document.querySelectorAll('[onerror]').length") == 0
    assert any(ERROR in t for t in page.eval("[...document.querySelectorAll('li')].map(l => l.textContent)"))
    # every plot loads at its size
    images = page.eval("[...document.images].map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])")
    assert [src for src, _, _ in images] == [m["plot"] for m in compared["metrics"]]
    for src, complete, width in images:
        assert complete and width == png_size(sweep / "compare" / src)[0], src
