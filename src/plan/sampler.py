"""Which top-k/top-p sampler vLLM's rollout uses, and the variable that keeps vLLM off FlashInfer's
when the train env has no flashinfer.

vllm 0.24.0 v1/sample/ops/topk_topp_sampler.py: on CUDA, TopKTopPSampler.__init__ calls
flashinfer_sampler_supported(), which, unless VLLM_USE_FLASHINFER_SAMPLER is 0 (vllm/envs.py: on by
default), imports vllm.v1.attention.backends.flashinfer, whose first lines import `flashinfer`. A GPU
node installed without flashinfer (the default lock has it: 440 MiB of wheels, which a trimmed
offline wheelhouse may leave out) would see every rollout worker die of that ImportError at start.
With the variable at 0 vLLM samples with its PyTorch/Triton sampler (forward_native): the same
distribution, no FlashInfer kernel. The plan sets it itself, in the env of every training process
(src/node/environment.py run_env), so nobody has to know it; a value the user sets under
accelerator.env is kept, and 1 without flashinfer is refused before a real launch.

The probe (`installed_flashinfer`) reads package metadata only; build_plan takes its answer as an
argument (tests pass it) and probes only when none is given.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from .values import PlanError

ENV = "VLLM_USE_FLASHINFER_SAMPLER"


@dataclass(frozen=True)
class SamplerPlan:
    sampler: str        # "flashinfer" | "pytorch"
    env: dict           # what the plan adds to the training env (empty: nothing)
    reason: str


def installed_flashinfer() -> bool:
    """Whether the train env has the `flashinfer` module (flashinfer-python); imports nothing."""
    return importlib.util.find_spec("flashinfer") is not None


def plan_sampler(device: str, accelerator_env: dict, flashinfer: bool, dry_run: bool) -> SamplerPlan:
    """`device`: accelerator.device; `accelerator_env`: accelerator.env; `flashinfer`:
    installed_flashinfer()'s answer."""
    have = "flashinfer is installed in the train env" if flashinfer else "flashinfer is not installed in the train env"
    if device != "cuda":
        return SamplerPlan("pytorch", {}, f"accelerator.device={device}: vLLM's FlashInfer sampler is CUDA only")
    if ENV in accelerator_env:
        on = str(accelerator_env[ENV]).strip() not in ("0", "")
        if on and not flashinfer:
            msg = (f"accelerator.env.{ENV}={accelerator_env[ENV]} asks vLLM for FlashInfer's sampler but {have}: every "
                   f"rollout worker would fail to import it; drop the key (the plan then sets {ENV}=0) or install "
                   f"the GPU lock (make setup PLATFORM=gpu)")
            if not dry_run:
                raise PlanError(msg)
        return SamplerPlan("flashinfer" if on else "pytorch", {},
                           f"pinned by accelerator.env.{ENV}={accelerator_env[ENV]} ({have})")
    if flashinfer:
        return SamplerPlan("flashinfer", {}, f"vLLM's default: {have}")
    return SamplerPlan("pytorch", {ENV: "0"},
                       f"{have}: {ENV}=0 set for the rollout (vLLM would import flashinfer otherwise; "
                       f"src/plan/sampler.py)")
