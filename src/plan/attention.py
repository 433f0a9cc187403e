"""Which attention implementation the actor and reference model load with, and whether verl's
remove-padding path stays on with it.

verl 0.9.1 asks transformers for `flash_attention_2` unless told otherwise
(verl/workers/config/model.py HFModelConfig.__post_init__: `override_config.get("attn_implementation",
"flash_attention_2")` passed to AutoConfig.from_pretrained; verl/workers/engine/fsdp/transformer_impl.py
_build_module loads the model with that config), and transformers then refuses to load the model when
flash-attn is not installed ("FlashAttention2 has been toggled on, but it cannot be used"). The rest of
verl runs without flash-attn: verl/utils/attention_utils.py falls back to torch versions of
index_first_axis/pad_input/unpad_input, verl/utils/torch_functional.py logprobs_from_logits to
log_softmax+gather. So `model.attn_implementation=auto` (the default) takes flash_attention_2 when the
train env has flash-attn and sdpa (PyTorch's scaled_dot_product_attention) otherwise; an explicit value
is kept (flash_attention_2 without flash-attn is refused before a real launch).

use_remove_padding=True with sdpa (checked in the code, and numerically by tests/launcher/test_attention.py):
verl packs a micro batch into one row (transformer_impl.py prepare_model_inputs: input_ids (1, total),
position_ids restarting at 0 for each sequence, attention_mask=None) and calls the model with
use_cache=False (forward_step). For flash_attention_2 verl's monkey patch
(verl/models/transformers/monkey_patch.py apply_monkey_patch) routes this through flash-attn's varlen
kernel; for sdpa and eager it patches nothing, and transformers 5.9 itself keeps the sequences apart:
transformers/masking_utils.py _preprocess_mask_arguments calls find_packed_sequence_indices(position_ids)
whenever attention_mask and past_key_values are None, and create_causal_mask ANDs the causal mask with
that block-diagonal one. So remove padding stays on with sdpa (its cost: a dense total x total boolean
mask per micro batch, and PyTorch's memory-efficient kernel instead of its flash one).
What does need flash-attn: Ulysses sequence parallelism (*.ulysses_sequence_parallel_size > 1): verl's
all-to-all lives only in the patched flash-attention forward (monkey_patch.py
_ulysses_flash_attention_forward), so with sdpa each rank would attend over its own slice only; refused.

The probe (`installed_flash_attn`) is the plan's one look at the environment; build_plan takes its
answer as an argument (tests pass it) and probes only when none is given.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from typing import Optional

from .values import PlanError

AUTO = "auto"
FLASH = "flash_attention_2"
IMPLEMENTATIONS = (AUTO, FLASH, "sdpa", "eager")
# where verl reads them (verl/workers/config/model.py HFModelConfig; the ref model shares the actor's)
VERL_ATTN_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
VERL_REMOVE_PADDING_KEY = "actor_rollout_ref.model.use_remove_padding"
# transformers/utils/import_utils.py is_flash_attn_2_available: older flash-attn is not used
FLASH_ATTN_MIN = (2, 3, 3)
SETUP_HINT = "make setup PLATFORM=gpu FLASH_ATTN=1"


@dataclass(frozen=True)
class AttentionPlan:
    implementation: str
    reason: str
    remove_padding: bool
    remove_padding_reason: str


def installed_flash_attn() -> Optional[str]:
    """flash-attn's version when this (the train) env can use it, as transformers decides
    (is_flash_attn_2_available: the `flash_attn` module from the `flash-attn` distribution, >= 2.3.3;
    the CUDA check is left to the GPU node), else None. Reads package metadata; imports nothing."""
    if importlib.util.find_spec("flash_attn") is None:
        return None
    try:
        version = importlib.metadata.version("flash-attn")
    except importlib.metadata.PackageNotFoundError:
        return None
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return version if tuple(parts) >= FLASH_ATTN_MIN else None


def _ulysses(passthrough: dict) -> list[str]:
    return [k for k, v in passthrough.items()
            if k.startswith("actor_rollout_ref.") and k.endswith("ulysses_sequence_parallel_size")
            and isinstance(v, int) and v > 1]


def plan_attention(model: dict, passthrough: dict, flash_attn: Optional[str], dry_run: bool) -> AttentionPlan:
    """`model`: the composed model group; `passthrough`: the user's verl.* keys (a pin of either
    verl key wins and is shown as such); `flash_attn`: installed_flash_attn()'s answer."""
    requested = model.get("attn_implementation", AUTO)  # absent in snapshots older than the key
    have = f"flash-attn {flash_attn} is installed in the train env" if flash_attn else \
        "flash-attn is not installed in the train env"
    if VERL_ATTN_KEY in passthrough:
        impl, reason = str(passthrough[VERL_ATTN_KEY]), f"pinned by verl.{VERL_ATTN_KEY} ({have})"
    elif requested == AUTO:
        impl = FLASH if flash_attn else "sdpa"
        reason = (f"model.attn_implementation=auto: {have}" +
                  ("" if flash_attn else f" (verl's default flash_attention_2 would not load; {SETUP_HINT} "
                                         f"builds it)"))
    else:
        impl, reason = requested, f"model.attn_implementation={requested} ({have})"
    if impl == FLASH and not flash_attn:
        msg = (f"attention {FLASH} needs flash-attn in the train env and it is not installed: transformers would "
               f"refuse to load the model on the GPU node; install it ({SETUP_HINT}) or use "
               f"model.attn_implementation=auto (sdpa here)")
        if not dry_run:
            raise PlanError(msg)
        reason += "; a real launch from this env is refused"
    ulysses = _ulysses(passthrough)
    if ulysses and impl != FLASH:
        raise PlanError(f"verl.{ulysses[0]} > 1 (Ulysses sequence parallelism) needs {FLASH}: verl's all-to-all "
                        f"is in its patched flash-attention forward only (models/transformers/monkey_patch.py), "
                        f"with {impl} each rank would attend over its own slice; install flash-attn ({SETUP_HINT}) "
                        f"or drop the key")
    if VERL_REMOVE_PADDING_KEY in passthrough:
        rp = bool(passthrough[VERL_REMOVE_PADDING_KEY])
        rp_reason = f"pinned by verl.{VERL_REMOVE_PADDING_KEY}"
    elif impl == FLASH:
        rp, rp_reason = True, "packed sequences through flash-attn's varlen kernel (verl's monkey patch)"
    else:
        rp, rp_reason = True, (f"packed sequences stay apart with {impl}: transformers masks them by their "
                               f"position ids (masking_utils find_packed_sequence_indices); src/plan/attention.py")
    return AttentionPlan(impl, reason, rp, rp_reason)
