"""`python -m src.evaluate.inspect_reward`: the training reward of given translations, component by component.

The expected values come from compute_score itself (called here as verl's reward workers call it,
with the launcher's reward kwargs) and, with the tiny scorer, from the service's own answers;
--no-scorer from the reward's arithmetic written out (format bonus + weight x clip, a QE component
at its lower clip bound).
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from src.evaluate import inspect_reward as tool
from src.rewards.bleu import sentence_bleu
from src.rewards.compute import compute_score
from src.rewards.settings import RewardSettings
from tests.helpers.refusals import assert_one_line_refusal
from tests.helpers.reward_config import extra_info, kwargs_for
from tests.helpers.scorer_service import TOKEN

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "tests" / "fixtures" / "inspect_example.jsonl"
ENV_KEYS = ("QE_SCORER_URL", "QE_SCORER_TOKEN", "QE_SCORER_LOG", "QE_REWARD_COMPONENTS_DIR")


def rows_of(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text(encoding="utf-8").splitlines() if l.strip()]


def response_of(row: dict, template: str = "base") -> str:
    return row["response"] if "response" in row else tool.wrap(row["hyp"], template)


def info_of(row: dict, index: int, template: str = "base") -> dict:
    src_lang, tgt_lang = row["lang_pair"].split("-")
    return extra_info(row["src"], src_lang, tgt_lang, template=template, index=index)


@pytest.fixture
def clean_env(monkeypatch):
    """main() changes os.environ (service URL/token); monkeypatch restores it after the test."""
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = tool.main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_no_scorer_is_the_training_arithmetic_with_qe_not_computed(tmp_path, clean_env, capsys, loop):
    out = tmp_path / "scores.jsonl"
    rc, stdout, err = run_main(["--input", str(EXAMPLE), "--out", str(out), "--no-scorer", "reward=comet"], capsys)
    assert rc == 0, err
    rows, got = rows_of(EXAMPLE), rows_of(out)
    assert [g["id"] for g in got] == [r["id"] for r in rows]
    kw = kwargs_for("comet")
    s = RewardSettings.from_kwargs(kw)
    assert s.train_weights["kiwi"] == 1.0 and s.train_weights["bleu"] == 1.0  # the group's default, QE weighted
    kiwi_lo = s.clip["kiwi"][0]
    by_id = {g["id"]: g for g in got}
    for i, row in enumerate(rows):
        g = by_id[row["id"]]
        for qe in ("comet", "kiwi", "xcomet", "mqm", "ok_ratio"):
            assert g["components"][qe] is None, (row["id"], qe)
        ref = row.get("ref", "")
        if g["guards"] or g["components"]["format_ok"] == 0.0:
            # condemned before any scorer call: exactly compute_score's result, service or not
            want = loop.run_until_complete(compute_score("x/" + row["lang_pair"], response_of(row), ref,
                                                         info_of(row, i), **kw))
            assert g["score"] == want["score"] and g["components"]["answer"] == want["answer"], row["id"]
            assert g["guards"] == [k for k in want if k.startswith(("degenerate_", "guard_")) and want[k] == 1.0]
            continue
        bleu = sentence_bleu(g["translation"], ref, row["lang_pair"].split("-")[1]) if ref else None
        assert g["components"]["bleu"] == bleu
        bleu_part = 0.0 if bleu is None else min(max(bleu / 100.0, s.clip["bleu"][0]), s.clip["bleu"][1])
        assert g["score"] == pytest.approx(s.format.bonus + 1.0 * bleu_part + 1.0 * kiwi_lo, abs=1e-12), row["id"]
    # the fixture covers each path: clean, both guards, a format failure, no reference
    assert {"clean-zh-en", "copy-zh-en", "wrong-script-en-zh", "no-tags", "no-ref"} <= set(by_id)
    assert {"degenerate_source_copy", "degenerate_wrong_script"} <= set(by_id["copy-zh-en"]["guards"])
    assert "degenerate_wrong_script" in by_id["wrong-script-en-zh"]["guards"]
    assert by_id["clean-zh-en"]["guards"] == [] and by_id["no-tags"]["components"]["format_error"] == "missing_tag"
    assert by_id["no-ref"]["components"]["bleu"] is None  # no reference: BLEU at its lower bound
    assert "clean-zh-en" in stdout and "kiwi*" in stdout


def test_no_scorer_equals_compute_score_when_the_reward_has_no_qe(tmp_path, clean_env, capsys, loop):
    """A group whose training reward has no QE weight: compute_score itself runs without a service."""
    out = tmp_path / "scores.jsonl"
    rc, _, err = run_main(["--input", str(EXAMPLE), "--out", str(out), "--no-scorer", "reward=comet",
                           "reward.weights.kiwi=0", "data.template=rl"], capsys)
    assert rc == 0, err
    kw = kwargs_for("comet", "reward.weights.kiwi=0")
    for i, (row, g) in enumerate(zip(rows_of(EXAMPLE), rows_of(out))):
        want = loop.run_until_complete(compute_score("x/" + row["lang_pair"], response_of(row, "rl"),
                                                     row.get("ref", ""), info_of(row, i, "rl"), **kw))
        assert g["score"] == want["score"], row["id"]
        assert g["components"] == {k: v for k, v in want.items() if k not in ("score",) + tool.TEXT_KEYS}


def test_hyp_is_wrapped_in_the_runs_template(tmp_path, clean_env, capsys):
    """hyp gets the template's tags (rl: translate only); a response is scored as written."""
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"id": 1, "lang_pair": "zh-en", "src": "我喜欢读书。", "ref": "I like reading.",
                                "hyp": "I like reading."}) + "\n"
                    + json.dumps({"id": 2, "lang_pair": "zh-en", "src": "我喜欢读书。", "ref": "I like reading.",
                                  "response": "<think>x</think><translate>I like reading.</translate>"}) + "\n",
                    encoding="utf-8")
    out = tmp_path / "out.jsonl"
    rc, _, err = run_main(["--input", str(data), "--out", str(out), "--no-scorer", "reward=comet",
                           "data.template=rl"], capsys)
    assert rc == 0, err
    first, second = rows_of(out)
    assert first["components"]["format_ok"] == 1.0 and first["translation"] == "I like reading."
    assert second["components"]["format_error"] == "unexpected_think"  # rl asks for no <think>


def test_compute_score_without_the_scorer_leaves_qe_null_and_asks_nothing(loop, no_scorer_env):
    """compute_score's own switch, the one --no-scorer uses: no service is configured here, so a QE
    call would raise (it does without the switch); with it the QE components are None and a weighted
    one counts at its lower clip bound."""
    from src.rewards.client import ScorerNotConfigured

    kw = kwargs_for("comet")  # training answer: BLEU/100 + CometKiwi
    src, ref, mt = "我喜欢读书。", "I like reading.", "I love reading."
    response = f"<think>x</think><translate>{mt}</translate>"
    out = loop.run_until_complete(compute_score("x/zh-en", response, ref, extra_info(src), ask_scorer=False, **kw))
    assert out["kiwi"] is None and out["bleu"] == pytest.approx(sentence_bleu(mt, ref, "en"))
    assert out["score"] == pytest.approx(1.0 + out["bleu"] / 100 + 0.0)
    with pytest.raises(ScorerNotConfigured):
        loop.run_until_complete(compute_score("x/zh-en", response, ref, extra_info(src), **kw))


def test_no_scorer_asks_no_service(scorer_service, tmp_path, clean_env, capsys):
    """Even with a service in the environment, --no-scorer sends it nothing."""
    clean_env.setenv("QE_SCORER_URL", scorer_service.url)
    clean_env.setenv("QE_SCORER_TOKEN", TOKEN)
    before = scorer_service.items_by_model()
    rc, _, err = run_main(["--input", str(EXAMPLE), "--no-scorer", "reward=comet"], capsys)
    assert rc == 0, err
    assert scorer_service.items_by_model() == before


@pytest.mark.parametrize("reward", ["comet", "xcomet_xl"])
def test_with_the_scorer_equals_compute_score(reward, scorer_service, tmp_path, clean_env, capsys, loop):
    clean_env.setenv("QE_SCORER_TOKEN", TOKEN)
    out = tmp_path / "scores.jsonl"
    rc, stdout, err = run_main(["--input", str(EXAMPLE), "--out", str(out), f"reward={reward}",
                                f"scorer_url={scorer_service.url}"], capsys)
    assert rc == 0, err
    kw = kwargs_for(reward)
    clean_env.setenv("QE_SCORER_URL", scorer_service.url)  # as the runner gives verl's workers
    got = rows_of(out)
    for i, (row, g) in enumerate(zip(rows_of(EXAMPLE), got)):
        want = loop.run_until_complete(compute_score("x/" + row["lang_pair"], response_of(row),
                                                     row.get("ref", ""), info_of(row, i), **kw))
        # the service batches rows differently from one call to the next: fp32 scores agree to ~1e-7
        assert g["score"] == pytest.approx(want["score"], abs=1e-4), row["id"]
        expected = {k: v for k, v in want.items() if k not in ("score",) + tool.TEXT_KEYS}
        assert g["components"].keys() == expected.keys()
        for key, value in expected.items():
            assert g["components"][key] == (value if value is None or isinstance(value, str)
                                            else pytest.approx(value, abs=1e-4)), (row["id"], key)
        assert [sp["severity"] for sp in g["error_spans"]] == [sp["severity"] for sp in json.loads(want["error_spans"])]
    clean = next(g for g in got if g["id"] == "clean-zh-en")
    row = next(r for r in rows_of(EXAMPLE) if r["id"] == "clean-zh-en")
    if reward == "comet":  # the service's own answer for the same input
        kiwi = scorer_service.results("cometkiwi_da", [{"src": row["src"], "mt": row["hyp"]}])[0]["score"]
        assert clean["components"]["kiwi"] == pytest.approx(kiwi, abs=1e-4)
        assert clean["components"]["kiwi"] is not None and clean["guards"] == []
    else:
        xcomet = scorer_service.results("xcomet_xl", [{"src": row["src"], "mt": row["hyp"], "lang": "en"}],
                                      ["score", "spans"])[0]["score"]
        assert clean["components"]["xcomet"] == pytest.approx(xcomet, abs=1e-4)
    assert "clean-zh-en" in stdout


def test_without_scorer_url_a_service_is_started_as_evaluate_starts_it(tiny_comet_dir, scorer_service, tmp_path,
                                                                        clean_env, capsys):
    """No scorer_url=: the training reward's models of the composed scorer group (here pointed at
    the tiny checkpoints), on a service started and stopped by the command (src.evaluate's way)."""
    kiwi_dir = tiny_comet_dir / "models" / "cometkiwi"
    out = tmp_path / "scores.jsonl"
    rc, _, err = run_main(["--input", str(EXAMPLE), "--out", str(out), "reward=comet", "scorer_device=cpu",
                           f"scorer.models.cometkiwi_da.path={kiwi_dir}"], capsys)
    assert rc == 0, err
    assert "QE scorer ready at" in err and "cometkiwi_da" in err
    row = next(r for r in rows_of(EXAMPLE) if r["id"] == "clean-zh-en")
    clean = next(g for g in rows_of(out) if g["id"] == "clean-zh-en")
    # the same tiny checkpoint as the session's service: the same answer
    kiwi = scorer_service.results("cometkiwi_da", [{"src": row["src"], "mt": row["hyp"]}])[0]["score"]
    assert clean["components"]["kiwi"] == pytest.approx(kiwi, abs=1e-4)
    assert "QE_SCORER_URL" not in os.environ or os.environ["QE_SCORER_URL"] != scorer_service.url


def test_a_checkpoint_that_is_not_there_is_refused_before_scoring(tmp_path, clean_env, capsys):
    out = tmp_path / "scores.jsonl"
    rc, _, err = run_main(["--input", str(EXAMPLE), "--out", str(out), "reward=comet", "scorer_device=cpu",
                           f"scorer.models.cometkiwi_da.path={tmp_path / 'none.ckpt'}"], capsys)
    assert rc == 2 and err.startswith("error: ") and "not found" in err and err.count("\n") == 1, err
    assert not out.exists()


def test_a_misspelt_weight_gets_the_nearest_name_not_a_plus(tmp_path, clean_env, capsys):
    """Issue 51 (finding 5): Hydra's own line said to add `reward.weights.komet` with `+`."""
    out = tmp_path / "scores.jsonl"
    rc, _, err = run_main(["--input", str(EXAMPLE), "--out", str(out), "--no-scorer", "reward=comet",
                           "reward.weights.komet=1"], capsys)
    assert rc == 2
    line = assert_one_line_refusal(err, "error: ", "unknown component 'komet' (did you mean reward.weights.comet?")
    assert "+reward.weights.komet" not in line and not out.exists()


def test_a_german_answer_to_a_czech_row_is_the_wrong_language(tmp_path, clean_env, capsys):
    """Issue 51 (finding 1): cs, a language src.data.prepare accepts, was not among the guard's
    languages, so an en-cs row answered in German passed it (guards `-`)."""
    src = "The weather is nice today, so we are going for a long walk in the park."
    ref = "Dnes je hezké počasí, takže jdeme na dlouhou procházku do parku."
    rows = [{"id": "de-for-cs", "lang_pair": "en-cs", "src": src, "ref": ref,
             "hyp": "Heute ist das Wetter schön, also machen wir einen langen Spaziergang im Park."},
            {"id": "cs", "lang_pair": "en-cs", "src": src, "ref": ref,
             "hyp": "Dnes je krásné počasí, takže jdeme na dlouhou procházku v parku."}]
    given = tmp_path / "cs.jsonl"
    given.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "scores.jsonl"
    rc, _, err = run_main(["--input", str(given), "--out", str(out), "--no-scorer", "reward=comet"], capsys)
    assert rc == 0, err
    guards = {g["id"]: g["guards"] for g in rows_of(out)}
    assert guards == {"de-for-cs": ["guard_wrong_language"], "cs": []}


def _bad(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "in.jsonl"
    p.write_text(text, encoding="utf-8")
    return p


def _bad_bytes(tmp_path: Path, data: bytes) -> Path:
    p = tmp_path / "in.jsonl"
    p.write_bytes(data)
    return p


GOOD = json.dumps({"lang_pair": "zh-en", "src": "你好", "hyp": "Hello"})
REFUSALS = {
    "missing file": (lambda t: t / "nope.jsonl", "no such file"),
    "bad json": (lambda t: _bad(t, GOOD + "\n{not json\n"), "line 2: not JSON"),
    "not an object": (lambda t: _bad(t, "[1, 2]\n"), "line 1: a JSON object is needed"),
    "no src": (lambda t: _bad(t, json.dumps({"lang_pair": "zh-en", "hyp": "x"}) + "\n"), "line 1: needs \"src\""),
    "both": (lambda t: _bad(t, json.dumps({"lang_pair": "zh-en", "src": "a", "hyp": "x", "response": "y"}) + "\n"),
             "got both"),
    "neither": (lambda t: _bad(t, json.dumps({"lang_pair": "zh-en", "src": "a"}) + "\n"), "got neither"),
    "bad lang_pair": (lambda t: _bad(t, json.dumps({"lang_pair": "chinese", "src": "a", "hyp": "x"}) + "\n"),
                      "\"lang_pair\" must be"),
    "empty file": (lambda t: _bad(t, "\n"), "no rows"),
    # read as src.data's readers read text: where the bad byte is and how to convert the file
    "not utf-8": (lambda t: _bad_bytes(t, GOOD.encode() + b"\n" + "你好".encode("gbk")),
                  "in.jsonl:2: not UTF-8 text (byte 0xc4"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_bad_input_is_one_line_exit_2_nothing_written(case, tmp_path, clean_env, capsys):
    make, words = REFUSALS[case]
    out = tmp_path / "out.jsonl"
    rc, stdout, err = run_main(["--input", str(make(tmp_path)), "--out", str(out), "--no-scorer"], capsys)
    assert rc == 2 and stdout == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and words in err, err
    assert not out.exists()


def test_a_line_is_split_at_newlines_only(tmp_path, clean_env, capsys):
    """A U+2028 or U+0085 inside a JSON string (written raw, as ensure_ascii=False writes it) is
    text, not a line break (src.data.readers.iter_json_objects, the one JSON-lines loop)."""
    data = tmp_path / "in.jsonl"
    row = {"id": "ls", "lang_pair": "zh-en", "src": "你好\u2028世界\u0085。", "hyp": "Hello world."}
    data.write_text(json.dumps(row, ensure_ascii=False) + "\r\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    rc, _, err = run_main(["--input", str(data), "--out", str(out), "--no-scorer", "reward=comet"], capsys)
    assert rc == 0, err
    assert [r["id"] for r in rows_of(out)] == ["ls"]


def test_out_is_never_overwritten_nor_written_where_it_cannot(tmp_path, clean_env, capsys):
    out = tmp_path / "out.jsonl"
    out.write_text("keep me\n")
    rc, _, err = run_main(["--input", str(EXAMPLE), "--out", str(out), "--no-scorer"], capsys)
    assert rc == 2 and err.startswith("error: --out") and "never overwritten" in err and err.count("\n") == 1
    assert out.read_text() == "keep me\n"
    missing = tmp_path / "no" / "such" / "out.jsonl"
    rc, _, err = run_main(["--input", str(EXAMPLE), "--out", str(missing), "--no-scorer"], capsys)
    assert rc == 2 and "does not exist" in err and not missing.parent.exists()
    rc, _, err = run_main(["--input", str(EXAMPLE), "--out", str(tmp_path), "--no-scorer"], capsys)
    assert rc == 2 and "never overwritten" in err  # a directory exists too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]  # no temp file left


@pytest.mark.parametrize("args, words", [
    (["reward=nope"], "config:"),
    (["+reward.weights.nothing=1"], "unknown component"),
    (["scorer_url=http://127.0.0.1:9"], "contradict"),
    (["notakeyvalue"], "key=value"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_overrides_are_one_line(args, words, tmp_path, clean_env, capsys):
    out = tmp_path / "out.jsonl"
    rc, stdout, err = run_main(["--input", str(EXAMPLE), "--out", str(out), "--no-scorer", *args], capsys)
    assert rc == 2 and stdout == "" and err.startswith("error: ") and err.count("\n") == 1 and words in err, err
    assert not out.exists()


def test_a_missing_token_for_scorer_url_is_refused(tmp_path, clean_env, capsys):
    rc, _, err = run_main(["--input", str(EXAMPLE), "reward=comet", "scorer_url=http://127.0.0.1:9"], capsys)
    assert rc == 2 and "QE_SCORER_TOKEN" in err and err.count("\n") == 1


def test_table_cut_to_the_terminal_width_only_on_a_terminal():
    long = "word " * 60
    records = [{"id": "a", "line": 1, "score": 1.5, "guards": ["degenerate_source_copy"], "translation": long,
                "components": {"answer": 0.5, "format_ok": 1.0, "format_error": "", "bleu": 50.0, "kiwi": None}}]
    kw = {"train_weights": {"bleu": 1.0, "kiwi": 1.0, "comet": 0.0}}
    full = tool.table(records, kw, None)
    assert long.strip() in full and "source_copy" in full and "bleu*" in full and " comet " in full
    cut = tool.table(records, kw, 80)
    assert all(len(line) <= 80 for line in cut.splitlines()[:2]) and long.strip() not in cut


def test_the_command_line_help_and_a_pipe_gets_full_lines(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    python = REPO / ".venv" / "bin" / "python"
    res = subprocess.run([str(python), "-m", "src.evaluate.inspect_reward", "--help"], cwd=REPO, capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 0 and "--no-scorer" in res.stdout and "scorer_url=" in res.stdout
    res = subprocess.run([str(python), "-m", "src.evaluate.inspect_reward", "--input", str(EXAMPLE), "--no-scorer",
                          "reward=comet"], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**env, "COLUMNS": "40"})
    assert res.returncode == 0, res.stderr
    # stdout is a pipe: no line is cut to the terminal width
    assert "The weather is nice today, let's go for a walk in the park." in res.stdout
    assert max(len(l) for l in res.stdout.splitlines()) > 40


# Issue 33, must hold: inspect scores with exactly the weights (and every other reward kwarg) verl's
# config holds, for every shipped reward group and a set of overrides; a `+verl.` key that would make
# the two differ is refused at launch.
REWARD_GROUPS = sorted(p.stem for p in (REPO / "conf" / "reward").glob("*.yaml"))
REWARD_OVERRIDES = [[], ["reward.weights.bleu=0.5"], ["reward.validation.weights.bleu=0.25"],
                    ["reward.normalise=per_component"], ["reward.guards.repetition.enable=false"],
                    ["+verl.reward.custom_reward_function.reward_kwargs.train_weights.bleu=0.25"],
                    ["+verl.reward.custom_reward_function.reward_kwargs.validation_weights.kiwi=0"]]


def _verl_reward_kwargs(overrides: list[str], tmp_path: Path) -> dict | str:
    """reward_kwargs as the launcher writes them into verl's config (validated by verl), or its refusal."""
    from omegaconf import OmegaConf

    from src import verl_config
    from src.config import compose_config
    from src.plan import PlanError, build_plan
    from src.verl_config import checks, user_keys

    cfg = compose_config(overrides + [f"paths.results_root={tmp_path}"])
    try:
        plan = build_plan(cfg, run_dir=str(tmp_path / "run"), flash_attn=None, flashinfer=False)
        user_keys.check_user_keys(plan)
    except (PlanError, checks.VerlValueError) as exc:
        return str(exc)
    verl_cfg = verl_config.build(plan, cfg)
    return json.loads(json.dumps(OmegaConf.to_container(verl_cfg.reward.custom_reward_function.reward_kwargs,
                                                        resolve=True)))


@pytest.mark.parametrize("group", REWARD_GROUPS)
def test_inspect_scores_with_the_reward_kwargs_verl_runs(group, tmp_path):
    for extra in REWARD_OVERRIDES:
        overrides = [f"reward={group}", *extra]
        verl_kw = _verl_reward_kwargs(overrides, tmp_path)
        if isinstance(verl_kw, str):  # refused at launch: no run trains it
            assert extra and extra[0].startswith("+verl.reward.custom_reward_function."), (overrides, verl_kw)
            assert "is set by the reward group" in verl_kw and "\n" not in verl_kw
            continue
        inspected = json.loads(json.dumps(tool.reward_kwargs(tool.compose(overrides))))
        assert inspected == verl_kw, overrides
