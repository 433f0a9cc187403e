"""`python -m src.tiny_models WHAT OUT ...`: build a tiny model offline (once: a complete tree is reused).

    python -m src.tiny_models policy OUT [--num-layers 2 --hidden-size 128 --intermediate-size 256
                                          --num-attention-heads 2 --num-kv-heads 1 --vocab-size 640
                                          --max-position-embeddings 4096 --block-size 16]
    .venv-scorer/bin/python -m src.tiny_models qe [OUT] [--with-small]
    python -m src.tiny_models tokenizer OUT
    python -m src.tiny_models task OUT [--train-prompts 256 --val-sentences 48] [--terms]
    python -m src.tiny_models teach BASE OUT --data TEACH.parquet [--steps 80 --lr 1e-3 --batch 32 --seed 0]

`policy` and `teach` run in the train env (transformers 5.9), `qe` in the scorer env (unbabel-comet);
`task` writes the synthetic task's TSV files (experiment=learn_tiny). The last
stdout line is the absolute OUT path; bad input is one line on stderr and exit 2.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"error: python -m src.tiny_models: {message}\n")
        sys.exit(2)


def _policy(argv: list[str]) -> int:
    from .policy import PolicySpec, ensure_built
    from .vllm_rules import VllmConstraintError

    p = _OneLineParser(prog="python -m src.tiny_models policy")
    p.add_argument("out", type=Path)
    for f in fields(PolicySpec):
        p.add_argument("--" + f.name.replace("_", "-"), type=int, default=f.default)
    p.add_argument("--block-size", type=int, default=16,
                   help="the KV cache block size the run gives vLLM (checked, not stored)")
    args = p.parse_args(argv)
    spec = PolicySpec(**{f.name: getattr(args, f.name) for f in fields(PolicySpec)})
    try:
        status = ensure_built(args.out, spec, block_size=args.block_size)
    except (VllmConstraintError, ValueError) as exc:  # ValueError: a vocab_size below what the BPE made
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"tiny policy {status}: {spec}")
    print(args.out.resolve())
    return 0


def _tokenizer(argv: list[str]) -> int:
    from .tokenizer import build_tiny_tokenizer

    p = _OneLineParser(prog="python -m src.tiny_models tokenizer")
    p.add_argument("out", type=Path)
    print(build_tiny_tokenizer(p.parse_args(argv).out).resolve())
    return 0


def _task(argv: list[str]) -> int:
    from .task import write, write_terms

    p = _OneLineParser(prog="python -m src.tiny_models task")
    p.add_argument("out", type=Path)
    p.add_argument("--train-prompts", type=int, default=256)
    p.add_argument("--val-sentences", type=int, default=48)
    p.add_argument("--terms", action="store_true",
                   help="the terminology variant: its sentences with the glossary's word, the term on each row")
    args = p.parse_args(argv)
    try:
        if args.terms:
            status, paths = write_terms(args.out, args.val_sentences)
        else:
            status, paths = write(args.out, args.train_prompts, args.val_sentences)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"task {status}: " + ", ".join(p.name for p in paths.values()))
    print(args.out.resolve())
    return 0


def _teach(argv: list[str]) -> int:
    from .teach import TeachSpec, ensure_taught

    p = _OneLineParser(prog="python -m src.tiny_models teach")
    p.add_argument("base", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--data", type=Path, required=True)
    for f in fields(TeachSpec):
        p.add_argument("--" + f.name, type=type(f.default), default=f.default)
    args = p.parse_args(argv)
    spec = TeachSpec(**{f.name: getattr(args, f.name) for f in fields(TeachSpec)})
    try:
        status = ensure_taught(args.out, args.base, args.data, spec)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"taught policy {status}: {spec}")
    print(args.out.resolve())
    return 0


def main(argv: list[str]) -> int:
    commands = {"policy": _policy, "tokenizer": _tokenizer, "task": _task, "teach": _teach}
    if not argv or argv[0] not in (*commands, "qe"):
        print("error: usage: python -m src.tiny_models {policy,qe,tokenizer,task,teach} ... (see --help of each)",
              file=sys.stderr)
        return 2
    if argv[0] == "qe":
        from .qe import main as qe_main

        return qe_main(argv[1:])
    return commands[argv[0]](argv[1:])


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # one line, no traceback (issue 33); builds are moved into place whole (atomic.py)
        print("stopped (interrupt): nothing half-built was left", file=sys.stderr)
        sys.exit(130)
