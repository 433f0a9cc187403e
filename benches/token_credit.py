"""What token-level credit costs per response in the agent loop worker (issue 14).

reward.credit=token adds, per trajectory and on CPU, the byte walk over the response's tokens
(src/rewards/credit/tokens.py token_char_ranges, which also runs the tokenizer's own decode to
check itself) and the range -> token penalty pass (token_penalties). This times both on responses
of a byte-level BPE tokenizer trained offline (tests/fixtures/tiny_tokenizer.py, the same
pre-tokenizer and decoder as Qwen2.5) and prints a markdown table (benches/RESULTS.md, "Token-level
credit"). The scorer and the policy are not involved: the spans are the ones the reward already has.

    .venv/bin/python benches/token_credit.py [--repeats 20]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LINES = {
    "en": "The cat sat on the mat and the translation model learns from quality estimation rewards. ",
    "zh": "机器翻译是自然语言处理的重要任务，我们使用强化学习来训练翻译模型。",
    "ja": "猫はマットの上に座った。機械翻訳は自然言語処理の重要な課題です。",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from src.rewards.credit import tokens
    from tests.fixtures.tiny_tokenizer import build_tiny_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        tok = AutoTokenizer.from_pretrained(str(build_tiny_tokenizer(tmp)), local_files_only=True)
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        print("| text | response tokens | spans | walk + decode check, ms (median) | penalties, ms (median) |")
        print("|---|---|---|---|---|")
        for lang, line in LINES.items():
            for target in (256, 1024):
                text = line
                ids = tok(f"<translate>{text}</translate>", add_special_tokens=False)["input_ids"]
                while len(ids) < target:
                    text += line
                    ids = tok(f"<translate>{text}</translate>", add_special_tokens=False)["input_ids"]
                ids = ids[:target - 1] + [eos]
                n_chars = len(tok.decode(ids, skip_special_tokens=True))
                # one error span per 40 characters, as a heavily flagged translation would have
                spans = [{"start": s, "end": s + 6, "penalty": -0.5} for s in range(11, n_chars - 6, 40)]
                walk, pen = [], []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    _, ranges = tokens.token_char_ranges(tok, ids)
                    t1 = time.perf_counter()
                    tokens.token_penalties(ranges, spans)
                    t2 = time.perf_counter()
                    walk.append((t1 - t0) * 1e3)
                    pen.append((t2 - t1) * 1e3)
                print(f"| {lang} | {len(ids)} | {len(spans)} | {statistics.median(walk):.2f} | "
                      f"{statistics.median(pen):.2f} |")


if __name__ == "__main__":
    main()
