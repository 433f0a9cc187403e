"""Response tokens of the policy -> character ranges of the decoded response -> token penalties.

verl's reward managers decode the response as `tokenizer.decode(response_ids,
skip_special_tokens=True)` (verl/experimental/reward_loop/reward_manager/naive.py and dapo.py,
run_single), so the reward function's character offsets are offsets into that string. Here the
same ids are walked byte by byte instead of re-tokenising the text (re-encoding a decoded string
need not give back the ids the policy sampled).

Rule (byte-level BPE, as in Qwen/GPT-2/Llama-3 tokenizers): each token is a run of UTF-8 bytes
(special tokens, including added tokens flagged special: none, they are skipped in the decode; added
non-special tokens: their text).
A token covers every character at least one of whose bytes it holds. So a CJK character split
over two tokens belongs to both, and a token holding ' cat sat' covers both words. A token is
penalised when its characters overlap a penalised range; its penalty is the largest (most
negative) of those ranges'. A token with no characters (the EOS `<|im_end|>`) is never penalised.
The last response token is never penalised either: it carries the sequence score
(src/rewards/credit/estimator.py reads it there).

A tokenizer whose decode is not this byte walk (SentencePiece with '▁', cleanup of spaces) is
refused with one line rather than mapped approximately.
"""
from __future__ import annotations

import codecs
from functools import lru_cache
from typing import Sequence


class TokenMappingError(ValueError):
    """The tokenizer or the text does not allow an exact token <-> character mapping."""


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte <-> printable unicode table (the alphabet of byte-level BPE vocabularies)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _token_bytes(tokenizer, ids: Sequence[int]) -> list[bytes]:
    # an added token flagged special is skipped by decode(skip_special_tokens=True) (the Rust decoder
    # skips by that flag) whether or not it is one of all_special_ids: a tokenizer's reserved
    # <|...|> tokens often are not (the tiny policy's, tests/loop/test_reward_paths.py)
    added_tokens = tokenizer.added_tokens_decoder  # id -> AddedToken
    special = set(tokenizer.all_special_ids) | {i for i, t in added_tokens.items() if t.special}
    added = {i: t.content for i, t in added_tokens.items() if not t.special}
    table = _byte_decoder()
    pieces = tokenizer.convert_ids_to_tokens(list(ids))
    out = []
    for i, piece in zip(ids, pieces):
        if i in special:
            out.append(b"")
        elif i in added:
            out.append(added[i].encode("utf-8"))
        else:
            try:
                out.append(bytes(table[c] for c in piece))
            except KeyError:
                raise TokenMappingError(
                    f"token-level credit needs a byte-level BPE tokenizer (Qwen, Llama-3, GPT-2 style): token "
                    f"{piece!r} of {type(tokenizer).__name__} is not made of byte symbols; use reward.credit=sequence"
                ) from None
    return out


def token_char_ranges(tokenizer, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """(decoded response, [(first char, end char)] per token) for `ids` as verl decodes them."""
    ids = [int(i) for i in ids]
    chunks = _token_bytes(tokenizer, ids)
    # one incremental UTF-8 decode over the tokens' bytes, as the tokenizer's decode does with
    # errors="replace" (a CJK character cut at the end of a response becomes U+FFFD there too).
    # Every character emitted while a token's bytes are fed holds at least one of them (it ends
    # in them), and a character still pending after them starts in them: that is the token's range.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    parts: list[str] = []
    ranges: list[tuple[int, int]] = []
    count = 0
    for chunk in chunks:
        if not chunk:
            ranges.append((count, count))
            continue
        got = decoder.decode(chunk)
        parts.append(got)
        first, count = count, count + len(got)
        pending = bool(decoder.getstate()[0])
        ranges.append((first, count + 1 if pending else count))
    parts.append(decoder.decode(b"", final=True))
    text = "".join(parts)
    reference = tokenizer.decode(ids, skip_special_tokens=True)
    if text != reference:
        raise TokenMappingError(
            f"token-level credit: {type(tokenizer).__name__}.decode does not equal the byte-level walk of the "
            f"response tokens (e.g. clean_up_tokenization_spaces=True or a non byte-level decoder); "
            f"use reward.credit=sequence or a byte-level BPE tokenizer")
    return text, ranges


def _worst_per_token(token_ranges: Sequence[tuple[int, int]], penalised: Sequence[dict]) -> list[dict | None]:
    """For each token, the range with the largest penalty among those its characters overlap.
    Linear in characters: each character first gets its worst range, then each token its worst
    character's (a quadratic token x range scan took 5 ms on a 1024-token response)."""
    n = max((ce for _, ce in token_ranges), default=0)
    per_char: list[dict | None] = [None] * n
    for r in penalised:
        for c in range(max(0, int(r["start"])), min(n, int(r["end"]))):
            if per_char[c] is None or r["penalty"] < per_char[c]["penalty"]:
                per_char[c] = r
    out = []
    for cs, ce in token_ranges:
        worst = None
        for r in per_char[cs:ce]:
            if r is not None and (worst is None or r["penalty"] < worst["penalty"]):
                worst = r
        out.append(worst)
    return out


def token_penalties(token_ranges: Sequence[tuple[int, int]], penalised: Sequence[dict]) -> list[float]:
    """One penalty per token (0.0 or negative); the last token stays 0 (the sequence score's slot)."""
    out = [float(w["penalty"]) if w is not None else 0.0 for w in _worst_per_token(token_ranges, penalised)]
    if out:
        out[-1] = 0.0
    return out


def credit_stats(token_ranges: Sequence[tuple[int, int]], penalised: Sequence[dict]) -> dict[str, float]:
    """Per response: share of its tokens penalised by each severity (a token counts once, under
    the range that sets its penalty) and the mean token penalty (0 for unpenalised tokens)."""
    from src.rewards.credit.ranges import SEVERITIES

    counts = dict.fromkeys(SEVERITIES, 0)
    total = 0.0
    for worst in _worst_per_token(token_ranges, penalised)[:-1]:  # the last token holds the sequence score
        if worst is not None:
            counts[worst["severity"]] += 1
            total += float(worst["penalty"])
    n = max(len(token_ranges), 1)
    return {**{f"credit_tokens_{sev}": counts[sev] / n for sev in SEVERITIES}, "credit_token_penalty": total / n}


def encode_token_credit(token_ranges: Sequence[tuple[int, int]], penalties: Sequence[float]) -> str:
    """`[[first char, end char, penalty], ...]` for the tokens that have characters, as JSON (verl
    averages any non-string value it logs)."""
    import json

    return json.dumps([[cs, ce, round(p, 6)] for (cs, ce), p in zip(token_ranges, penalties) if cs < ce])
