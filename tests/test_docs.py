"""The docs against the project itself (train env: .venv/bin/python -m pytest tests/test_docs.py).

- every config key named in README.md and docs/*.md (inline code such as `scorer.placement=shared`,
  `batch.prompts_per_step`, `+verl.actor_rollout_ref...`) exists in the composed config, is an
  option of a config group, or (for `verl.` keys and keys of verl's own sections) exists in verl's
  ppo_trainer config;
- every command in the code blocks of README.md and docs/*.md parses: a `python -m src.launch` line passes the launch
  precheck (compose + plan of every combination), and a transcript line (`$ python -m src.launch
  ...` followed by `error: ...`) that the precheck refuses is refused with exactly that line;
  `make` targets exist in the Makefile; other `python -m src.*` modules answer --help;
- every repo file named in README.md, docs/*.md, and in comments and docstrings of src/, conf/,
  tests/, benches/ exists; a file named without its folder (`RESULTS.md`) is a file of the repo;
- README.md is a front page (at most 300 lines) that links every page of docs/.
"""
from __future__ import annotations

import ast
import io
import itertools
import os
import re
import shlex
import subprocess
import tokenize
from functools import lru_cache
from pathlib import Path

import pytest
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
_MISSING = object()


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def without_fences(text: str) -> str:
    return FENCE.sub("", text)


# --------------------------------------------------------------------------------------------
# config keys

@lru_cache(maxsize=None)
def composed() -> dict:
    from src.config import compose_config

    return compose_config([])


@lru_cache(maxsize=None)
def verl_defaults():
    from src.verl_config import compose

    return compose([])


@lru_cache(maxsize=None)
def groups() -> dict[str, list[str]]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from src.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        out = {}
        for g in ("model", "data", "reward", "reward_base", "algo", "scorer", "paths", "logger",
                  "experiment", "accelerator", "hydra/launcher", "local"):
            out[g] = loader.get_group_options(g)
    return out


KEY = re.compile(r"^(\+{1,2}|~)?([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*)(?:\.\*)?(?:=(\S*))?$")


def _select(cfg, key: str):
    return OmegaConf.select(OmegaConf.create(cfg) if isinstance(cfg, dict) else cfg, key, default=_MISSING)


@lru_cache(maxsize=None)
def _composes(override: str) -> bool:
    """A top-level key's value composes (the schema types it: gpus=6 does, gpus=six does not)."""
    from src.config import compose_config

    try:
        compose_config([override])
    except Exception:
        return False
    return True


def _in_verl(key: str) -> bool:
    """verl has the key, or the key lies under one of verl's open dicts (an empty mapping in its
    defaults, such as override_config or engine_kwargs.vllm: any key may go there)."""
    if _select(verl_defaults(), key) is not _MISSING:
        return True
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        node = _select(verl_defaults(), ".".join(parts[:i]))
        if node is not _MISSING:
            return OmegaConf.is_dict(node) and len(node) == 0
    return False


def key_problem(token: str) -> str | None:
    """None if `token` names a real key / group option, else what is wrong. Tokens that are not
    config keys of ours or verl's (module names, file names, prose) are not judged."""
    m = KEY.match(token)
    if not m:
        return None
    _, key, value = m.groups()
    first = key.split(".")[0]
    if key.startswith("verl."):
        return None if _in_verl(key[5:]) else f"verl has no key {key[5:]}"
    if "." not in key:
        if value is None:
            return None  # a bare name
        opts = [o.strip("'\"") for o in value.split(",") if o]
        if first in groups():
            bad = [o for o in opts if o not in groups()[first]]
            return f"{first} has no option {', '.join(bad)}" if bad else None
        if first in composed():  # a top-level scalar such as seed=2, gpus=2,4 or dry_run=true
            # gpus=N, nodes=K: placeholders in prose
            bad = [o for o in opts if not o.isupper() and not _composes(f"{first}={o}")]
            return f"{first}={','.join(bad)} is not a valid value" if bad else None
        return None
    if first in composed():
        if _select(composed(), key) is not _MISSING:
            return None
        if _in_verl(key):
            return None  # a verl key named with its verl path (e.g. trainer.use_v1)
        return f"no config key {key}"
    if first in verl_defaults():
        return None if _in_verl(key) else f"verl has no key {key}"
    return None


def doc_keys():
    for doc in DOCS:
        for span in INLINE.findall(doc.read_text(encoding="utf-8")):
            if any(c in span for c in "<>…[]/") or span.startswith(("python", ".venv", "$")):
                continue
            for token in span.split():
                yield _rel(doc), token


def test_config_keys_named_in_the_docs_exist():
    tokens = set(doc_keys())
    judged = {t for _, t in tokens if KEY.match(t) and "=" in t or "." in t}
    assert len(judged) >= 50  # the docs do name keys: an extraction that finds none is broken
    problems = sorted({f"{doc}: `{tok}`: {p}" for doc, tok in tokens if (p := key_problem(tok))})
    assert problems == []


def test_key_check_can_fail():
    assert key_problem("scorer.placement=shared") is None
    assert key_problem("batch.prompts_per_step") is None
    assert key_problem("+verl.actor_rollout_ref.actor.optim.lr_warmup_steps=10") is None
    assert key_problem("scorer.placemnt=shared") == "no config key scorer.placemnt"
    assert key_problem("+verl.actor_rollout_ref.actor.bogus=1") == "verl has no key actor_rollout_ref.actor.bogus"
    assert key_problem("reward=nope") == "reward has no option nope"
    assert key_problem("gpus=2,'3'") is None and key_problem("gpus=6") is None
    assert key_problem("gpus=six") == "gpus=six is not a valid value"
    # under one of verl's open dicts any key goes; beside it, not
    assert key_problem("actor_rollout_ref.model.override_config.attn_implementation") is None
    assert key_problem("actor_rollout_ref.model.bogus_key") == "verl has no key actor_rollout_ref.model.bogus_key"


# --------------------------------------------------------------------------------------------
# README commands

def readme_commands():
    """(line, command args, following output lines) for each command line in the fences of README.md
    and of every page in docs/."""
    text = "\n".join(doc.read_text(encoding="utf-8") for doc in DOCS)
    for block in FENCE.findall(text):
        lines = block.replace("\\\n", " ").splitlines()
        for i, raw in enumerate(lines):
            line = raw.strip()
            transcript = line.startswith("$ ")
            line = line[2:] if transcript else line
            # a trailing comment, or the description column of a usage table (3+ spaces)
            line = re.split(r"\s+#\s|\s{3,}", line)[0].strip()
            if not re.match(r"^(\S*python \-m |make\b)", line):
                continue
            following = []
            for nxt in lines[i + 1:]:
                if nxt.startswith("$ ") or re.match(r"^\S*python -m |make\b", nxt.strip()):
                    break
                following.append(nxt.strip())
            yield line, transcript, following


LAUNCH_CMDS = list({c[0]: c for c in readme_commands() if " -m src.launch" in c[0]}.values())
# a transcript of a Slurm command shows what Slurm said (sbatch --test-only): it needs the Slurm dev cluster
# (.ci/run starts it), which the fast tier does not (tests/tiers.py)
SLURM_TRANSCRIPTS = [c for c in LAUNCH_CMDS if c[1] and "hydra/launcher=slurm" in c[0]]
LAUNCH_CMDS = [c for c in LAUNCH_CMDS if c not in SLURM_TRANSCRIPTS]
# one --help per module is enough (each costs a process start)
OTHER_CMDS = list({(c[0].split(" -m ", 1)[1].split()[0] if " -m " in c[0] else c[0]): c
                   for c in readme_commands() if " -m src.launch" not in c[0]}.values())


def _launch_args(line: str):
    try:
        args = shlex.split(line.split(" -m src.launch", 1)[1])
    except ValueError:  # an unbalanced quote in the README line
        pytest.fail(f"README command does not parse as a shell line: {line!r}")
    if any(a.startswith("<") or a.startswith("[") or "<" in a for a in args):
        return None  # a usage pattern ([group=option ...], <run>), not a command
    multirun = any(a in ("--multirun", "-m") for a in args)
    args = [a for a in args if a not in ("--multirun", "-m")]
    if any(a.startswith("--") for a in args):
        return None  # --help, --cfg, --from-snapshot DIR: Hydra/our flags, checked by test_launcher's CLI tests
    return args, multirun


@pytest.mark.parametrize("line, transcript, following", LAUNCH_CMDS, ids=[c[0][-60:] for c in LAUNCH_CMDS])
def test_readme_launch_command_passes_the_precheck(line, transcript, following):
    _passes_the_precheck_or_shows_its_refusal(line, transcript, following)


@pytest.mark.parametrize("line, transcript, following", SLURM_TRANSCRIPTS,
                         ids=[c[0][-60:] for c in SLURM_TRANSCRIPTS])
def test_readme_slurm_transcript_is_what_slurm_says(line, transcript, following):
    _passes_the_precheck_or_shows_its_refusal(line, transcript, following)


def _passes_the_precheck_or_shows_its_refusal(line: str, transcript: bool, following: list[str]) -> None:
    from src.pipeline import UsageError, precheck

    parsed = _launch_args(line)
    if parsed is None:
        assert re.search(r"--help|--cfg|--from-snapshot|\[|<", line), line
        return
    args, multirun = parsed
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    shown = next((f[len("error: "):] for f in following if f.startswith("error: ")), None)
    try:
        # a Slurm command is for the reader's cluster, not the dev cluster here: Slurm is not asked about its
        # request, except in a transcript, which shows what a refusal there says; nor are the model and data
        # files its jobs read looked for (the reader's too), except in a transcript of that refusal
        precheck(args, multirun, env, ask_slurm=transcript,
                 look_for_inputs=transcript and " not found at " in (shown or ""))
    except UsageError as err:
        assert not str(err).startswith("Slurm's controller did not answer"), (
            f"{line!r} needs Slurm to answer (start the dev cluster: bash slurm/dev-cluster/start.sh): {err}")
        assert transcript and shown is not None, f"README command refused: {line!r}: {err}"
        # the README may elide the middle of a long message with "..."
        head, *_, tail = shown.split("...") if "..." in shown else (shown, "")
        assert str(err).startswith(head) and str(err).endswith(tail) and len(str(err)) >= len(head + tail), (
            f"README shows a different error for {line!r}: {err}")
        return
    # accepted by the precheck: an error shown below it must come from a later stage (preflight)
    if shown is not None:
        assert "visible" in shown or "GPU" in shown, (line, shown)


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", text, re.M))


@pytest.mark.parametrize("line, transcript, following", OTHER_CMDS, ids=[c[0][-60:] for c in OTHER_CMDS])
def test_readme_other_command_exists(line, transcript, following):
    if line.startswith("make"):
        targets = shlex.split(line)[1:]
        assert targets and set(t for t in targets if "=" not in t) <= _make_targets(), line
        return
    module = shlex.split(line.split(" -m ", 1)[1])[0]
    if not module.startswith("src."):
        return  # another package's module (verl.model_merger): not ours to run
    python = ROOT / (".venv-scorer" if module.startswith("src.scorer") else ".venv") / "bin" / "python"
    res = subprocess.run([str(python), "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.strip(), (line, res.stderr[-2000:])


# --------------------------------------------------------------------------------------------
# files named in docs and comments

PATH = re.compile(r"(?<![\w./~$-])((?:src|conf|tests|benches|docs|slurm|sweeps|envs|hydra_plugins)"
                  r"/[\w./-]*\w\.(?:py|yaml|yml|md|sh|txt|in|json|toml|cfg))\b")


def _comment_text(path: Path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix in (".yaml", ".yml", ".sh"):
        return "\n".join(l.split("#", 1)[1] for l in text.splitlines() if "#" in l)
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                out.append(tok.string)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.append(ast.get_docstring(node) or "")
    except (tokenize.TokenError, SyntaxError):
        return ""
    return "\n".join(out)


@lru_cache(maxsize=None)
def _source_comments() -> tuple[tuple[str, str], ...]:
    """(repo-relative path, comments and docstrings) of every source file: read and tokenized once per process,
    for both checks of the names in them below."""
    return tuple((_rel(f), _comment_text(f)) for top in ("src", "conf", "tests", "benches", "slurm", "envs")
                 for f in sorted((ROOT / top).rglob("*"))
                 if f.suffix in (".py", ".yaml", ".yml", ".sh") and ".cache" not in f.parts and f.is_file())


def named_files():
    for doc in DOCS:
        for p in PATH.findall(doc.read_text(encoding="utf-8")):
            yield _rel(doc), p
    for where, text in _source_comments():
        for p in PATH.findall(text):
            yield where, p


# a page named without its folder (`RESULTS.md`): a Markdown file of the repo. Only .md:
# bare .py/.yaml names in comments are mostly verl's, comet's or Ray's files, cited on purpose.
BARE = re.compile(r"(?<![\w./~$-])([A-Za-z][\w-]*\.md)\b(?![/\w])")
# pages the project writes into run, sweep and evaluation dirs (src/report/summary.py,
# src/report/compare_report.py, src/evaluate/outputs.py, src/evaluate/run_results.py)
WRITTEN_PAGES = {"summary.md", "compare.md", "scores.md", "results.md"}


def bare_file_names():
    for doc in DOCS:
        for name in BARE.findall(without_fences(doc.read_text(encoding="utf-8"))):
            yield _rel(doc), name
    for where, text in _source_comments():
        for name in BARE.findall(text):
            yield where, name


@lru_cache(maxsize=None)
def repo_file_names() -> frozenset[str]:
    """Names of the repository's files (tracked or not ignored), and of the git-ignored machine files
    users create from a shipped `<name>.example`."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\n")
    names = {Path(p).name for p in listed if p}
    return frozenset(names | {n.removesuffix(".example") for n in names})


def bare_name_problem(where: str, name: str) -> str | None:
    if name in repo_file_names() or name in WRITTEN_PAGES:
        return None
    return f"{where}: {name} names no file of this repository"


def test_bare_file_names_in_docs_and_comments_exist():
    found = set(bare_file_names())
    assert len(found) >= 5
    assert sorted(filter(None, (bare_name_problem(w, n) for w, n in found))) == []


def test_bare_name_check_can_fail():
    assert bare_name_problem("x", "DESIGN.md") == "x: DESIGN.md names no file of this repository"
    assert bare_name_problem("x", "RESULTS.md") is None


def test_readme_is_a_short_front_page_linking_every_docs_page():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if f"(docs/{p.name}" not in text]
    assert unlinked == [], f"docs pages the README does not link: {unlinked}"


def test_files_named_in_docs_and_comments_exist():
    names = set(named_files())
    assert len(names) >= 100  # files are named all over the docs and comments
    missing = sorted({f"{where}: {p}" for where, p in names
                      if not any(c in p for c in "<>*{}") and not (ROOT / p).exists()
                      # a git-ignored machine file the user creates from its shipped example
                      and not (ROOT / (p + ".example")).exists()})
    assert missing == []


# --------------------------------------------------------------------------------------------
# docs/layout.md: drawn from the real tree

def layout_paths() -> list[Path]:
    """The paths docs/layout.md's block names: a line's leading `name/` or `name.py` tokens, relative
    to the package of the enclosing, less indented line (top-level lines: to the repo root)."""
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    section = text[text.index("# Layout\n"):]
    block = section.split("```\n")[1]
    stack: list[tuple[int, Path]] = []
    paths = []
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        base = stack[-1][1] if stack else ROOT
        head = line.strip().split("  ")[0]  # the paths; a description follows after two spaces
        tokens = list(itertools.takewhile(lambda tok: tok.endswith(("/", ".py")), head.split()))
        paths += [base / tok for tok in tokens]
        if len(tokens) == 1 and tokens[0].endswith("/"):
            stack.append((indent, base / tokens[0]))
    return paths


def test_readme_layout_names_every_module_and_only_real_ones():
    named = layout_paths()
    assert len(named) >= 80
    missing = sorted(str(p.relative_to(ROOT)) for p in named if not p.exists())
    assert missing == [], f"docs/layout.md names files that do not exist: {missing}"
    modules = {p for p in (ROOT / "src").rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts}
    unlisted = sorted(str(p.relative_to(ROOT)) for p in modules - set(named))
    assert unlisted == [], f"modules missing from docs/layout.md: {unlisted}"


# --------------------------------------------------------------------------------------------
# group tables

# groups a table lists, and the one that must list every option of each: conf/ subfolders (Hydra's groups)
GROUP_TABLE = ROOT / "docs" / "commands.md"
# conf/ folders that are no choice on the command line: reward_base is every reward group's shared base
# (`defaults: - /reward_base@_here_: default`), hydra holds hydra/launcher (a row of its own)
NOT_CHOSEN = {"reward_base", "hydra"}


def group_rows(text: str) -> dict[str, list[str]]:
    """{group: the options its row names} for every row of a docs table whose header starts `| group | options`."""
    rows, in_table = {}, False
    for line in text.splitlines():
        if line.startswith("| group | options"):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            name = re.match(r"`([^`]+)`", cells[0])
            if name:
                rows[name.group(1)] = re.findall(r"`([^`=\s]+)`", cells[1])
    return rows


def group_table_problems(text: str) -> list[str]:
    rows = group_rows(text)
    problems = []
    folders = sorted(p.name for p in (ROOT / "conf").iterdir() if p.is_dir() and p.name not in NOT_CHOSEN)
    for group in folders + ["hydra/launcher", "sweep"]:
        if group not in rows:
            problems.append(f"no row for group {group}")
            continue
        if group == "local":  # the user's own file, git-ignored: no options to list
            continue
        ours = groups().get(group) if group in groups() else _group_options(group)
        if group == "hydra/launcher":  # Hydra's own launchers are there too: ours and `basic`, the default
            ours = sorted(p.stem for p in (ROOT / "conf" / "hydra" / "launcher").glob("*.yaml")) + ["basic"]
        if sorted(rows[group]) != sorted(ours):
            problems.append(f"{group}: the table lists {sorted(rows[group])}, Hydra's group has {sorted(ours)}")
    return problems


def _group_options(group: str) -> list[str]:
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from src.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return GlobalHydra.instance().config_loader().get_group_options(group)


def test_the_group_table_lists_every_group_and_exactly_its_options():
    """Issue 51 (finding 11): the table lacked reward=metricx, accelerator=cpu and experiment=learn_tiny."""
    assert group_table_problems(GROUP_TABLE.read_text(encoding="utf-8")) == []


def test_the_group_table_check_can_fail():
    text = GROUP_TABLE.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `logger` |"))
    assert group_table_problems(text.replace(row, row.replace("`console`, ", ""))) == [
        "logger: the table lists ['both', 'wandb'], Hydra's group has ['both', 'console', 'wandb']"]
    assert group_table_problems(text.replace(row + "\n", "")) == ["no row for group logger"]
