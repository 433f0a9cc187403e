"""One copy of each fact the QE service and its clients share (issue 25 part 4).

The severity names, which metric a model kind gives, how a /score item is built, and `flatten`
each live in one module (src/scorer/vocabulary.py, src/config/dotted.py) that every user imports.
An AST scan of src/ fails when a second copy reappears: a severity name or a set of kind names
written out, a /score item dict, a needs_ref -> comet/kiwi choice, a function called flatten.
"""
import ast
import json
from pathlib import Path

import yaml

from src.config import dotted
from src.scorer import backends, vocabulary
from src.scorer.backends import KINDS

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
VOCABULARY = Path("scorer/vocabulary.py")
CONFIG = Path("scorer/config.py")  # KINDS: what each checkpoint kind reads and can say
DOTTED = Path("config/dotted.py")
# tiny checkpoints built for tests and experiment=smoke_tiny: their names and comet label lists are
# inputs to comet's model classes (hparams), and the package imports nothing of src (tests/test_layout.py)
TINY_MODELS = Path("tiny_models/qe.py")
KIND_NAMES = set(KINDS)


def python_files(root: Path):
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def strings(nodes) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def copies(root: Path) -> list[str]:
    """Every second copy of a shared fact in the tree under `root` (a src/ dir), as 'file:line: what'."""
    found = []
    for path in python_files(root):
        rel = path.relative_to(root)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstrings(tree)
        for node in ast.walk(tree):
            where = f"src/{rel}:{getattr(node, 'lineno', '?')}"
            # severity names: only the vocabulary spells them
            if isinstance(node, ast.Constant) and node.value in vocabulary.SEVERITIES and id(node) not in skip \
                    and rel not in (VOCABULARY, TINY_MODELS):
                found.append(f"{where}: severity name {node.value!r}")
            # model kinds grouped by what they give: only KINDS (and the metric rule) say it
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and rel not in (CONFIG, VOCABULARY, TINY_MODELS):
                kinds = [s for s in strings(node.elts) if s in KIND_NAMES]
                if len(kinds) >= 2:
                    found.append(f"{where}: model kinds {kinds}")
            # needs_ref -> comet | kiwi: only vocabulary.metric_of decides
            if isinstance(node, ast.IfExp) and rel != VOCABULARY \
                    and set(strings([node.body, node.orelse])) == {vocabulary.REFERENCE_METRIC, vocabulary.QE_METRIC}:
                found.append(f"{where}: a metric chosen by hand")
            # a /score item: built by vocabulary.request_item (the service's own internals aside)
            if isinstance(node, ast.Dict) and {"src", "mt"} <= set(strings(node.keys)) \
                    and rel.parts[0] != "scorer":
                found.append(f"{where}: a /score item dict")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "flatten" in node.name \
                    and rel != DOTTED:
                found.append(f"{where}: def {node.name}")
    return found


def test_no_second_copy_in_src():
    assert copies(SRC) == []


def test_the_scan_finds_each_kind_of_copy(tmp_path):
    """Each rule fires on a copy of its fact (so the scan above can fail)."""
    probe = tmp_path / "rewards" / "probe.py"
    probe.parent.mkdir()
    probe.write_text(
        '"""minor: a docstring is not a copy."""\n'
        'SEVERITIES = ("minor", "major", "critical")\n'
        'KINDS_OF = {"kiwi": ("cometkiwi", "referenceless")}\n'
        'def role(m):\n    return "comet" if m.get("needs_ref") else "kiwi"\n'
        'def item(s, t):\n    return {"src": s, "mt": t}\n'
        'def _flatten(tree):\n    return tree\n', encoding="utf-8")
    found = copies(tmp_path)
    assert len([f for f in found if "severity name" in f]) == 3, found
    assert sorted(f.split(": ", 1)[1] for f in found if "severity" not in f) == [
        "a /score item dict", "a metric chosen by hand", "def _flatten",
        "model kinds ['cometkiwi', 'referenceless']"], found


def test_every_user_holds_the_one_copy():
    from src.evaluate import options, qe_metrics
    from src.plan import values
    from src.record import identity
    from src.report import samples_page
    from src.rewards import qe
    from src.rewards.credit import ranges
    from src.scorer.backends.comet import decode

    assert qe.SEVERITIES is samples_page.SEVERITIES is vocabulary.SEVERITIES
    assert ranges.SEVERITIES == vocabulary.SEVERITIES + ("bad",)
    assert tuple(decode.MQM_WEIGHTS) == vocabulary.SEVERITIES
    assert options.QE_METRICS is backends.METRICS
    assert values.flatten is identity.flatten is identity._flatten is dotted.flatten


def test_kind_to_metric_is_what_each_user_had():
    """The mapping the evaluation kept by hand, and the reward's needs_ref rule, follow from KINDS."""
    from src.evaluate.qe_metrics import METRIC_KINDS
    from src.rewards.group import RewardGroup
    from src.rewards.group_kwargs import sentence_model_components

    assert {m: set(k) for m, k in METRIC_KINDS.items()} == {
        "comet": {"comet-da"}, "kiwi": {"cometkiwi", "referenceless"}, "xcomet": {"xcomet", "unified"},
        "metricx": {"metricx"}}
    models = yaml.safe_load((ROOT / "conf" / "scorer" / "default.yaml").read_text(encoding="utf-8"))["models"]
    for name, spec in models.items():
        # conf/scorer's needs_ref (the launcher's copy, read without the scorer) agrees with the kind
        assert spec["needs_ref"] == (KINDS[spec["kind"]].ref == "required"), name
    # one model per metric (a group names one of each: metricx24_xl or _xxl)
    sentence = list({KINDS[spec["kind"]].metric: n for n, spec in reversed(models.items())
                     if not KINDS[spec["kind"]].word_level}.values())
    group = RewardGroup(name="t", mode="off", sentence_models=tuple(sentence), span_model=None, validation_models=(),
                        plugins=(), weights={}, clip={}, round_decimals=4)
    roles = sentence_model_components(group, models)
    assert {r: KINDS[models[n]["kind"]].metric for r, n in roles.items() if n} == {r: r for r, n in roles.items() if n}


def test_request_items_as_before():
    """The items the reward and the evaluation sent before the change."""
    item = vocabulary.request_item
    assert item("comet", "s", "m", ref="r", lang="de") == {"src": "s", "mt": "m", "ref": "r"}
    assert item("kiwi", "s", "m", ref="r", lang="de", span_reference=True) == {"src": "s", "mt": "m"}
    assert item("xcomet", "s", "m", ref="r", lang="de", span_reference=True) == \
        {"src": "s", "mt": "m", "lang": "de", "ref": "r"}
    assert item("xcomet", "s", "m", ref="  ", lang="", span_reference=True) == {"src": "s", "mt": "m"}
    assert item("xcomet", "s", "m", ref="r", lang="zh") == {"src": "s", "mt": "m", "lang": "zh"}
    spans = [{"severity": "major"}, {"severity": "minor"}, {"severity": "major"}, {"severity": "odd"}, {}]
    assert vocabulary.severity_counts(spans) == {"n_minor": 1, "n_major": 2, "n_critical": 0}


def test_flatten_keeps_what_both_users_relied_on():
    assert dotted.flatten({"a": {"b": 1, "c": {}}, "d": None}) == {"a.b": 1, "a.c": {}, "d": None}
    assert dotted.flatten({}) == {} and dotted.flatten(None) == {}


# what the train env may import of src.scorer: the modules that stay stdlib (+ PyYAML for config.py),
# the backends' registry among them (each backend package's __init__.py: its descriptor only)
TRAIN_ENV_SCORER_MODULES = {"src.scorer.vocabulary", "src.scorer.config", "src.scorer.backends"}


def test_the_train_env_imports_only_the_stdlib_modules_of_the_scorer():
    """rewards, evaluate, report and node may import src.scorer (tests/test_layout.py), but only
    vocabulary.py, config.py and the backends' registry: the rest loads torch and comet, which the
    train env cannot."""
    wrong = []
    for path in python_files(SRC):
        if path.relative_to(SRC).parts[0] == "scorer":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if isinstance(node, ast.ImportFrom) and node.module == "src":
                modules = [f"src.{a.name}" for a in node.names]
            wrong += [f"{path.relative_to(ROOT)}:{node.lineno} imports {m}" for m in modules
                      if (m == "src.scorer" or m.startswith("src.scorer.")) and m not in TRAIN_ENV_SCORER_MODULES]
    assert wrong == []
    vocabulary_imports = {n.module or a.name for n in ast.walk(ast.parse((SRC / VOCABULARY).read_text("utf-8")))
                          if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    assert vocabulary_imports <= {"__future__", "typing"}, vocabulary_imports


def test_the_backends_registry_loads_no_model_library():
    """The registry imports every backend package (its descriptor): none may pull in torch or a model
    library at import time, or the train env could not read the descriptors."""
    import subprocess
    import sys

    code = ("import json, sys, src.scorer.config, src.scorer.backends as b; "
            "print(json.dumps([sorted(b.BACKENDS), sorted(m for m in ('torch', 'comet', 'transformers', 'tokenizers') "
            "if m in sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    names, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    assert names == sorted(backends.BACKENDS) and len(names) >= 2
    assert heavy == [], f"importing the backends' descriptors loaded {heavy}"
