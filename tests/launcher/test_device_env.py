"""The device variables a scheduler exports, made what verl's workers accept, with the GPUs Slurm gave kept.

Slurm 22.05 exports CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK and GPU_DEVICE_ORDINAL with
the same indices when gres.conf names GPUs without a vendor flag (the dev cluster does; tests/slurm checks
what a real job's training processes got); verl's Worker refused that set, so every real training job on
such a cluster died at the workers' start. Each variable set below goes through the launcher's
`device_environ` and then through verl's own check.
"""
from __future__ import annotations

import pytest

from src.node.environment import device_environ
from src.node.preflight import visible_gpus
from tests.helpers.verl_device_check import verl_worker_devices

BASE = {"PATH": "/usr/bin:/bin"}
# (name, what the scheduler exported, the GPUs verl's workers must then use; None: CUDA's own enumeration)
CASES = [
    ("slurm without a vendor flag", {"CUDA_VISIBLE_DEVICES": "0,1", "ROCR_VISIBLE_DEVICES": "0,1",
                                     "ZE_AFFINITY_MASK": "0,1", "GPU_DEVICE_ORDINAL": "0,1",
                                     "SLURM_JOB_GPUS": "0,1"}, "0,1"),
    ("slurm with the nvidia flag", {"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_JOB_GPUS": "2,3"}, "2,3"),
    ("ROCR alone", {"ROCR_VISIBLE_DEVICES": "1,2"}, "1,2"),
    ("HIP equal to CUDA", {"CUDA_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0"}, "0"),
    ("HIP alone", {"HIP_VISIBLE_DEVICES": "3"}, "3"),
    ("GPU_DEVICE_ORDINAL alone", {"GPU_DEVICE_ORDINAL": "0,1,2"}, "0,1,2"),
    # global indices: under Slurm's device cgroup the job sees its GPUs as 0..n-1, so nothing is set from them
    ("SLURM_JOB_GPUS alone", {"SLURM_JOB_GPUS": "4,5"}, None),
    # on an NVIDIA node ROCR selects nothing: CUDA's value is the job's
    ("CUDA and ROCR differ", {"CUDA_VISIBLE_DEVICES": "0,1", "ROCR_VISIBLE_DEVICES": "2,3"}, "0,1"),
    ("nothing set", {}, None),
]


@pytest.fixture(scope="module")
def verl_results() -> dict:
    """verl's check on each case as exported (raw) and as the launcher hands it on (made), one subprocess."""
    raw = [{**BASE, **exported} for _, exported, _ in CASES]
    made = [device_environ("cuda", env)[0] for env in raw]
    results = verl_worker_devices(raw + made)
    return {"raw": results[:len(CASES)], "made": results[len(CASES):]}


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c[0] for c in CASES])
def test_verl_accepts_the_environment_with_the_gpus_slurm_gave(index, verl_results):
    name, exported, expected = CASES[index]
    assert verl_results["made"][index] == {"cuda_visible_devices": expected}, (name, verl_results["made"][index])
    env, _ = device_environ("cuda", {**BASE, **exported})
    # what the launcher's own preflight counts is what the workers then see
    if expected is not None:
        assert visible_gpus(env) == len(expected.split(","))
    assert "ROCR_VISIBLE_DEVICES" not in env and "HIP_VISIBLE_DEVICES" not in env
    # the variables nobody refuses stay as Slurm set them
    for key in ("ZE_AFFINITY_MASK", "GPU_DEVICE_ORDINAL", "SLURM_JOB_GPUS"):
        assert env.get(key) == exported.get(key)


def test_verl_refuses_what_slurm_exports_as_it_is():
    """The control: without the launcher's step, verl's own check refuses Slurm's variable set."""
    # (the module fixture ran it; read it through a fresh call so this test stands alone)
    (raw,) = verl_worker_devices([{**BASE, **CASES[0][1]}])
    assert raw == {"refused": "ValueError: Please don't set ROCR_VISIBLE_DEVICES when HIP/CUDA_VISIBLE_DEVICES "
                              "is set."}, raw


def test_each_change_is_noted_and_an_unchanged_environment_gets_no_note():
    _, notes = device_environ("cuda", {**BASE, **CASES[0][1]})
    assert notes == ["ROCR_VISIBLE_DEVICES=0,1 left out of the training processes' environment (verl's workers "
                     "refuse them beside CUDA_VISIBLE_DEVICES; on this accelerator they select nothing)"]
    _, notes = device_environ("cuda", {**BASE, "GPU_DEVICE_ORDINAL": "0,1"})
    assert notes == ["CUDA_VISIBLE_DEVICES unset: set to GPU_DEVICE_ORDINAL=0,1, the GPUs this job was given"]
    assert device_environ("cuda", {**BASE, "CUDA_VISIBLE_DEVICES": "0"}) == ({**BASE, "CUDA_VISIBLE_DEVICES": "0"}, [])


def test_the_cpu_loop_names_its_fake_gpus_the_same_way_and_npu_is_left_alone():
    exported = {**BASE, **CASES[0][1]}
    assert device_environ("cpu", exported) == device_environ("cuda", exported)
    assert device_environ("npu", exported) == (exported, [])
