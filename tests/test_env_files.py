"""The dependency locks (envs/lock/) agree with each other, with what we ask for (envs/*.in), with verl's own
GPU extras, and with every file that installs an environment (environment.yml, envs/scorer.yml, Makefile)."""
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "envs"))
import check_locks  # noqa: E402  (envs/ is not a package: lock.sh runs it as a script)

ENVS = check_locks.ENVS


def lock(env, platform):
    return check_locks.read_lock(check_locks.lock_path(env, platform))


def pip_section(env_file: Path) -> list[str]:
    deps = yaml.safe_load(env_file.read_text())["dependencies"]
    return next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)


def conda_python(env_file: Path) -> str:
    deps = yaml.safe_load(env_file.read_text())["dependencies"]
    return next(d.split("=", 1)[1] for d in deps if isinstance(d, str) and d.startswith("python="))


@pytest.mark.parametrize("env", ENVS)
def test_packages_on_both_platforms_have_one_version(env):
    gpu, cpu = lock(env, "gpu"), lock(env, "cpu")
    assert check_locks.drift(gpu, cpu) == []
    # only torch's build differs, and for the scorer not even its version
    assert cpu["torch"].endswith("+cpu") and "+" not in gpu["torch"]


def test_drift_is_reported():
    gpu, cpu = lock("train", "gpu"), lock("train", "cpu")
    cpu["transformers"] = "5.10.4"
    cpu["only-here"] = "1.0"
    assert check_locks.drift(gpu, cpu) == ["transformers: gpu 5.9.0 != cpu 5.10.4",
                                           "only-here==1.0 is in the CPU lock only"]


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("platform", ["gpu", "cpu"])
def test_every_requirement_we_ask_for_is_locked(env, platform):
    assert check_locks.unmet(ROOT / "envs" / f"{env}-{platform}.in", lock(env, platform)) == []


def test_a_missing_or_out_of_range_requirement_is_reported():
    pins = lock("train", "cpu")
    del pins["transformers"]
    pins["ray"] = "2.59.0"
    assert check_locks.unmet(ROOT / "envs/train-cpu.in", pins) == [
        "transformers==5.9.0 is missing from the lock", "ray==2.60.0 but the lock has ray==2.59.0"]


def test_a_lock_line_without_an_exact_pin_is_refused(tmp_path):
    bad = tmp_path / "x.txt"
    bad.write_text("numpy==2.3.5\ntorch>=2\n")
    with pytest.raises(ValueError, match=r"x.txt:2: 'torch>=2' is not `name==version`"):
        check_locks.read_lock(bad)


def test_gpu_lock_meets_verls_vllm_and_fsdp_extras():
    # the pins come from verl's own metadata (verl-0.9.1.dist-info, extras "vllm" and "fsdp",
    # which pull "flash-attn-cu130torch211" and "cupy-cu130"), not from our copy of them
    wanted = {"vllm", "fsdp", "flash-attn-cu130torch211", "cupy-cu130", "verl-core"}
    gpu = lock("train", "gpu")
    assert gpu["verl"] == metadata.version("verl") == "0.9.1"
    checked = 0
    for line in metadata.requires("verl"):
        req = Requirement(line)
        if req.marker and any(req.marker.evaluate({"extra": e}) for e in wanted) and req.name != "verl":
            name = canonicalize_name(req.name)
            assert name in gpu and req.specifier.contains(gpu[name], prereleases=True), f"{req} vs lock"
            checked += 1
    assert checked > 20
    assert (gpu["torch"], gpu["vllm"], gpu["transformers"], gpu["flash-attn"]) == ("2.11.0", "0.24.0", "5.9.0", "2.8.3")


def test_conda_files_install_exactly_the_gpu_locks_on_the_locked_python():
    lock_sh = (ROOT / "envs/lock.sh").read_text()
    python = re.search(r"^PYTHON_VERSION=(\S+)", lock_sh, re.M).group(1)
    assert pip_section(ROOT / "environment.yml") == ["-r envs/lock/train-gpu-env.txt"]
    assert "pip install --no-build-isolation --no-deps -r envs/lock/train-gpu-built.txt" in (ROOT / "environment.yml").read_text()
    scorer_yml = ROOT / "envs/scorer.yml"
    [ref] = pip_section(scorer_yml)
    assert ref.startswith("-r ") and (scorer_yml.parent / ref[3:].strip()).resolve() == check_locks.lock_path("scorer", "gpu")
    assert conda_python(ROOT / "environment.yml") == conda_python(scorer_yml) == python == "3.11"
    assert f"python{python}" in (ROOT / "Makefile").read_text()


def test_the_two_gpu_install_steps_are_exactly_the_gpu_lock():
    first = check_locks.read_lock(ROOT / "envs/lock/train-gpu-env.txt")
    second = check_locks.read_lock(ROOT / "envs/lock/train-gpu-built.txt")
    assert second == {"flash-attn": "2.8.3"} and not first.keys() & second.keys()
    assert first | second == lock("train", "gpu")


def test_a_hand_edited_split_is_reported(tmp_path, monkeypatch):
    lock_dir = tmp_path / "envs" / "lock"
    lock_dir.mkdir(parents=True)
    for f in (ROOT / "envs").glob("*.in"):
        (tmp_path / "envs" / f.name).write_text(f.read_text())
    for f in (ROOT / "envs/lock").glob("*.txt"):
        (lock_dir / f.name).write_text(f.read_text())
    (lock_dir / "train-gpu-built.txt").write_text("flash-attn==2.8.2\n")
    monkeypatch.setattr(check_locks, "ROOT", tmp_path)
    assert check_locks.check() == ["envs/lock/train-gpu-built.txt is not derived from envs/lock/train-gpu.txt"]


def test_make_setup_installs_exactly_the_cpu_locks():
    makefile = (ROOT / "Makefile").read_text()
    installs = re.findall(r"pip install .*-r (\S+)", makefile)
    assert installs == ["envs/lock/train-cpu.txt", "envs/lock/scorer-cpu.txt"]
    assert not re.search(r"pip install [^\n]*(==|requirements-)", makefile.replace("--upgrade pip", ""))


def test_check_locks_cli_passes_on_the_committed_locks_and_refuses_bad_usage():
    script = ROOT / "envs/check_locks.py"
    ok = subprocess.run([sys.executable, script, "check"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([sys.executable, script, "frobnicate"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("usage:")


def test_shared_constraints_drop_only_the_build_that_differs():
    lines = check_locks.shared_constraints(check_locks.lock_path("train", "gpu")).splitlines()
    names = {canonicalize_name(l.split("==")[0]) for l in lines}
    assert "torch" not in names and {"transformers", "vllm", "numpy"} <= names
    assert len(lines) == len(lock("train", "gpu")) - 1


def test_this_test_env_is_the_cpu_train_lock():
    # the CPU tests must run what GPU nodes run: a stale .venv (e.g. transformers 5.10.4) fails here
    stale = [f"{name}: installed {metadata.version(name)}, lock {version}"
             for name, version in lock("train", "cpu").items() if metadata.version(name) != version]
    assert stale == [], "re-run `make setup`:\n" + "\n".join(stale)
