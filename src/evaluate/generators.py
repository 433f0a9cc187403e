"""Where responses come from: a pluggable generator (rows in, one response per row out, same order).

- `vllm`: the model on GPU through vLLM's offline LLM, greedy (temperature 0) or the configured
  sampling. vLLM is imported only here, inside the call: the train env on a CPU machine has none.
- `file`: canned responses from a jsonl (`{"index": <extra_info.index>, "response": "..."}` per
  line): CPU tests, or re-scoring generations made elsewhere.
- `hypotheses`: an outside system's translations as plain text, one segment a line in the test set's file
  order, with a line for each segment the file holds, the ones evaluation leaves out included (WMT24++
  `is_bad_source`): what a system that translated the released file wrote. TestRow.line picks each row's.

Prompts are rendered as verl renders them at rollout: the tokenizer's chat template with the
generation prompt, or (the run's model.use_chat_template false) the plain concatenation that
src/verl_config/ppo_trainer.py passes as data.apply_chat_template_kwargs.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from src.data.readers import InputError, read_text_lines

from .options import EvalOptions, UsageError
from .testset import TestRow

# must equal src/verl_config/ppo_trainer.py's template for use_chat_template=false (a test keeps them equal)
PLAIN_CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


class Generator(Protocol):
    def generate(self, rows: list[TestRow]) -> list[str]: ...


def render_prompt(tokenizer, messages: list[dict], chat_template: bool) -> str:
    kwargs = {} if chat_template else {"chat_template": PLAIN_CHAT_TEMPLATE}
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)


class FileGenerator:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise UsageError(f"responses: no such file: {self.path}")
        self.by_index: dict[int, str] = {}
        try:
            text = self.path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"responses: {self.path} is not UTF-8 text (a jsonl of "
                             f"{{\"index\": N, \"response\": \"...\"}})") from None
        # split on "\n" only: str.splitlines would also cut at U+2028 inside a JSON string
        first_line: dict[int, int] = {}
        for n, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                index, response = int(obj["index"]), str(obj["response"])
            except (ValueError, KeyError, TypeError, RecursionError):
                raise UsageError(f"responses: line {n} of {self.path} is not "
                                 f"{{\"index\": N, \"response\": \"...\"}}") from None
            if index in first_line:  # which of the two is the model's answer is not ours to guess
                raise UsageError(f"responses: index {index} appears twice in {self.path} (lines {first_line[index]} "
                                 f"and {n}); keep one response per row")
            first_line[index] = n
            self.by_index[index] = response
        self.lines = first_line

    def check(self, rows: list[TestRow], known: set[int] | None = None) -> None:
        """Every row has a response; with `known` (every extra_info.index of the test set, `limit=`
        or not), every response belongs to a row: one for another test set means a mix-up."""
        if known is not None:
            stray = sorted(set(self.by_index) - known)
            if stray:
                raise UsageError(f"responses: index {stray[0]} (line {self.lines[stray[0]]} of {self.path}) is not "
                                 f"in the test set ({len(stray)} such; its indices run {min(known)}..{max(known)}): "
                                 f"responses for another test set?")
        missing = [r.index for r in rows if r.index not in self.by_index]
        if missing:
            raise UsageError(f"responses: {self.path} has no response for index {missing[:5]} "
                             f"({len(missing)} of {len(rows)} rows)")

    def generate(self, rows: list[TestRow]) -> list[str]:
        self.check(rows)
        return [self.by_index[r.index] for r in rows]


class HypothesesGenerator:
    def __init__(self, path: str | Path, segments: int, test_set: str):
        """The lines of `path`, which must be one a segment of `test_set` (`segments` of them); else
        UsageError naming both counts."""
        self.path = Path(path)
        if not self.path.is_file():
            raise UsageError(f"hypotheses: no such file: {self.path}")
        try:
            # split on "\n" only, as test sets are read: U+2028 inside a translation does not end its line
            self.lines = read_text_lines(self.path)
        except InputError as exc:
            raise UsageError(f"hypotheses: {exc}") from None
        if len(self.lines) != segments:
            raise UsageError(f"hypotheses: {self.path} has {len(self.lines)} lines but {test_set} has {segments} "
                             f"segments; give one line per segment of the file, in its order, those evaluation "
                             f"leaves out included")

    def generate(self, rows: list[TestRow]) -> list[str]:
        return [self.lines[r.line] for r in rows]


class VLLMGenerator:
    def __init__(self, model_dir: Path, opts: EvalOptions):
        self.model_dir, self.opts = model_dir, opts

    def sampling_kwargs(self) -> dict:
        o = self.opts
        kwargs = {"temperature": o.temperature, "top_p": o.top_p, "max_tokens": o.max_new_tokens, "seed": o.seed}
        if o.top_k > 0:  # vLLM's "off" value changed between versions (-1 / 0): pass it only when set
            kwargs["top_k"] = o.top_k
        return kwargs

    def engine_kwargs(self) -> dict:
        o = self.opts
        kwargs = {"model": str(self.model_dir), "tensor_parallel_size": o.tp,
                  "gpu_memory_utilization": o.gpu_memory_utilization, "seed": o.seed}
        if o.max_model_len:
            kwargs["max_model_len"] = o.max_model_len
        return kwargs

    def generate(self, rows: list[TestRow]) -> list[str]:
        from vllm import LLM, SamplingParams

        llm = LLM(**self.engine_kwargs())
        try:
            tokenizer = llm.get_tokenizer()
            prompts = [render_prompt(tokenizer, r.messages, self.opts.chat_template) for r in rows]
            outputs = llm.generate(prompts, SamplingParams(**self.sampling_kwargs()))
            return [out.outputs[0].text for out in outputs]
        finally:
            # free the GPU before a scorer started here loads its models onto it
            shutdown = getattr(getattr(llm, "llm_engine", None), "shutdown", None)
            if callable(shutdown):
                shutdown()
            del llm


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None
