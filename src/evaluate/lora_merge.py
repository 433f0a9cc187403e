"""A LoRA run's checkpoint as one HF model: the adapter merged into the base weights.

verl 0.9.1's FSDP merger (verl/model_merger/base_model_merger.py save_lora_adapter) writes a LoRA checkpoint as the
frozen base model plus `lora_adapter/` (peft's adapter_model.safetensors and adapter_config.json) beside it; vLLM
loading that dir would generate with the base alone and the evaluation would score the untrained model. Here peft
folds the adapter into the weights (PeftModel.merge_and_unload: W + alpha / r x B A, what the actor computed) and
the merged model replaces the dir's weights; `lora_adapter/` goes. Run as `python -m src.evaluate.lora_merge DIR`
(src/evaluate/checkpoint.py, in a subprocess like verl's merger: the model's memory is given back before vLLM
starts).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

ADAPTER_DIR = "lora_adapter"


def merge_adapter(model_dir: Path) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    dtype = base.config.torch_dtype if isinstance(base.config.torch_dtype, torch.dtype) else torch.float32
    merged = PeftModel.from_pretrained(base, model_dir / ADAPTER_DIR).merge_and_unload()
    for name in ("model.safetensors", "model.safetensors.index.json"):
        (model_dir / name).unlink(missing_ok=True)
    for shard in model_dir.glob("model-*.safetensors"):
        shard.unlink()
    merged.to(dtype).save_pretrained(model_dir)
    shutil.rmtree(model_dir / ADAPTER_DIR)


if __name__ == "__main__":
    merge_adapter(Path(sys.argv[1]))
