"""Generation with vLLM's offline engine: in this process on a GPU node (its env has vLLM), or, with
`accelerator=cpu`, in a process of the CPU loop env, whose vLLM is the CPU build (the train env on a CPU machine has
none: docs/environments.md). The same function runs either way; the second through

    <loop env python> -m src.evaluate.vllm_generation REQUEST.json OUT.json

REQUEST holds the engine's and the sampling's keyword arguments, the conversations and whether the tokenizer's chat
template renders them; OUT gets `{"responses": [...]}`, sampling's n strings per conversation in order, written whole (a
temporary file renamed: src/data/safe_write.py) or not at all. Only the standard library and that module are imported
at the top: the loop env shares the repository but not the train env's packages.

Prompts are rendered as verl renders them at rollout: the tokenizer's chat template with the generation prompt, or
(the run's model.use_chat_template false) the plain concatenation that src/verl_config/ppo_trainer.py passes as
data.apply_chat_template_kwargs.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from src.data.safe_write import atomic_files

# must equal src/verl_config/ppo_trainer.py's template for use_chat_template=false (a test keeps them equal)
PLAIN_CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def render_prompt(tokenizer, messages: list[dict], chat_template: bool) -> str:
    kwargs = {} if chat_template else {"chat_template": PLAIN_CHAT_TEMPLATE}
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)


def generate(engine_kwargs: dict, sampling_kwargs: dict, conversations: list[list[dict]],
             chat_template: bool) -> list[str]:
    """The responses, sampling's `n` (default 1) per conversation: conversation 0's, then 1's, ..."""
    from vllm import LLM, SamplingParams

    llm = LLM(**engine_kwargs)
    try:
        tokenizer = llm.get_tokenizer()
        prompts = [render_prompt(tokenizer, messages, chat_template) for messages in conversations]
        outputs = llm.generate(prompts, SamplingParams(**sampling_kwargs))
        return [answer.text for out in outputs for answer in out.outputs]
    finally:
        # free the GPU before a scorer started here loads its models onto it
        shutdown = getattr(getattr(llm, "llm_engine", None), "shutdown", None)
        if callable(shutdown):
            shutdown()
        del llm


def write_request(path: Path, engine_kwargs: dict, sampling_kwargs: dict, conversations: list[list[dict]],
                  chat_template: bool) -> None:
    path.write_text(json.dumps({"engine": engine_kwargs, "sampling": sampling_kwargs,
                                "conversations": conversations, "chat_template": chat_template}), encoding="utf-8")


def read_responses(path: Path, expected: int) -> list[str]:
    """The responses a run of this module wrote; ValueError when they are not `expected` strings."""
    responses = json.loads(path.read_text(encoding="utf-8"))["responses"]
    if not isinstance(responses, list) or len(responses) != expected or not all(isinstance(r, str) for r in responses):
        raise ValueError(f"{path}: expected {expected} responses")
    return responses


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if len(argv) != 2:
        print("usage: python -m src.evaluate.vllm_generation REQUEST.json OUT.json (src/evaluate/generators.py "
              "writes the request; `python -m src.evaluate` is the command to run)", file=sys.stderr)
        return 2
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    responses = generate(request["engine"], request["sampling"], request["conversations"], request["chat_template"])
    text = json.dumps({"responses": responses}, ensure_ascii=False)
    atomic_files({Path(argv[1]): lambda tmp: Path(tmp).write_text(text, encoding="utf-8")})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
