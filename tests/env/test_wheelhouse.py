"""`make wheelhouse` then `make setup WHEELHOUSE=DIR` on a machine with no network: the two-machine offline
install (docs/environments.md), on two small locks of our own instead of the real ones (gigabytes).

The wheelhouse is downloaded from PyPI (the one network tests use), through the Makefile target and the script
it runs (envs/wheelhouse.py). The install then runs in a network namespace with no interface up (`unshare -n`),
with empty uv and tool caches, so uv itself comes from the wheelhouse (envs/uv.sh) and nothing from a cache."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# a wheel with a C extension (markupsafe: the platform tags matter), pure wheels, and a pure-Python sdist
# with no wheel on PyPI (antlr4, hydra's parser runtime: built into a wheel on the online side); six at two
# versions, as numpy differs between the real train and scorer locks
TRAIN_LOCK = "six==1.17.0\nmarkupsafe==3.0.2\n"
SCORER_LOCK = "six==1.16.0\nantlr4-python3-runtime==4.9.3\n"
# the CPU loop env (PLATFORM=cpu only): one more small pin of its own
LOOP_LOCK = "six==1.17.0\nidna==3.10\n"
PROBE = "import socket; socket.create_connection(('pypi.org', 443), timeout=10)"


def offline_prefix() -> list[str]:
    """A command prefix that runs its command with no network: a new network namespace (as root, or in a
    new user namespace otherwise)."""
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        if shutil.which("unshare") and subprocess.run([*prefix, "true"], capture_output=True).returncode == 0:
            return prefix
    pytest.fail("cannot refuse the network here: `unshare -n` needs root or user namespaces")


def site_packages(venv: Path) -> set[str]:
    [site] = venv.glob("lib/python3.*/site-packages")
    return {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}


def test_a_wheelhouse_installs_both_envs_with_the_network_refused(tmp_path):
    (tmp_path / "train.txt").write_text(TRAIN_LOCK)
    (tmp_path / "scorer.txt").write_text(SCORER_LOCK)
    (tmp_path / "loop.txt").write_text(LOOP_LOCK)
    locks = [f"TRAIN_LOCK={tmp_path / 'train.txt'}", f"SCORER_LOCK={tmp_path / 'scorer.txt'}",
             f"LOOP_LOCK={tmp_path / 'loop.txt'}"]
    house = tmp_path / "wheelhouse"

    online = subprocess.run(["make", "-s", "wheelhouse", "PLATFORM=cpu", f"WHEELHOUSE={house}", *locks],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert online.returncode == 0, online.stdout[-3000:] + online.stderr[-3000:]
    wheels = sorted(p.name for p in house.iterdir())
    # six twice, markupsafe, antlr4, idna, uv
    assert all(w.endswith(".whl") for w in wheels) and len(wheels) == 6, wheels
    assert any(w.startswith("antlr4_python3_runtime-4.9.3-py3-none-any") for w in wheels)
    assert any(w.startswith("uv-") for w in wheels)

    offline = offline_prefix()
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    refused = subprocess.run([*offline, "python3.11", "-c", PROBE], capture_output=True, text=True, env=env)
    assert refused.returncode != 0 and ("socket.gaierror" in refused.stderr or "OSError" in refused.stderr), refused

    train, scorer, loop = tmp_path / "train-env", tmp_path / "scorer-env", tmp_path / "loop-env"
    setup = subprocess.run([*offline, "make", "setup", "PLATFORM=cpu", f"WHEELHOUSE={house}", f"VENV={train}",
                            f"SCORER_VENV={scorer}", f"LOOP_VENV={loop}", *locks], cwd=ROOT, capture_output=True,
                           text=True, env=env, timeout=300)
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    assert f"--no-index --find-links {house}" in setup.stdout
    assert (tmp_path / "xdg").is_dir() or shutil.which("uv")  # uv came from the wheelhouse unless on PATH

    assert site_packages(train) == {"six", "markupsafe"}
    assert site_packages(scorer) == {"six", "antlr4_python3_runtime"}
    assert site_packages(loop) == {"six", "idna"}
    imports = "import six, markupsafe; assert six.__version__ == '1.17.0'; print(markupsafe.escape('<'))"
    assert subprocess.run([train / "bin/python", "-c", imports], capture_output=True, text=True).stdout == "&lt;\n"
    imports = "import six, antlr4; assert six.__version__ == '1.16.0'; print(antlr4.__name__)"
    assert subprocess.run([scorer / "bin/python", "-c", imports], capture_output=True, text=True).stdout == "antlr4\n"


def test_an_opt_in_locks_own_pins_go_in_as_sdists_for_the_node_to_build(tmp_path):
    # as flash-attn for `make wheelhouse PLATFORM=gpu FLASH_ATTN=1`: its sdist compiles on the GPU node
    # against that node's torch; idna stands in (a small sdist), six is in the base lock and stays a wheel
    (tmp_path / "base.txt").write_text("six==1.17.0\n")
    (tmp_path / "opt-in.txt").write_text("six==1.17.0\nidna==3.10\n")
    house = tmp_path / "wheelhouse"
    result = subprocess.run(["python3.11", ROOT / "envs/wheelhouse.py", "--platform", "gpu", "--dest", house,
                             "--sdists-of", tmp_path / "opt-in.txt", tmp_path / "base.txt"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    files = sorted(p.name for p in house.iterdir())
    assert files[:2] == ["idna-3.10.tar.gz", "six-1.17.0-py2.py3-none-any.whl"] and files[2].startswith("uv-")
    assert result.stdout.rstrip().endswith("to build on the node: idna-3.10.tar.gz")
