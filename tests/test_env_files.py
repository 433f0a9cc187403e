"""The conda env files and `make setup` install from the same pinned requirement files."""
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[a-z0-9_,\-]+\])?==([^\s;]+)$")


def requirement_lines(path: Path) -> list[str]:
    return [l.strip() for l in path.read_text().splitlines() if l.strip() and not l.strip().startswith("#")]


def pip_section(env_file: Path) -> list[str]:
    deps = yaml.safe_load(env_file.read_text())["dependencies"]
    return next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)


def test_every_requirement_is_pinned():
    for name in ("requirements-train.txt", "requirements-scorer.txt"):
        for line in requirement_lines(ROOT / "envs" / name):
            assert PIN.match(line), f"envs/{name}: {line!r} is not pinned with =="


def test_environment_yml_uses_the_train_requirements_and_the_same_verl():
    pip = pip_section(ROOT / "environment.yml")
    assert "-r envs/requirements-train.txt" in pip
    reqs = {PIN.match(l).group(1): PIN.match(l).group(3) for l in requirement_lines(ROOT / "envs/requirements-train.txt")}
    verl_lines = [PIN.match(l) for l in pip if l.startswith("verl")]
    assert verl_lines and all(m.group(3) == reqs["verl"] == "0.9.1" for m in verl_lines)


def test_scorer_yml_uses_the_scorer_requirements():
    env_file = ROOT / "envs" / "scorer.yml"
    pip = pip_section(env_file)
    refs = [l.split(None, 1)[1] for l in pip if l.startswith("-r")]
    assert refs and all((env_file.parent / r).resolve() == (ROOT / "envs/requirements-scorer.txt") for r in refs)
    reqs = {PIN.match(l).group(1).lower(): PIN.match(l).group(3) for l in requirement_lines(ROOT / "envs/requirements-scorer.txt")}
    assert reqs["unbabel-comet"] == "2.2.7"
    assert int(reqs["numpy"].split(".")[0]) < 2 and int(reqs["transformers"].split(".")[0]) < 5


def test_make_setup_installs_from_the_same_files():
    makefile = (ROOT / "Makefile").read_text()
    assert "-r envs/requirements-train.txt" in makefile and "-r envs/requirements-scorer.txt" in makefile
    assert "torch==2.13.0" in makefile
