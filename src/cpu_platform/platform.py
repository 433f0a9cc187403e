"""verl's platform for a CPU-only machine: `PlatformCPU`, registered as "cpu" (VERL_PLATFORM=cpu).

The choices that are not obvious (verl 0.9.1):
- `ray_resource_name()` is "GPU" and Ray is started with fake GPUs (ray_kwargs.ray_init.num_gpus, set by
  conf/accelerator/cpu.yaml): verl/single_controller/ray/base.py, ResourcePoolManager.
  _check_resource_available, counts only "GPU" or "NPU" resources.
- `current_device()` is the string "cpu", not 0: verl passes get_device_id() to FSDP(device_id=...),
  tensor.to(...) and torch.device(...), where an int means "accelerator 0" (torch/distributed/fsdp/
  _init_utils.py: "Cannot access accelerator device when none is available"). torch.cpu.current_device()
  also returns "cpu".
- `is_ipc_supported()` is False: verl's vLLM ServerAdapter then syncs weights through POSIX shared memory
  (verl/workers/rollout/vllm_rollout/vllm_rollout.py, ServerAdapter) instead of CUDA IPC handles.
- `device_module` stands in for torch.cuda: verl calls empty_cache, mem_get_info, max_memory_allocated,
  rng state and streams through get_torch_device(), and torch.cpu has few of them.
"""
from __future__ import annotations

import contextlib
import types
from typing import Any, Optional

import psutil
import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

NAME = "cpu"


def _none(*args, **kwargs) -> None:
    return None


class _Event:
    """torch.cuda.Event's surface: CPU work is synchronous, so every event has happened."""

    def __init__(self, *args, **kwargs):
        pass

    record = synchronize = wait = _none

    def query(self) -> bool:
        return True

    def elapsed_time(self, other) -> float:
        return 0.0


class _Stream:
    """torch.cuda.Stream's surface: one implicit CPU stream."""

    def __init__(self, *args, **kwargs):
        pass

    synchronize = wait_stream = wait_event = _none

    def record_event(self, *args, **kwargs) -> _Event:
        return _Event()


@contextlib.contextmanager
def _stream(*args, **kwargs):
    yield


def _mem_get_info(*args, **kwargs) -> tuple[int, int]:
    memory = psutil.virtual_memory()
    return memory.available, memory.total


def _rss(*args, **kwargs) -> int:
    # verl logs "GPU memory" through these; a CPU run's nearest number is the process's resident memory
    return psutil.Process().memory_info().rss


DEVICE_MODULE = types.SimpleNamespace(
    is_available=lambda: True, is_initialized=lambda: True, device_count=lambda: 1,
    current_device=lambda: NAME, set_device=_none, synchronize=_none, get_device_name=lambda *a, **k: NAME,
    empty_cache=_none, ipc_collect=_none, reset_peak_memory_stats=_none, set_per_process_memory_fraction=_none,
    mem_get_info=_mem_get_info, memory_allocated=_rss, memory_reserved=_rss, max_memory_allocated=_rss,
    max_memory_reserved=_rss,
    manual_seed=torch.manual_seed, manual_seed_all=torch.manual_seed,
    get_rng_state=lambda *a, **k: torch.get_rng_state(), set_rng_state=lambda state, *a, **k: torch.set_rng_state(state),
    current_stream=lambda *a, **k: _Stream(), Stream=_Stream, Event=_Event, stream=_stream,
)


@PlatformRegistry.register(platform=NAME)
class PlatformCPU(PlatformBase):
    """The CPU as verl's one accelerator (module docstring)."""

    @property
    def device_name(self) -> str:
        return NAME

    @property
    def vendor_name(self) -> str:
        return NAME

    @property
    def device_module(self):
        return DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    def current_device(self):
        return NAME

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets it for its (fake) GPU actors; a CPU torch ignores it
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        return {}

    def cudart(self):
        return None
