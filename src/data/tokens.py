"""Token lengths with the model's own tokenizer, loaded from a local path only.

Prompt length is counted the way verl's RLHFDataset counts it when it drops overlong prompts
(chat template with the generation prompt, no extra special tokens), so a row that passes
--max-prompt-tokens N is never dropped later by verl with data.max_prompt_length=N.
"""

from __future__ import annotations

from pathlib import Path

from .readers import InputError
from .rows import Example
from .templates import build_prompt


# what to give --tokenizer where no model weights are (a CPU machine, a fresh clone): the tiny
# Qwen-style tokenizer src.tiny_models builds offline, in seconds
TINY_TOKENIZER_HINT = ("without model weights (a CPU machine), build the tiny one: python -m src.tiny_models "
                       "tokenizer .cache/tiny-tokenizer, then --tokenizer .cache/tiny-tokenizer")


# a vocabulary this small is no policy LLM's (Qwen2.5: 151,665 tokens; Llama 3: 128,256; Mistral v0.3: 32,768):
# the tiny test tokenizer (576 tokens, byte-level) splits 今天天气很好。 into 14 tokens, Qwen2.5 into a few
TEST_VOCAB = 8192


def not_the_policys(path: str | Path, tokenizer) -> str | None:
    """One line when the lengths counted with this tokenizer are not what a real run's verl counts: a test-sized
    vocabulary (the tiny models'), or a tokenizer directory without a model (no config.json, so not model.path's
    own). None for a model's directory with a real vocabulary (issue 51 finding 12)."""
    path, size = Path(path), len(tokenizer)
    if size < TEST_VOCAB:
        what = (f"the tiny test tokenizer in {path} ({size} tokens; a real policy's tokenizer counts far fewer "
                f"per sentence)")
    elif not (path / "config.json").is_file():
        what = f"{path}, a tokenizer without a model (no config.json there), not necessarily the policy's"
    else:
        return None
    return (f"the token lengths and the --max-prompt-tokens filter are counted with {what}; verl counts a run's "
            f"prompts with its model's own tokenizer (model.path): prepare with --tokenizer <that model's dir> "
            f"for lengths and a filter that match training")


def load_tokenizer(path: str | Path):
    """A local tokenizer directory; never a hub name (nothing is ever downloaded)."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"tokenizer directory not found: {path} (give the local model/tokenizer directory; "
                         f"{TINY_TOKENIZER_HINT})")
    from transformers import AutoTokenizer

    # local_files_only: an existing directory is read as is; nothing is looked up on a hub.
    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # transformers raises many kinds here (OSError, ValueError...)
        raise InputError(f"cannot load a tokenizer from {path}: {type(e).__name__}: {e}".splitlines()[0]) from None


def _batch_lengths(tokenizer, texts: list[str]) -> list[int]:
    if not texts:
        return []
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def token_lengths(tokenizer, examples: list[Example], template: str) -> list[tuple[int, int, int]]:
    """(source, target, prompt) token counts for each example."""
    src = _batch_lengths(tokenizer, [e.src for e in examples])
    tgt = _batch_lengths(tokenizer, [e.tgt for e in examples])
    if tokenizer.chat_template is None:
        raise InputError("the tokenizer has no chat template; verl needs one to render prompts")
    rendered = [
        tokenizer.apply_chat_template(
            build_prompt(template, e.src, e.src_lang, e.tgt_lang, e.terms or ()), add_generation_prompt=True, tokenize=False
        )
        for e in examples
    ]
    prompt = _batch_lengths(tokenizer, rendered)
    return list(zip(src, tgt, prompt))
