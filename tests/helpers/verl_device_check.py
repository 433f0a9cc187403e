"""verl's own check of a worker's device variables, run on given environments.

Each verl worker runs `Worker._setup_env_cuda_visible_devices` when it starts
(verl/single_controller/base/worker.py): it refuses ROCR_VISIBLE_DEVICES beside CUDA_VISIBLE_DEVICES,
asserts HIP_VISIBLE_DEVICES equals it, and turns the AMD variables into CUDA_VISIBLE_DEVICES. The method
reads only the environment (and Ray's runtime context when a RAY_EXPERIMENTAL_NOSET_* variable is set, which
the environments here leave unset), so it runs as it is, outside a worker, in one subprocess of the train env.
"""
from __future__ import annotations

import json
import subprocess
import sys

_SCRIPT = r"""
import json, os, sys
from verl.single_controller.base.worker import Worker
results = []
for env in json.load(sys.stdin):
    os.environ.clear()
    os.environ.update(env)
    try:
        Worker._setup_env_cuda_visible_devices(None)
    except (ValueError, AssertionError) as exc:
        results.append({"refused": f"{type(exc).__name__}: {exc}"})
    else:
        results.append({"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")})
print(json.dumps(results))
"""


def verl_worker_devices(envs: list[dict]) -> list[dict]:
    """Per environment: {"cuda_visible_devices": what a verl worker then uses} or {"refused": verl's error}."""
    out = subprocess.run([sys.executable, "-c", _SCRIPT], input=json.dumps(envs), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
