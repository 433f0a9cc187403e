"""Offline evaluation of a trained translation policy on a prepared test set.

    python -m src.evaluate checkpoint=results/.../global_step_200/actor data=data/flores/test.parquet

Steps, one module each: options (key=value arguments), checkpoint (HF dir or verl FSDP shards ->
verl's model merger), testset (the parquet of src.data.prepare), generators (vLLM on GPU, or canned
responses from a jsonl), segments (the `<translate>` part, parsed as the reward parses it),
text_metrics (sacrebleu BLEU/chrF), qe_metrics (the QE scoring service through the reward's
client), scorer_service (start that service when no URL is given), outputs (tables and jsonl).
"""
