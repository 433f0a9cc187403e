"""One launch at a time builds in one model.build_dir (src/pipeline/tiny_build.py one_builder): the jobs of a sweep
sharing a build dir wait for the first to build it, then reuse it; a killed builder leaves no stale lock; a build
dir nobody can write is one line before anything is built. Real processes and the real flock, no stand-in."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from src.pipeline import tiny_build
from src.pipeline.errors import RunError
from tests.helpers.limited_dirs import read_only_dir

REPO = Path(__file__).resolve().parents[2]


def _holder(build_dir: Path, hold_s: float) -> subprocess.Popen:
    """Another launch's process holding the build dir: prints 'holding' once it has the lock."""
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from src.pipeline import tiny_build
        with tiny_build.one_builder(Path({str(build_dir)!r}), "learn_tiny"):
            print("holding", flush=True)
            time.sleep({hold_s})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def test_a_second_builder_waits_for_the_first_and_says_so(tmp_path, capsys):
    build = tmp_path / "tiny-models"
    holder = _holder(build, hold_s=3)
    t0 = time.monotonic()
    with tiny_build.one_builder(build, "learn_tiny"):
        waited = time.monotonic() - t0
    holder.wait(timeout=30)
    said = capsys.readouterr().out
    assert f"learn_tiny: another launch is building in {build}; waiting for it" in said, said
    # entered once the first builder was done: it held the lock 3 s after saying so
    assert "learn_tiny: waited" in said and waited > 2, (said, waited)


def test_a_killed_builder_leaves_no_lock_behind(tmp_path, capsys):
    build = tmp_path / "tiny-models"
    holder = _holder(build, hold_s=600)
    holder.kill()
    holder.wait(timeout=30)
    t0 = time.monotonic()
    with tiny_build.one_builder(build, "learn_tiny"):
        assert time.monotonic() - t0 < 5
    assert "waiting" not in capsys.readouterr().out


def test_an_unwritable_build_dir_is_one_line(tmp_path):
    with read_only_dir(tmp_path / "ro") as ro:
        with pytest.raises(RunError) as err:
            with tiny_build.one_builder(ro / "tiny-models", "smoke_tiny"):
                pytest.fail("entered a build dir that cannot be created")
    line = str(err.value)
    assert not (ro / "tiny-models").exists() and not tiny_build.lock_file(ro / "tiny-models").exists()
    assert "\n" not in line and line.startswith(f"smoke_tiny: cannot build in model.build_dir={ro / 'tiny-models'}")
    assert "set model.build_dir=" in line, line
