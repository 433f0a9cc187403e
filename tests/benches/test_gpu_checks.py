"""The GPU checks of issue 37 on this CPU machine, up to their first GPU call (benches/gpu/check.py), and
the overlays they carry (benches/gpu/overlays.py), so that a lent GPU's 15 minutes go to the checks.

Each check runs here as on the node: the carried chunks are checked against the manifest, unpacked with
the node's `cat | xz -d | tar -x`, wrapped into the overlay's python and probed; the check's own commands
then run in their plan-only mode (the launcher's dry_run=true, benches/scorer.py --dry-run). The overlays
here are small folders packed by the same `overlays.py pack` the real build uses (the real ones are built
from PyPI, about 250 MiB: benches/gpu/README.md); their pythons are this machine's envs.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "benches" / "gpu" / "check.py"
OVERLAYS = ROOT / "benches" / "gpu" / "overlays.py"
BASE = {"train": sys.executable, "scorer": str(ROOT / ".venv-scorer" / "bin" / "python")}
# one call to the GPU node: at most 64 MiB with the working tree, 8 extra paths, a 2000-character command
CALL_BYTES, CALL_PATHS, COMMAND_CHARS = 64 << 20, 8, 2000


def run(script: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, **kwargs)


def pack_overlay(gpu_dir: Path, name: str, site: Path, probe: list[str], chunk_bytes: int = 4096) -> None:
    done = run(OVERLAYS, "pack", name, str(site), "--gpu-dir", str(gpu_dir), "--chunk-bytes", str(chunk_bytes),
               "--probe", *probe)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def carried(tmp_path):
    """A .gpu dir as the calls to the node leave it: every overlay's chunks and the manifest. Each overlay is a
    module to probe and 20 kB of random bytes, so its stream spans several chunks."""
    gpu_dir = tmp_path / "gpu"
    for name in ("train", "scorer", "scorer-ja"):
        site = tmp_path / "site" / name
        module = "probe_" + name.replace("-", "_")
        (site / module).mkdir(parents=True)
        (site / module / "__init__.py").write_text(f"WHICH = {name!r}\n")
        (site / "payload.bin").write_bytes(os.urandom(20_000))
        pack_overlay(gpu_dir, name, site, [module])
    return gpu_dir


def check(gpu_dir: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    pythons = [a for name, py in BASE.items() for a in ("--base-python", f"{name}={py}")]
    return run(CHECK, *args, "--gpu-dir", str(gpu_dir), "--out", str(out), *pythons)


@pytest.mark.parametrize("name, plan_line", [
    ("smoke", "dry run: nothing started"),
    ("learn", "dry run: nothing started"),
    ("scorer", "dry run: cometkiwi-xl (real shape of cometkiwi_xl, random weights) on cuda in bf16"),
])
def test_each_check_runs_here_up_to_its_first_gpu_call(carried, tmp_path, name, plan_line):
    out = tmp_path / "out"
    done = check(carried, out, "run", name, "--dry-run", "--override", f"paths.output_dir={tmp_path}/outputs",
                 "--override", f"paths.results_root={tmp_path}/results")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert plan_line in done.stdout, done.stdout[-3000:]
    timings = json.loads((out / "timings.json").read_text())
    overlays = {"smoke": ("train", "scorer"), "learn": ("train",), "scorer": ("scorer", "scorer-ja")}[name]
    assert set(timings) == {f"{part}_{o}" for o in overlays for part in ("unpack", "probe")} | {"dry_run"}, timings
    for overlay in overlays:
        # the unpacked folder is the packed one, byte for byte
        site = carried / "site" / overlay
        assert (site / "payload.bin").read_bytes() == (tmp_path / "site" / overlay / "payload.bin").read_bytes()
    if name == "smoke":
        # the launch was planned with the scorer overlay's python, and nothing ran on a GPU
        assert f"scorer.python={carried}/bin/scorer-python" in done.stdout
        assert not (out / "node.txt").exists() and not (out / "gpu_memory.csv").exists()
    # what a call brings back: at most 8 files, plain names
    assert len(list(out.iterdir())) <= 8 and all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in out.iterdir())


def test_each_overlays_python_sees_its_own_folder_and_not_the_others(carried, tmp_path):
    done = check(carried, tmp_path / "out", "run", "smoke", "--dry-run", "--override", "gpus=0")
    # gpus=0 is refused by the launcher after the wrappers are written: only the wrappers matter here
    assert done.returncode == 2 and "dry run of" in done.stderr, done.stderr
    train, scorer = carried / "bin" / "train-python", carried / "bin" / "scorer-python"
    # the launcher starts the scorer from the train env: the scorer's python must drop the train folder
    # (the smoke's scorer python has the scorer overlay alone: its CometKiwi needs no Japanese segmenter)
    code = ("import os,subprocess,sys; print(os.environ['PYTHONPATH']); "
            f"print(subprocess.run([{str(scorer)!r}, '-c', 'import os; print(os.environ[\"PYTHONPATH\"]); "
            "import probe_scorer; print(probe_scorer.WHICH)'], capture_output=True, text=True).stdout)")
    seen = subprocess.run([str(train), "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": "/kept/by/both"}).stdout.split()
    assert seen == [f"{carried}/site/train:/kept/by/both", f"{carried}/site/scorer:/kept/by/both", "scorer"], seen


def test_a_missing_or_damaged_chunk_stops_the_check_with_one_line(carried, tmp_path):
    chunks = sorted((carried / "parts").glob("train.tar.xz.*"))
    data = bytearray(chunks[1].read_bytes())
    data[100] ^= 0xFF
    chunks[1].write_bytes(bytes(data))
    done = check(carried, tmp_path / "out", "receive")
    assert done.returncode == 2 and f"corrupt: {chunks[1].name}" in done.stdout, done.stdout + done.stderr
    assert done.stderr.strip() == f"error: corrupt chunks {chunks[1].name}: send them again"
    chunks[2].unlink()
    done = check(carried, tmp_path / "out", "run", "learn", "--dry-run")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: overlay train lacks chunks {chunks[2].name} {chunks[1].name}: send them"), \
        done.stderr
    assert not (carried / "site" / "train").exists()


def test_an_import_the_overlay_cannot_serve_fails_before_any_gpu_work(carried, tmp_path):
    manifest = json.loads((carried / "manifest.json").read_text())
    manifest["overlays"]["train"]["probe"].append("left_out_package")
    (carried / "manifest.json").write_text(json.dumps(manifest))
    done = check(carried, tmp_path / "out", "run", "learn", "--dry-run")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().endswith("cannot import probe_train left_out_package: ModuleNotFoundError: "
                                        "No module named 'left_out_package'"), done.stderr
    # it stopped at the probe: the check's commands never ran; what it measured comes back all the same
    assert "[check] dry run" not in done.stdout
    assert set(json.loads((tmp_path / "out" / "timings.json").read_text())) == {"unpack_train", "probe_train"}


def test_waiting_for_a_check_that_never_started_says_how_to_start_it(carried, tmp_path):
    done = check(carried, tmp_path / "out", "wait", "smoke")
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: check smoke was not started on this node: `python3 benches/gpu/check.py "
                                   "run smoke` starts it (a fresh node has lost everything)")


@pytest.mark.parametrize("name", ["smoke", "learn", "scorer"])
def test_the_calls_send_every_chunk_once_within_the_limits(tmp_path, name):
    # chunk sizes of a real build (benches/gpu/README.md): full 14 MiB chunks and a short last one
    manifest = {"overlays": {
        "train": {"chunks": [{"file": f"train.tar.xz.{i:02d}", "bytes": (14 << 20) if i < 12 else 5 << 20,
                              "sha256": "0" * 64} for i in range(13)], "probe": ["vllm"]},
        "scorer": {"chunks": [{"file": f"scorer.tar.xz.{i:02d}", "bytes": (14 << 20) if i < 3 else 9 << 20,
                               "sha256": "0" * 64} for i in range(4)], "probe": ["comet"]},
        "scorer-ja": {"chunks": [{"file": f"scorer-ja.tar.xz.{i:02d}", "bytes": (14 << 20) if i < 1 else 12 << 20,
                                  "sha256": "0" * 64} for i in range(2)], "probe": ["fugashi"]}}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    done = run(OVERLAYS, "calls", name, "--gpu-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in done.stdout.splitlines()]
    needed = {"smoke": ("train", "scorer"), "learn": ("train",), "scorer": ("scorer", "scorer-ja")}[name]
    want = [f".gpu/parts/{c['file']}" for o in needed for c in manifest["overlays"][o]["chunks"]]
    assert [p for c in calls for p in c["send"] if "parts" in p] == want
    for call in calls:
        assert call["send"][0] == ".gpu/manifest.json" and len(call["send"]) <= CALL_PATHS
        assert call["mib"] * 2 ** 20 <= CALL_BYTES and len(call["command"]) <= COMMAND_CHARS
    assert [c["command"] for c in calls] == ["python3 benches/gpu/check.py receive"] * (len(calls) - 1) + [
        f"python3 benches/gpu/check.py run {name}"]
    # as few calls as the bytes allow
    total = sum(c["bytes"] for o in needed for c in manifest["overlays"][o]["chunks"])
    assert len(calls) <= total // (CALL_BYTES - (8 << 20)) + 1


def test_every_pin_left_behind_has_its_reason_and_what_the_node_cannot_do_without_travels():
    done = run(OVERLAYS, "list")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    carried = {name: set() for name in ("train", "scorer", "scorer-ja")}
    current = None
    for line in text.splitlines():
        if line.startswith("overlay "):
            current = line.split()[1]
        elif line.startswith("  carried: "):
            carried[current] = {pin.split("==")[0] for pin in line.split(": ", 1)[1].split()}
        elif line.startswith("  left out "):
            assert len(line.split(": ", 1)[1]) > 10, line
    assert not carried["scorer"] & carried["scorer-ja"]
    carried["scorer"] |= carried.pop("scorer-ja")  # one env on the node
    # tests/env/test_gpu_lock.py says why each was seen missing on a node
    assert {"vllm", "verl", "ray", "transformers", "llguidance", "xgrammar", "apache-tvm-ffi",
            "hydra-core", "sacrebleu", "fasttext-numpy2"} <= carried["train"]
    assert {"unbabel-comet", "transformers", "fugashi", "unidic-lite", "jieba", "sacrebleu"} <= carried["scorer"]
    assert not {"torch", "numpy", "flashinfer-python", "wandb"} & carried["train"]


def started_check(gpu_dir: Path, name: str, exit_code: int | None, outputs: Path) -> tuple[subprocess.Popen, ...]:
    """The state `check.py run` leaves for `wait` on the node: the check's process (here a sleep that stands
    for the launch, in its own session as there) and the memory sampler's, and the exit file when it ended."""
    state = gpu_dir / "run" / name
    state.mkdir(parents=True)
    check_proc = subprocess.Popen(["sleep", "60" if exit_code is None else "0"], start_new_session=True)
    sampler = subprocess.Popen(["sleep", "60"], start_new_session=True)
    (state / "state.json").write_text(json.dumps({"pid": check_proc.pid, "sampler": sampler.pid,
                                                  "started": 0, "script": "launch"}))
    (state / "timings.json").write_text(json.dumps({"unpack_train": 1.5}))
    (state / f"{name}.log").write_text("the launch's output\n")
    if exit_code is not None:
        check_proc.wait()
        (state / "exit").write_text(f"{exit_code}\n")
    # what the launch leaves: the verdict in its run dir, whose plan names the checkpoint dir with verl's metrics
    run_dir, ckpt = outputs / "runs" / "r1", outputs / "ckpt"
    (run_dir / "snapshot").mkdir(parents=True)
    (run_dir / "snapshot" / "plan.json").write_text(json.dumps({"checkpoint_dir": str(ckpt)}))
    (run_dir / f"{name}_verdict.txt").write_text("=== qe-rl smoke verdict: PASS ===\n")
    (ckpt / "metrics").mkdir(parents=True)
    (ckpt / "metrics" / "a.jsonl").write_text(json.dumps({"step": 1, "data": {"x": 1.0}}) + "\n")
    (ckpt / "metrics" / "b.jsonl").write_text(json.dumps({"step": 2, "data": {"x": 2.0}}) + "\n")
    return check_proc, sampler


@pytest.mark.parametrize("exit_code, rc", [(0, 0), (1, 1)])
def test_the_next_call_collects_a_check_that_ended(tmp_path, exit_code, rc):
    gpu_dir, out, outputs = tmp_path / "gpu", tmp_path / "out", tmp_path / "outputs"
    _, sampler = started_check(gpu_dir, "smoke", exit_code, outputs)
    done = check(gpu_dir, out, "wait", "smoke", "--override", f"paths.output_dir={outputs}")
    assert done.returncode == rc, done.stdout + done.stderr
    assert sampler.wait(timeout=10) is not None  # the memory sampler is stopped with the check
    timings = json.loads((out / "timings.json").read_text())
    assert timings["unpack_train"] == 1.5 and timings["exit"] == exit_code and timings["check"] > 0
    assert (out / "smoke_verdict.txt").read_text().startswith("=== qe-rl smoke verdict: PASS")
    rows = [json.loads(line) for line in (out / "smoke_metrics.jsonl").read_text().splitlines()]
    assert rows == [{"file": "a.jsonl", "step": 1, "data": {"x": 1.0}},
                    {"file": "b.jsonl", "step": 2, "data": {"x": 2.0}}]
    assert (out / "smoke.log").read_text() == "the launch's output\n"


def test_a_check_still_running_at_the_calls_end_is_left_running_for_the_next_call(tmp_path):
    gpu_dir, out, outputs = tmp_path / "gpu", tmp_path / "out", tmp_path / "outputs"
    check_proc, sampler = started_check(gpu_dir, "learn", None, outputs)
    try:
        done = check(gpu_dir, out, "wait", "learn", "--wait-s", "1")
        assert done.returncode == 3, done.stdout + done.stderr
        assert "next call at once: python3 benches/gpu/check.py wait learn" in done.stdout
        assert check_proc.poll() is None and sampler.poll() is None  # both go on
        assert (out / "learn.log").is_file()  # what it printed so far comes back already
    finally:
        for proc in (check_proc, sampler):
            proc.kill()
            proc.wait()


def test_the_build_names_each_package_the_checks_import_at_start_that_nothing_holds(tmp_path):
    """benches/gpu/imports.py, which `overlays.py build` runs on every overlay before packing it."""
    site = tmp_path / "site"
    files = {
        "app/__init__.py": "import os\nimport numpy\nfrom .engine import run\nfrom . import models\n",
        "app/engine.py": ("import dep.sub\ntry:\n    import optional\nexcept ImportError:\n    optional = None\n"
                          "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import typing_only\n"
                          "def run():\n    import lazy\nclass Model:\n    import in_class_body\n"),
        "app/models/__init__.py": "from ..engine import run\nfrom .qwen import Qwen\n",
        "app/models/qwen.py": "from kernels import attention\n",
        "kernels/__init__.py": "import cutlass\n",
        "app/unused.py": "import never_imported\n",
    }
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    done = run(ROOT / "benches" / "gpu" / "imports.py", "app", "--folder", str(site), "--provided", "numpy")
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)
    # os: the standard library; numpy: the node's; optional, typing_only, lazy, never_imported: not run at import
    assert found["missing"] == {
        "dep": ["app", "app.engine", "dep.sub"],
        "in_class_body": ["app", "app.engine", "in_class_body"],
        "cutlass": ["app", "app.models", "app.models.qwen", "kernels", "cutlass"],
    }, found
    assert found["modules"] == 5 and found["unparsed"] == []


def test_planning_calls_before_a_build_or_naming_no_overlay_is_refused_in_one_line(tmp_path):
    done = run(OVERLAYS, "calls", "smoke", "--gpu-dir", str(tmp_path))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (f"error: overlay train (needed by check smoke) is not in {tmp_path}/manifest.json: "
                           "run `python benches/gpu/overlays.py build train`\n"), done.stderr
    done = run(OVERLAYS, "list", "trian")
    assert done.returncode == 2
    assert done.stderr == "error: no overlay trian; the overlays are train, scorer, scorer-ja\n", done.stderr


def test_the_check_brings_back_the_launch_start_up_phases_under_the_name_the_launcher_writes():
    """benches/gpu/check.py runs on the node's python without the project's imports, so it names the file
    src/node/startup.py writes by itself: the two names stay one."""
    import importlib.util

    from src.node import startup

    spec = importlib.util.spec_from_file_location("gpu_check", Path(__file__).resolve().parents[2] / "benches" / "gpu"
                                                  / "check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    assert check.STARTUP_TIMINGS == startup.TIMINGS
