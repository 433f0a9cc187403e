"""Where responses come from: a pluggable generator (rows in, one response per row out, same order).

- `vllm`: the model through vLLM's offline LLM, greedy (temperature 0) or the configured sampling
  (src/evaluate/vllm_generation.py): on a GPU node in this process (vLLM is imported only inside the call:
  the train env on a CPU machine has none); with `accelerator=cpu` in a process of the CPU loop env, whose
  vLLM is the CPU build, with the engine settings the CPU loop's rollouts use (conf/accelerator/cpu.yaml).
- `file`: canned responses from a jsonl (`{"index": <extra_info.index>, "response": "..."}` per
  line): CPU tests, or re-scoring generations made elsewhere.
- `hypotheses`: an outside system's translations as plain text, one segment a line in the test set's file
  order, with a line for each segment the file holds, the ones evaluation leaves out included (WMT24++
  `is_bad_source`): what a system that translated the released file wrote. TestRow.line picks each row's.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Protocol

from src.data.readers import InputError, read_text_lines

from . import vllm_generation
from .options import EvalOptions, UsageError
from .testset import TestRow

# the CPU loop's vLLM engine settings, as verl keys (conf/accelerator/cpu.yaml): the generation's engine gets them too
_ENGINE_KEYS = "actor_rollout_ref.rollout.engine_kwargs.vllm."
# rollout keys verl hands vLLM as engine arguments (verl/workers/rollout/vllm_rollout/vllm_async_server.py,
# launch_server): eager mode, and the dtype the run's vLLM computes in (float32 on CPU: conf/accelerator/cpu.yaml)
_ROLLOUT_ARGS = {"actor_rollout_ref.rollout.enforce_eager": ("enforce_eager", bool),
                 "actor_rollout_ref.rollout.dtype": ("dtype", str)}


class Generator(Protocol):
    def generate(self, rows: list[TestRow]) -> list[str]: ...


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
    def __init__(self, model_dir: Path, opts: EvalOptions, cpu: "CpuLoopEnv | None" = None):
        self.model_dir, self.opts, self.cpu = model_dir, opts, cpu

    def sampling_kwargs(self) -> dict:
        o = self.opts
        kwargs = {"temperature": o.temperature, "top_p": o.top_p, "max_tokens": o.max_new_tokens, "seed": o.seed}
        if o.top_k > 0:  # vLLM's "off" value changed between versions (-1 / 0): pass it only when set
            kwargs["top_k"] = o.top_k
        if o.samples > 1:
            kwargs["n"] = o.samples
        if self.cpu is not None:
            # a request with a seed of its own gets a torch generator, which vLLM rewinds when it drops a token of
            # a partly scheduled request (vllm/v1/worker/gpu_model_runner.py, _bookkeeping_sync: set_offset); torch's
            # CPU generator has no offset ("CPU Generator does not use offset", with 48 prompts x 4 answers here).
            # The engine's seed (engine_kwargs) keeps the answers reproducible, run to run
            del kwargs["seed"]
        return kwargs

    def engine_kwargs(self) -> dict:
        o = self.opts
        if self.cpu is not None:  # vLLM-CPU ignores gpu_memory_utilization; one process, no tensor parallelism
            kwargs = {"model": str(self.model_dir), "seed": o.seed, **self.cpu.engine_kwargs}
        else:
            kwargs = {"model": str(self.model_dir), "tensor_parallel_size": o.tp,
                      "gpu_memory_utilization": o.gpu_memory_utilization, "seed": o.seed}
        if o.max_model_len:
            kwargs["max_model_len"] = o.max_model_len
        return kwargs

    def generate(self, rows: list[TestRow]) -> list[str]:
        """`samples` responses per row: row 0's, then row 1's, ..."""
        conversations = [r.messages for r in rows]
        if self.cpu is None:
            return vllm_generation.generate(self.engine_kwargs(), self.sampling_kwargs(), conversations,
                                            self.opts.chat_template)
        return self.cpu.generate(self.engine_kwargs(), self.sampling_kwargs(), conversations, self.opts.chat_template)


class CpuLoopEnv:
    """The CPU loop env's Python and vLLM settings (conf/accelerator/cpu.yaml, the one owner), and generation in a
    process of it."""

    def __init__(self, accelerator: dict):
        self.python = Path(accelerator["python"])
        self.env = {k: str(v) for k, v in (accelerator.get("env") or {}).items()}
        verl = accelerator.get("verl") or {}
        self.engine_kwargs = {k[len(_ENGINE_KEYS):]: v for k, v in verl.items() if k.startswith(_ENGINE_KEYS)}
        self.engine_kwargs.update({arg: kind(verl[key]) for key, (arg, kind) in _ROLLOUT_ARGS.items() if key in verl})

    @classmethod
    def composed(cls) -> "CpuLoopEnv":
        """From the launcher's `accelerator=cpu` group; UsageError when the loop env is missing."""
        from src.config import compose_config

        env = cls(compose_config(["accelerator=cpu"])["accelerator"])
        if not env.python.is_file():
            raise UsageError(f"accelerator=cpu generates with the CPU loop env's vLLM, and {env.python} is missing: "
                             f"`make setup` creates it on a CPU machine (docs/environments.md)")
        return env

    def generate(self, engine_kwargs: dict, sampling_kwargs: dict, conversations: list[list[dict]],
                 chat_template: bool) -> list[str]:
        from src.config import PROJECT_ROOT

        with tempfile.TemporaryDirectory(prefix="qe-eval-generate-") as folder:
            request, out, log = (Path(folder) / name for name in ("request.json", "responses.json", "vllm.log"))
            vllm_generation.write_request(request, engine_kwargs, sampling_kwargs, conversations, chat_template)
            env = {**os.environ, **self.env, "PYTHONPATH": str(PROJECT_ROOT)}
            with open(log, "w", encoding="utf-8") as f:
                code = subprocess.run([str(self.python), "-m", "src.evaluate.vllm_generation", str(request), str(out)],
                                      cwd=PROJECT_ROOT, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
            if code != 0 or not out.is_file():
                tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
                raise RuntimeError(f"vLLM (CPU, {self.python}) exited with code {code} before it wrote its "
                                   f"responses: {tail[0][:300] if tail else 'no output'}")
            return vllm_generation.read_responses(out, len(conversations) * sampling_kwargs.get("n", 1))


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None
