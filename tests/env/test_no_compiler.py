"""The default GPU install (`make setup PLATFORM=gpu`: envs/lock/train-gpu.txt + scorer-gpu.txt) needs no
compiler: every pin has a wheel for the locks' Python on the GPU nodes' manylinux platform, or an sdist with
no compiled sources (envs/check_wheels.py). flash-attn, an sdist of C++/CUDA, is opt-in only.

These ask the package index (PyPI's JSON simple API), the one network the tests use; they run the checker
in a subprocess because tests/conftest.py refuses network in the test process."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "envs" / "check_wheels.py"


def check(*locks):
    return subprocess.run([sys.executable, CHECK, *map(str, locks)], capture_output=True, text=True, timeout=600)


def test_the_default_gpu_install_set_needs_no_compiler():
    result = check(ROOT / "envs/lock/train-gpu.txt", ROOT / "envs/lock/scorer-gpu.txt")
    assert result.returncode == 0, "the default GPU install would compile:\n" + result.stderr


def test_a_lock_with_flash_attn_is_refused_and_only_for_flash_attn(tmp_path):
    # the opt-in lock's flash-attn pin, next to a wheel (six) and a pure-Python sdist (antlr4, hydra's parser
    # runtime: no wheel on PyPI, builds with no compiler)
    opt_in = (ROOT / "envs/lock/train-gpu-flash-attn.txt").read_text().splitlines()
    [flash_attn] = [line for line in opt_in if line.startswith("flash-attn==")]
    lock = tmp_path / "lock.txt"
    lock.write_text(f"six==1.17.0\nantlr4-python3-runtime==4.9.3\n{flash_attn}\n")
    result = check(lock)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{flash_attn}: no wheel for this platform, its sdist has compiled sources (")
    assert ".cpp" in line or ".cu" in line


def test_wheel_tags_follow_the_gpu_nodes_glibc():
    # llguidance 1.7.x (vllm 0.24.0's range) has x86_64 wheels for glibc >= 2.31 only: on a glibc 2.28 node
    # it would build from Rust, so the GPU platform is manylinux_2_31 (envs/lock.sh GPU_PLATFORM)
    sys.path.insert(0, str(ROOT / "envs"))
    import check_wheels
    assert check_wheels.lock_platform("gpu") == ("x86_64", (2, 31))
    assert check_wheels.lock_platform("cpu") == ("x86_64", (2, 28))
    tags = check_wheels.platform_tags((2, 31))
    assert tags[0] == "manylinux_2_31_x86_64" and {"manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    supported = check_wheels.supported_tags("3.11", (2, 31))
    from packaging.utils import parse_wheel_filename
    ok = ["llguidance-1.7.6-cp39-abi3-manylinux_2_31_x86_64.whl", "six-1.17.0-py2.py3-none-any.whl",
          "torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl"]
    refused = ["x-1-cp39-abi3-manylinux_2_34_x86_64.whl", "x-1-cp312-cp312-manylinux_2_17_x86_64.whl",
               "x-1-cp311-cp311-manylinux_2_17_aarch64.whl", "x-1-cp311-cp311-macosx_11_0_x86_64.whl"]
    assert all(parse_wheel_filename(w)[3] & supported for w in ok)
    assert not any(parse_wheel_filename(w)[3] & supported for w in refused)
