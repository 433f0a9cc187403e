"""The keys of compute_score's result that are not reward components: the score, the format check's
outcome, the answer score and the texts the report shows. Components, guards and metrics share the
result's one namespace (it becomes verl's reward_extra_info, the components log and
`python -m src.evaluate.inspect_reward`'s columns), so a plug-in component may not take any of these names
(src/rewards/launch.py `taken_names`; issue 33). compute.py writes exactly these;
tests/rewards/test_component_plugins.py holds the list to compute_score's real result.
"""
RESULT_KEYS = ("score", "score_rounded", "format_ok", "format_error", "answer", "src", "translation", "error_spans")
