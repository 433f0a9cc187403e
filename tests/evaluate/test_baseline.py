"""`baseline=DIR`: an evaluation compared with an earlier one over the same segments, through the real CLI:
a better system gets a positive, significant ΔBLEU equal to sacrebleu's own corpus BLEU difference; a
system against itself nothing significant; a baseline over another test set, or no evaluation at all, is
refused in one line before anything is generated or written. The QE metrics' wiring (MetricX-24 lower
is better) is checked against the live tiny service."""
from __future__ import annotations

import csv
import json

import pytest
from sacrebleu.metrics import BLEU

from src.evaluate.cli import main
from src.evaluate.significance import paired_bootstrap_segments
from tests.evaluate.conftest import CASES
from tests.helpers.en_zh_systems import EN, GOOD, REFS, WEAK
from tests.helpers.refusals import assert_one_line_refusal
from tests.helpers.scorer_service import TOKEN

ROW = "news/en-zh"  # the table row of the test set below: its name and direction


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path):
    """(the test set spec, {system name: its hypotheses file})."""
    src, ref = write_lines(tmp_path / "news.en", EN), write_lines(tmp_path / "news.zh", REFS)
    systems = {name: write_lines(tmp_path / f"{name}.txt", lines) for name, lines in (("good", GOOD), ("weak", WEAK))}
    return f"{src}:{ref}", systems


def evaluate(tmp_path, test_set, hypotheses, name, *extra) -> tuple[int, object]:
    out = tmp_path / name
    return main([f"testsets={test_set}", "template=chat", f"hypotheses={hypotheses}", "metrics=bleu,chrf",
                 f"out={out}", *extra]), out


def comparison(out) -> dict:
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))["baseline"]


def table(out) -> list[str]:
    return (out / "scores.md").read_text(encoding="utf-8").splitlines()


def test_a_better_system_gets_a_significant_bleu_gain_equal_to_sacrebleus_difference(tmp_path, files):
    test_set, systems = files
    assert evaluate(tmp_path, test_set, systems["weak"], "weak")[0] == 0
    code, out = evaluate(tmp_path, test_set, systems["good"], "good", f"baseline={tmp_path / 'weak'}")
    assert code == 0
    found = comparison(out)
    zh = BLEU(tokenize="zh")
    direct = zh.corpus_score(GOOD, [REFS]).score - zh.corpus_score(WEAK, [REFS]).score
    bleu = found["rows"][ROW]["bleu"]
    assert bleu["delta"] == pytest.approx(direct, abs=1e-9) and direct > 20
    assert bleu["p_value"] < 0.05 and bleu["significant"] is True
    assert "bs:1000|seed:12345" in bleu["signature"] and "tok:zh" in bleu["signature"]
    assert found["rows"][ROW]["chrf"]["significant"] is True
    assert (found["resamples"], found["seed"], found["metrics"]) == (1000, 12345, ["bleu", "chrf"])
    lines = table(out)
    assert lines[0].endswith("| BLEU | chrF | ΔBLEU | ΔchrF |")
    assert f"| {direct:+.2f}* (p={bleu['p_value']:.3f}) |" in lines[2]
    note = lines[-1]
    assert note.startswith(f"Δ: this evaluation minus the baseline {tmp_path / 'weak'}, + is better")
    assert "1000 resamples, seed 12345" in note and "* p < 0.05" in note
    row = next(csv.DictReader(open(out / "scores.csv", encoding="utf-8")))
    assert float(row["delta_bleu"]) == pytest.approx(direct) and float(row["p_bleu"]) == bleu["p_value"]


def test_a_system_against_itself_differs_by_nothing_significant(tmp_path, files):
    test_set, systems = files
    assert evaluate(tmp_path, test_set, systems["weak"], "first")[0] == 0
    code, out = evaluate(tmp_path, test_set, systems["weak"], "again", f"baseline={tmp_path / 'first'}",
                         "bootstrap_resamples=200", "bootstrap_seed=7")
    assert code == 0
    found = comparison(out)
    for metric in ("bleu", "chrf"):
        result = found["rows"][ROW][metric]
        assert result["delta"] == 0 and result["p_value"] == 1.0 and result["significant"] is False
        assert "bs:200|seed:7" in result["signature"]
    assert "| +0.00 (p=1.000) | +0.00 (p=1.000) |" in table(out)[2]
    assert "200 resamples, seed 7" in table(out)[-1]


def test_a_baseline_of_another_test_set_is_refused_before_anything(tmp_path, files, capsys):
    test_set, systems = files
    other = f"{write_lines(tmp_path / 'talks.en', EN[:4])}:{write_lines(tmp_path / 'talks.zh', REFS[:4])}"
    assert evaluate(tmp_path, other, write_lines(tmp_path / "o.txt", WEAK[:4]), "other")[0] == 0
    capsys.readouterr()
    code, out = evaluate(tmp_path, test_set, systems["good"], "good", f"baseline={tmp_path / 'other'}")
    assert code == 2 and not out.exists()
    assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: baseline: ",
                            f"{tmp_path / 'other'} evaluated testsets talks(plain) and this evaluation testsets "
                            f"news(plain); compare evaluations of the same test set")


def test_a_baseline_over_other_rows_of_the_same_set_is_refused(tmp_path, files, capsys):
    test_set, systems = files
    assert evaluate(tmp_path, test_set, systems["weak"], "weak", "limit=5")[0] == 0
    capsys.readouterr()
    code, out = evaluate(tmp_path, test_set, systems["good"], "good", f"baseline={tmp_path / 'weak'}")
    assert code == 2 and not out.exists()
    assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: baseline: ",
                            "scored 5 segments and this evaluation would score 8")
    # the same name and size, another source: the segment that differs is named
    edited = tmp_path / "edited"
    edited.mkdir()
    src = write_lines(edited / "news.en", [EN[0], "Something else entirely.", *EN[2:]])
    spec = f"{src}:{write_lines(edited / 'news.zh', REFS)}"
    code, out = evaluate(tmp_path, spec, systems["good"], "good", f"baseline={tmp_path / 'weak'}", "limit=5")
    assert code == 2 and not out.exists()
    assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: baseline: ",
                            "segment 2 differs: src 'Heavy rain", "'Something else entirely.' here")


def test_no_evaluation_at_the_baseline_path_is_refused(tmp_path, files, capsys):
    test_set, systems = files
    half = tmp_path / "half"
    half.mkdir()
    (half / "segments.jsonl").write_text("", encoding="utf-8")
    for path, needle in ((tmp_path / "nope", f"no such file or directory: {tmp_path / 'nope'}"),
                         (half, f"{half} has no summary.json: not an output dir of python -m src.evaluate")):
        code, out = evaluate(tmp_path, test_set, systems["good"], "good", f"baseline={path}")
        assert code == 2 and not out.exists()
        assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: baseline: ", needle)


def test_a_hypotheses_file_as_baseline_is_evaluated_first_in_the_same_command(tmp_path, files):
    """baseline=FILE: the outside system's file evaluated here into <out>/baseline/, and the comparison the same as
    the two commands' (evaluate it, then baseline=its dir)."""
    test_set, systems = files
    code, out = evaluate(tmp_path, test_set, systems["good"], "good", f"baseline={systems['weak']}")
    assert code == 0
    found = comparison(out)
    assert found["dir"] == str(systems["weak"].resolve()) and found["evaluation"] == "baseline"
    made_here = out / "baseline"
    theirs = json.loads((made_here / "summary.json").read_text(encoding="utf-8"))
    assert theirs["options"]["hypotheses"] == str(systems["weak"]) and "baseline" not in theirs
    assert [json.loads(line)["translation"] for line in (made_here / "segments.jsonl").open(encoding="utf-8")] == WEAK
    assert evaluate(tmp_path, test_set, systems["weak"], "weak")[0] == 0
    code, two_steps = evaluate(tmp_path, test_set, systems["good"], "good-2", f"baseline={tmp_path / 'weak'}")
    assert code == 0 and comparison(two_steps)["rows"] == found["rows"]
    assert table(out)[-1].startswith(f"Δ: this evaluation minus the baseline {systems['weak'].resolve()}")


@pytest.mark.parametrize("extra, says", [
    (["baseline_extract=lenient"], "is a hypotheses file (one translation a line, read as it is): baseline_extract"),
    (["baseline_chat_template=true"], "baseline_chat_template are for a baseline model; drop them"),
])
def test_baseline_model_options_with_a_hypotheses_file_are_refused(tmp_path, files, capsys, extra, says):
    test_set, systems = files
    code, out = evaluate(tmp_path, test_set, systems["good"], "good", f"baseline={systems['weak']}", *extra)
    assert code == 2 and not out.exists()
    assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: baseline=", says)


def test_baseline_model_options_with_an_earlier_evaluation_are_refused(tmp_path, files, capsys):
    test_set, systems = files
    assert evaluate(tmp_path, test_set, systems["weak"], "weak")[0] == 0
    capsys.readouterr()
    code, out = evaluate(tmp_path, test_set, systems["good"], "good", f"baseline={tmp_path / 'weak'}",
                         "baseline_extract=raw")
    assert code == 2 and not out.exists()
    assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: baseline=",
                            "is an earlier evaluation, already prompted and scored")


@pytest.mark.parametrize("extra, says", [
    (["baseline_extract=raw"], "baseline_extract=raw: only used with baseline="),
    (["baseline=x", "baseline_template=rl"], "baseline_template=rl is the template testsets= rows are built with"),
])
def test_baseline_options_that_cannot_apply_are_refused(tmp_path, capsys, extra, says):
    data = tmp_path / "test.parquet"
    code = main([f"data={data}", "generator=file", f"responses={tmp_path / 'r.jsonl'}", *extra])
    assert code == 2
    assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: ", says)


def test_a_baseline_dir_that_is_no_model_and_no_evaluation_is_refused_before_anything_runs(tmp_path, files, capsys):
    test_set, systems = files
    (tmp_path / "empty").mkdir()
    code, out = evaluate(tmp_path, test_set, systems["good"], "good", f"baseline={tmp_path / 'empty'}")
    assert code == 2 and not out.exists()
    assert_one_line_refusal(capsys.readouterr().err, f"evaluate: error: baseline: checkpoint: {tmp_path / 'empty'} "
                                                     f"is neither an HF model dir")


def test_a_baseline_model_is_prompted_and_read_as_the_baseline_options_say(tmp_path, files):
    """An outside system's file against a base instruct model on this CPU machine: the model's evaluation gets its
    own template, chat template and extraction, and nothing of the system's (checked up front, nothing generated)."""
    from src.evaluate.baseline import MODEL
    from src.evaluate.cli import BaselineRun
    from src.evaluate.options import parse_options
    from src.tiny_models.policy import ensure_built

    model = tmp_path / "base-model"
    ensure_built(model)
    test_set, systems = files
    opts = parse_options([f"testsets={test_set}", "template=rl", f"hypotheses={systems['good']}", "metrics=bleu",
                          "accelerator=cpu", "trained_on=bleu", f"baseline={model}", "baseline_template=chat",
                          "baseline_chat_template=true", "baseline_extract=raw"])
    theirs = BaselineRun(opts, MODEL).prepared.opts
    assert (theirs.checkpoint, theirs.generator, theirs.accelerator) == (str(model), "vllm", "cpu")
    assert (theirs.template, theirs.chat_template, theirs.extract) == ("chat", True, "raw")
    assert theirs.baseline is None and theirs.hypotheses is None and theirs.trained_on == [] and theirs.out is None


def test_bootstrap_options_without_a_baseline_are_refused(tmp_path, files, capsys):
    test_set, systems = files
    code, out = evaluate(tmp_path, test_set, systems["good"], "good", "bootstrap_seed=7")
    assert code == 2 and not out.exists()
    assert_one_line_refusal(capsys.readouterr().err, "evaluate: error: bootstrap_seed=7: only used with baseline=")


def test_qe_metrics_compared_on_their_segment_scores_lower_is_better_for_metricx(testset, tmp_path,
                                                                                   metricx_service, monkeypatch):
    """kiwi (higher is better) and MetricX-24 (lower is better) from the tiny service: each row's comparison
    is significance's paired bootstrap of the two segments.jsonl's scores, signed by the metric's scale."""
    monkeypatch.setenv("QE_SCORER_TOKEN", TOKEN)
    data, responses = testset
    worse = tmp_path / "worse.jsonl"  # every answer empty: the worst MetricX score
    worse.write_text("".join(json.dumps({"index": i, "response": "<translate></translate>"}) + "\n"
                             for i in range(len(CASES))), encoding="utf-8")
    common = [f"data={data}", "generator=file", f"scorer_url={metricx_service.url}", "metrics=bleu,kiwi,metricx"]
    assert main([*common, f"responses={worse}", f"out={tmp_path / 'base'}"]) == 0
    assert main([*common, f"responses={responses}", f"out={tmp_path / 'new'}", f"baseline={tmp_path / 'base'}",
                 "bootstrap_resamples=300"]) == 0
    found = comparison(tmp_path / "new")
    # both judged the format (extract=lenient): the share of well-formed answers is compared too, in percent
    assert found["metrics"] == ["bleu", "kiwi", "metricx", "format_ok"]
    ours = [json.loads(line) for line in (tmp_path / "new" / "segments.jsonl").read_text().splitlines()]
    theirs = [json.loads(line) for line in (tmp_path / "base" / "segments.jsonl").read_text().splitlines()]
    for direction in ("zh-en", "en-zh"):
        pairs = [(a, b) for a, b in zip(ours, theirs) if a["direction"] == direction]
        for metric, higher in (("kiwi", True), ("metricx", False)):
            want = paired_bootstrap_segments([a[metric] for a, _ in pairs], [b[metric] for _, b in pairs],
                                             higher_is_better=higher, n_resamples=300)
            got = found["rows"][direction][metric]
            assert got["higher_is_better"] is higher
            assert (got["delta"], got["low"], got["high"], got["p_value"]) == pytest.approx(
                (want.delta, want.low, want.high, want.p_value))
        # empty answers score 25, the worst: fewer errors is a positive improvement
        assert found["rows"][direction]["metricx"]["delta"] > 0
        want = paired_bootstrap_segments([100.0 * a["format_ok"] for a, _ in pairs],
                                         [100.0 * b["format_ok"] for _, b in pairs], n_resamples=300)
        got = found["rows"][direction]["format_ok"]
        assert (got["system"], got["baseline"], got["delta"], got["p_value"]) == pytest.approx(
            (want.system, want.baseline, want.delta, want.p_value))
        assert got["system"] == pytest.approx(100.0 * sum(a["format_ok"] for a, _ in pairs) / len(pairs))
    lines = table(tmp_path / "new")
    assert lines[0].endswith("| ΔBLEU | ΔCometKiwi | ΔMetricX-24 | Δformat ok % |")
    assert "(MetricX-24: lower is better, so baseline minus this)" in lines[-1]
