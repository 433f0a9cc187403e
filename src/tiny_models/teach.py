"""Teach a tiny policy the synthetic task (task.py) offline, so that RL has a policy worth improving (train env).

A random-weight policy never writes `<translate>`: every answer gets the format floor, GRPO's advantage
is 0 and nothing can be learnt or shown to be learnt. A short supervised pass on the teaching prompts
(prepared by src.data.prepare with the run's template and tokenizer: verl's parquet rows) brings it to
partial competence: the format nearly always, the words often (greedy BLEU ~60 on held-out sentences),
so samples at temperature 1 differ in quality and a reference-based reward ranks them.

The prompt is framed exactly as verl's RLHFDataset frames it (the tokenizer's chat template with the
generation prompt, verl/utils/dataset/rl_dataset.py RLHFDataset.__getitem__), and the target is the
answer format the reward checks, `<translate>reference</translate>` then `<|im_end|>` (the stop token).
The loss is on the answer tokens only. Weights are saved in bf16 like the base policy.
"""
from __future__ import annotations

import hashlib
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from .atomic import ensure, read_marker
from .tokenizer import IM_END


@dataclass(frozen=True)
class TeachSpec:
    steps: int = 80
    lr: float = 1e-3
    batch: int = 32
    seed: int = 0


def builder_hash() -> str:
    return hashlib.sha256((Path(__file__).parent / "teach.py").read_bytes()).hexdigest()[:16]


def build_key(base: Path, data: Path, spec: TeachSpec) -> dict:
    return {"builder": "teach", "hash": builder_hash(), "spec": asdict(spec), "base": read_marker(base),
            "data": hashlib.sha256(data.read_bytes()).hexdigest()[:16]}


def examples(data: Path) -> list[tuple[list, str]]:
    """(chat messages, reference) of each row of a prepared parquet (src/data/rows.py make_row)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(str(data), columns=["prompt", "reward_model"]).to_pylist()
    if not rows:
        raise ValueError(f"{data} holds no rows to teach from")
    return [(r["prompt"], r["reward_model"]["ground_truth"]) for r in rows]


def build(out: Path, base: Path, data: Path, spec: TeachSpec) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(spec.seed)
    tok = AutoTokenizer.from_pretrained(str(base), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(base), local_files_only=True, dtype=torch.float32)
    encoded = []
    for messages, reference in examples(data):
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        p = tok(prompt, add_special_tokens=False).input_ids
        a = tok(f"<translate>{reference}</translate>{IM_END}", add_special_tokens=False).input_ids
        encoded.append((p, a))
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr)
    rng = random.Random(spec.seed)
    model.train()
    for _ in range(spec.steps):
        batch = rng.sample(encoded, min(spec.batch, len(encoded)))
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((len(batch), width), tok.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (p, a) in enumerate(batch):
            ids[i, :len(p) + len(a)] = torch.tensor(p + a)
            labels[i, len(p):len(p) + len(a)] = torch.tensor(a)  # the answer only, not the prompt
            mask[i, :len(p) + len(a)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.to(torch.bfloat16).save_pretrained(str(out))
    # the base's tokenizer files and chat template, unchanged
    for f in base.iterdir():
        if f.is_file() and f.name.startswith(("tokenizer", "chat_template", "special_tokens")):
            shutil.copy2(f, out / f.name)
    (out / "teach_loss.txt").write_text(f"{loss.item():.4f}\n", encoding="utf-8")


def ensure_taught(out: Path, base: Path, data: Path, spec: TeachSpec = TeachSpec()) -> str:
    """'reused' when `out` holds this base taught on this data with this spec, else 'built'."""
    base, data = Path(base), Path(data)
    if read_marker(base) is None:
        raise ValueError(f"{base} is not a complete tiny policy build (python -m src.tiny_models policy {base})")
    if not data.is_file():
        raise ValueError(f"{data} is missing (prepare it with python -m src.data.prepare --split train)")
    return ensure(Path(out), build_key(base, data, spec), lambda tmp: build(tmp, base, data, spec))
