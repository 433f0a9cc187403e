"""Translation rewards computed inside verl's reward workers (train env; never imports comet).

    parsing.py         strict <think>/<translate> format per prompt template
    degenerate.py      empty, source copy, wrong script, absurd length (no scorer call)
    bleu.py            sacrebleu sentence BLEU tokenised per target language
    client.py          shared aiohttp client to the QE scoring service (src/scorer)
    qe.py              which models a row needs, their answers as components
    combine.py         discrete thresholds, clipping, weights
    settings.py        reward group config -> verl reward_kwargs -> validated settings
    components_log.py  per-sample components for src/report ($QE_REWARD_COMPONENTS_DIR)
    compute.py         compute_score, the function verl calls
    credit/            token-level credit from error spans (reward.credit=token): ranges, token
                       mapping, the grpo_token estimator, verl's agent loop seam
"""
