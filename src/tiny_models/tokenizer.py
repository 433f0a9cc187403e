"""A small Qwen-style tokenizer trained offline: byte-level BPE, Qwen2.5's special tokens and chat layout.

Real model tokenizers are gigabytes away (and tests and compute nodes may have no network), but
verl's dataset code, the data preparation, the launcher and the tiny policy of experiment=smoke_tiny
only need *a* fast tokenizer with the same special tokens and chat template layout as Qwen2.5. This
trains a byte-level BPE on a few zh/en lines (so Chinese text does not fall back to one token per
byte everywhere) and saves it with `PreTrainedTokenizerFast.save_pretrained`, so
`AutoTokenizer.from_pretrained(dir)` loads it like a model's tokenizer. Byte-level: any text, the
reward's `<think>`/`<translate>` tags and unseen characters included, encodes and decodes losslessly.

The tokenizer is padded with reserved special tokens up to `vocab_size` (by default the next
multiple of 64), so a model built on it can have `vocab_size == len(tokenizer)` (vllm_rules.py says
why). The reserved tokens come last: the ids of ordinary text do not depend on the padding.

Works with transformers 4.57 (scorer env) and 5.9 (train env); imports nothing of the project.

    python -m src.tiny_models tokenizer OUT_DIR
"""

from __future__ import annotations

from pathlib import Path

# Same special tokens and chat layout as Qwen2.5 (`<|im_start|>role\ncontent<|im_end|>\n`), minus the
# default system prompt and tool handling, which nothing here needs.
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]
RESERVED = "<|reserved_{}|>"
VOCAB_MULTIPLE = 64

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_TRAINING_LINES = [
    "The cat sat on the mat.",
    "Translate the following text into English.",
    "Translate the following text into Chinese.",
    "A conversation between User and Assistant.",
    "The reasoning process and the final translation are enclosed within tags.",
    "<think> reasoning process here </think> <translate> final translation here </translate>",
    "Machine translation with reinforcement learning and quality estimation rewards.",
    "今天天气很好，我们去公园散步吧。",
    "机器翻译是自然语言处理的重要任务。",
    "请把下面的句子翻译成英文。",
    "这只猫坐在垫子上。",
    "我们使用强化学习来训练翻译模型。",
    "中文和英文之间的翻译。",
]


def round_up(n: int, multiple: int = VOCAB_MULTIPLE) -> int:
    return -(-n // multiple) * multiple


def build_tiny_tokenizer(out_dir: str | Path, vocab_size: int | None = None, bpe_vocab: int = 600) -> Path:
    """Train and save the tokenizer into `out_dir`; return the directory (loadable offline).

    `bpe_vocab`: the BPE trainer's target (specials and the 256 byte symbols included);
    `vocab_size`: the tokenizer's final length, reached with reserved special tokens (None: the
    next multiple of 64). Raises ValueError when the trained vocabulary is already longer."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tok = Tokenizer(models.BPE())
    # Byte-level like Qwen: any text (including unseen characters) encodes and decodes losslessly.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_vocab,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_TRAINING_LINES * 4, trainer=trainer)
    trained = tok.get_vocab_size()
    target = round_up(trained) if vocab_size is None else vocab_size
    if target < trained:
        raise ValueError(f"vocab_size={target} is below the {trained} tokens the BPE trainer made; "
                         f"raise it (a multiple of {VOCAB_MULTIPLE}) or lower bpe_vocab")
    # reserved tokens after everything else: ordinary text keeps its ids
    tok.add_special_tokens([AddedToken(RESERVED.format(i), special=True, normalized=False)
                            for i in range(target - trained)])

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=32768,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    return out
