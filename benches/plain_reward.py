"""The reward a plain verl run gets in benches/against_verl.py: the format check and sentence BLEU, the same code
the project's reward calls (src/rewards/parsing.py, src/rewards/bleu.py), without what the project adds around
it (degenerate checks, guards, the QE service, per-sample component logs).

verl loads it by file path (reward.custom_reward_function.path) and merges reward_kwargs into each call:
`bonus`, `floor`, `answer_floor` are the project's format settings (reward.format.*), `bleu_weight` its BLEU
weight, so an answer both score alike gets the same number.
"""
from __future__ import annotations

from src.data.templates import expected_format
from src.rewards.bleu import sentence_bleu
from src.rewards.parsing import parse_response


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None, *,
                  bonus: float, floor: float, answer_floor: float, bleu_weight: float, **_verl_extra) -> float:
    info = extra_info or {}
    parsed = parse_response(solution_str or "", expected_format(str(info["template"])))
    if not parsed.ok:
        return floor + answer_floor
    bleu = sentence_bleu(parsed.translation, ground_truth or "", info.get("tgt_lang")) / 100
    return bonus + bleu_weight * min(max(bleu, 0.0), 1.0)  # clipped to [0, 1] as the project's reward.clip.bleu
