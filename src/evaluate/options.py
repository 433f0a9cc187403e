"""The evaluation's arguments: Hydra-style `key=value` tokens checked against one dataclass.

Not a Hydra app on purpose: evaluation needs a dozen flat keys, no config groups, no output dir
magic, and (like the launcher's refusals) one line + exit 2 for any bad key or value. Where the
scorer is started here, its models come from the launcher's composed `scorer`/`paths` groups, so
conf/local/default.yaml applies to evaluation too (src/evaluate/scorer_service.py).
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Optional

from src.data.templates import TEMPLATES
from src.scorer.backends import METRICS as QE_METRICS
from src.scorer.backends import OWN_METRICS

from .errors import UsageError  # defined there, imported from here by the modules and tests that read options
from .significance import DEFAULT_RESAMPLES, DEFAULT_SEED, resampling_problem
from .text_metrics import METRICS as TEXT_METRICS

ALL_METRICS = TEXT_METRICS + QE_METRICS
# what `metrics` computes unless told: every metric but a backend's own that its descriptor leaves out
# (OwnMetric.evaluated_by_default: checkpoints a setup has only when it fetched them); metrics=...,<it> adds it
DEFAULT_METRICS = tuple(m for m in ALL_METRICS if m not in OWN_METRICS or OWN_METRICS[m].evaluated_by_default)
GENERATORS = ("vllm", "file", "hypotheses")
ACCELERATORS = ("gpu", "cpu")
EXTRACT_MODES = ("lenient", "strict", "raw")
# what extract= is when hypotheses= is given and extract= is not: an outside system's output is its translation
HYPOTHESES_EXTRACT = "raw"


# how a baseline= model is prompted and read (null: as the system is); for a model only
BASELINE_MODEL_OPTIONS = ("baseline_template", "baseline_chat_template", "baseline_extract")


def given_baseline_model_options(opts) -> list[str]:
    """The BASELINE_MODEL_OPTIONS set (not null) in `opts`."""
    return [k for k in BASELINE_MODEL_OPTIONS if getattr(opts, k) is not None]


def model_option(metric: str) -> str:
    """The option naming the service model of a QE metric: comet_model, kiwi_model, xcomet_model,
    and <metric>_model for each backend's own metric."""
    return f"{metric}_model"


def reference_option(metric: str) -> str:
    """The option saying whether a QE metric's model reads the reference where it may (a span model,
    a backend's own metric): xcomet_reference, <metric>_reference."""
    return f"{metric}_reference"


@dataclass
class _Options:
    """The options of every evaluation; EvalOptions below adds each backend metric's own."""
    # model to evaluate: an HF model dir, a verl actor dir (global_step_N/actor), a global_step_N
    # dir, or a checkpoint root holding latest_checkpointed_iteration.txt. Not needed with
    # generator=file or hypotheses=.
    checkpoint: Optional[str] = None
    # or the checkpoints of training runs, comma-separated: run dirs, sweep dirs (every run in them) or checkpoint
    # dirs, each checkpoint `steps` picks evaluated as checkpoint= is, into <out>/<run>/step_<N>/, with one
    # results table over them (results.md/html/csv/json) and each metric plotted against the step; out defaults to
    # <the run or sweep dir>/eval/<time>_<data stem>, where `python -m src.report` shows it
    run: list = field(default_factory=list)
    # with run=: all (every saved step) | last | best (the highest validation reward) | N[,N...]
    steps: str = "all"
    # test set: a parquet written by `python -m src.data.prepare`
    data: Optional[str] = None
    # or standard test sets as released, comma-separated (src/evaluate/testsets.py): a WMT24++ jsonl, a WMT
    # xml, FLORES-200 devtest (SRC:REF, or DIR@zh-en), line-aligned SRC:REF[@zh-en], a prepared parquet
    testsets: list = field(default_factory=list)
    # the prompt template testsets= rows are built with (base | chat | rl): the one the policy was trained with
    template: Optional[str] = None
    # output dir, created at the end; an existing path is refused (nothing is ever replaced).
    # default outputs/eval/<time>_<data stem or the test sets' names>, -2, -3... when an evaluation took it first
    out: Optional[str] = None
    # vllm (GPU) | file (canned responses, `responses=`: jsonl of {"index", "response"}) | hypotheses
    # (`hypotheses=`; implied by it)
    generator: str = "vllm"
    responses: Optional[str] = None
    # an outside system's translations: plain text, one segment a line, in the test set's file order with a
    # line for every segment the file holds (WMT24++ is_bad_source rows included); one test set. Implies
    # generator=hypotheses and, unless extract= is given, extract=raw
    hypotheses: Optional[str] = None
    # at most this many rows of the test set (in file order; of each set with testsets=); null = all
    limit: Optional[int] = None
    # generation: temperature 0 = greedy
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 1024
    seed: int = 1
    # answers generated per sentence (vLLM's n; sampled, so temperature > 0), as verl validates with
    # val_kwargs.n: each a segment of its own (`sample` 0..N-1 in segments.jsonl), corpus BLEU/chrF over every
    # answer, each mean over all of them; a baseline= must have as many
    samples: int = 1
    # where generator=vllm runs: gpu (vLLM in this env, on this node's GPUs) | cpu (vLLM's CPU build in the CPU
    # loop env, with the CPU loop's engine settings: conf/accelerator/cpu.yaml; tiny models on a machine without GPU)
    accelerator: str = "gpu"
    # vLLM engine (tp and gpu_memory_utilization: on a GPU)
    tp: int = 1
    gpu_memory_utilization: float = 0.85
    max_model_len: Optional[int] = None
    # true: render prompts through the tokenizer's chat template; false: the plain concatenation
    # verl uses when the run's model.use_chat_template is false (the default of conf/model/*)
    chat_template: bool = False
    # where a verl FSDP checkpoint is merged to (default <actor dir>/merged_hf; reused if complete)
    merged_dir: Optional[str] = None
    # lenient: a response with a broken format is still scored on its last <translate> part
    # (format_ok says which were broken); strict: a broken format scores as an empty translation;
    # raw: the whole response is the translation (no tags expected: a base model, an outside system), no format_ok
    extract: str = "lenient"
    metrics: list = field(default_factory=lambda: list(DEFAULT_METRICS))
    # the metrics the policy was trained on (e.g. trained_on=kiwi for reward=comet): the table marks
    # them "(trained)" and every other metric "(held out)", and summary.json lists both; empty = unmarked
    trained_on: list = field(default_factory=list)
    # QE scoring service: a running one (token in QE_SCORER_TOKEN), or null = start one here on
    # scorer_device: auto = cuda when this process sees a GPU, else cpu; cuda, cuda:N or cpu
    scorer_url: Optional[str] = None
    scorer_device: str = "auto"
    comet_model: str = "comet_da"
    kiwi_model: str = "cometkiwi_da"
    xcomet_model: str = "xcomet_xl"
    # XCOMET with the reference (more accurate than its QE mode; spans either way)
    xcomet_reference: bool = True
    # items per /score request and requests in flight (the service batches them on its side)
    batch_items: int = 256
    concurrency: int = 4
    request_timeout_s: float = 900.0
    # what to compare with, on the same test set and rows: an earlier evaluation's output dir (its segments.jsonl
    # and summary.json), or a model (an HF dir, e.g. the base model, or a verl checkpoint) or a hypotheses file
    # (plain text, as hypotheses=), evaluated here first, once, into <out>/baseline/. The table gets each metric's
    # difference to it with a paired bootstrap p-value (src/evaluate/significance.py)
    baseline: Optional[str] = None
    # how a baseline= model is prompted and read, where it differs from the system (null: as the system is): a
    # base instruct model gets its own chat template (baseline_chat_template=true), with testsets= a plain
    # translation request (baseline_template=chat), and is scored on its whole answer (baseline_extract=raw). A
    # hypotheses file is always read raw
    baseline_template: Optional[str] = None
    baseline_chat_template: Optional[bool] = None
    baseline_extract: Optional[str] = None
    # the paired bootstrap's resamples and seed (sacrebleu's defaults: `sacrebleu --paired-bs` gives the same)
    bootstrap_resamples: int = DEFAULT_RESAMPLES
    bootstrap_seed: int = DEFAULT_SEED

    @property
    def qe_metrics(self) -> list[str]:
        return [m for m in self.metrics if m in QE_METRICS]

    @property
    def held_out(self) -> list[str]:
        """The metrics computed that the policy was not trained on (none when trained_on is empty)."""
        return [m for m in self.metrics if m not in self.trained_on] if self.trained_on else []


# Each backend's own metric (src.scorer.backends.OWN_METRICS) has its model option, defaulting to the
# descriptor's example model, and its reference option: true, its reference mode (source + translation
# + reference); false, its QE mode, as the reward asks it by default (reward.<metric>.reference=false).
# Read from the descriptors, so a backend added in its own package is evaluated with no edit here.
EvalOptions = dataclasses.make_dataclass(
    "EvalOptions",
    [(model_option(m), str, field(default=own.example_model)) for m, own in OWN_METRICS.items()]
    + [(reference_option(m), bool, field(default=True)) for m in OWN_METRICS],
    bases=(_Options,), namespace={"__module__": __name__, "__doc__": "The evaluation's options, all of them."})
_FIELDS = {f.name: f for f in dataclasses.fields(EvalOptions)}
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def _convert(key: str, raw: str):
    default = getattr(EvalOptions(), key)
    kind = _FIELDS[key].type
    if raw.lower() in ("null", "none", "~") and "Optional" in str(kind):
        return None
    if key == "testsets":
        specs = [v.strip() for v in raw.strip("[]").split(",") if v.strip()]
        if not specs:
            raise UsageError("testsets: empty; give FILE[,FILE...] (e.g. testsets=wmt24pp/en-zh_CN.jsonl)")
        return specs
    if key == "run":
        specs = [v.strip() for v in raw.strip("[]").split(",") if v.strip()]
        if not specs:
            raise UsageError("run: empty; give DIR[,DIR...] (a run dir, a sweep dir or a checkpoint dir)")
        return specs
    if key in ("metrics", "trained_on"):
        values = [v.strip().lower() for v in raw.strip("[]").split(",") if v.strip()]
        bad = [v for v in values if v not in ALL_METRICS]
        if bad or (not values and key == "metrics"):
            raise UsageError(f"{key}: unknown {', '.join(bad) or '(empty)'}; choose from {','.join(ALL_METRICS)}")
        return values
    try:
        if isinstance(default, bool) or "bool" in str(kind):
            if raw.lower() in _TRUE:
                return True
            if raw.lower() in _FALSE:
                return False
            raise ValueError
        if "int" in str(kind):
            return int(raw)
        if "float" in str(kind):
            return float(raw)
    except ValueError:
        want = "true/false" if "bool" in str(kind) else ("an integer" if "int" in str(kind) else "a number")
        raise UsageError(f"{key}={raw!r} is not {want}") from None
    return raw


def parse_options(tokens: list[str]) -> EvalOptions:
    """`key=value` tokens -> EvalOptions; UsageError on an unknown key or a bad value."""
    values = {}
    for token in tokens:
        key, sep, raw = token.partition("=")
        key = key.strip().lstrip("+")
        if not sep or not key:
            raise UsageError(f"arguments are key=value, got {token!r} (e.g. checkpoint=results/.../actor)")
        if key not in _FIELDS:
            raise UsageError(f"unknown key {key!r}; known keys: {', '.join(_FIELDS)}")
        values[key] = _convert(key, raw)
    if values.get("hypotheses"):  # what a researcher scoring an outside system's file means without saying it
        values.setdefault("generator", "hypotheses")
        values.setdefault("extract", HYPOTHESES_EXTRACT)
    opts = EvalOptions(**values)
    _check(opts)
    return opts


def steps_problem(steps: str) -> str | None:
    """Why `steps=` is not all, last, best or N[,N...] (src/evaluate/runs.py picks them); None when it is."""
    if steps in ("all", "last", "best") or all(s.strip().isdigit() for s in steps.split(",")):
        return None
    return f"steps={steps!r}; give all, last, best or step numbers (steps=100,200)"


def _check(o: EvalOptions) -> None:
    """Value checks that need no file system (paths are checked by the CLI)."""
    if o.generator not in GENERATORS:
        raise UsageError(f"generator={o.generator!r}; choose from {', '.join(GENERATORS)}")
    if o.accelerator not in ACCELERATORS:
        raise UsageError(f"accelerator={o.accelerator!r}; choose from {', '.join(ACCELERATORS)}")
    if o.accelerator != "gpu" and o.generator != "vllm" and not o.baseline:
        # with baseline= (a model), it says where the baseline's answers are generated
        raise UsageError(f"accelerator={o.accelerator} says where vLLM generates, and generator={o.generator} "
                         f"generates nothing; drop accelerator=")
    if o.extract not in EXTRACT_MODES:
        raise UsageError(f"extract={o.extract!r}; choose from {', '.join(EXTRACT_MODES)}")
    if o.hypotheses and o.generator != "hypotheses":
        raise UsageError(f"hypotheses= is a generator of its own and generator={o.generator} another; "
                         f"drop generator= (or hypotheses=)")
    if o.data and o.testsets:
        raise UsageError("give data= or testsets=, not both (a prepared parquet can be one of the testsets=)")
    if not o.data and not o.testsets:
        raise UsageError("data= is required: the test set parquet from src.data.prepare "
                         "(e.g. data=data/flores/test.parquet), or testsets=FILE[,FILE...] for standard test sets")
    if o.testsets and o.template not in TEMPLATES:
        # with hypotheses= the prompts are built but never used: say so, or the researcher looks for a meaning
        unused = " (with hypotheses= no prompt is used: any of them scores the same)" if o.hypotheses else ""
        raise UsageError(f"testsets= needs template={'|'.join(TEMPLATES)}: the prompt template the policy was "
                         f"trained with (its data group's template), got {o.template or 'none'}{unused}")
    if o.template and not o.testsets:
        raise UsageError("template= is for testsets= only: a data= parquet carries the template it was prepared with")
    if o.run and (o.checkpoint or o.generator != "vllm"):
        raise UsageError("run= names the checkpoints to generate with; give run= or checkpoint= (or a responses/"
                         "hypotheses file), not both")
    if o.steps != "all" and not o.run:
        raise UsageError(f"steps={o.steps} picks the checkpoints of run=, which is not given; add run= or drop steps=")
    problem = steps_problem(o.steps)
    if problem:
        raise UsageError(problem)
    if o.generator == "vllm" and not o.checkpoint and not o.run:
        raise UsageError("checkpoint= is required with generator=vllm (an HF model dir or a verl "
                         "global_step_N/actor dir)")
    if o.generator == "file" and not o.responses:
        raise UsageError("generator=file needs responses=FILE.jsonl "
                         "(one {\"index\": N, \"response\": \"...\"} per row)")
    if o.generator == "hypotheses" and not o.hypotheses:
        raise UsageError("generator=hypotheses needs hypotheses=FILE (plain text, one translation a line)")
    if o.hypotheses and o.responses:
        raise UsageError("give responses= (jsonl of model answers) or hypotheses= (plain text), not both")
    if o.hypotheses and len(o.testsets) > 1:
        raise UsageError(f"hypotheses= holds one test set's translations and testsets= names {len(o.testsets)}; "
                         f"evaluate each set with its own hypotheses file")
    positive = {"max_new_tokens": o.max_new_tokens, "tp": o.tp, "batch_items": o.batch_items,
                "concurrency": o.concurrency, "samples": o.samples}
    for key, value in positive.items():
        if value < 1:
            raise UsageError(f"{key} must be a positive integer, got {value}")
    if o.limit is not None and o.limit < 1:
        raise UsageError(f"limit must be a positive integer or null, got {o.limit}")
    if o.temperature < 0 or not 0 < o.top_p <= 1 or not 0 < o.gpu_memory_utilization <= 1:
        raise UsageError("temperature must be >= 0, top_p and gpu_memory_utilization in (0, 1]")
    if o.samples > 1 and o.generator != "vllm":
        raise UsageError(f"samples={o.samples} is for generator=vllm: a responses or hypotheses file holds one "
                         f"answer per segment; drop samples=")
    if o.samples > 1 and o.temperature == 0:
        raise UsageError(f"samples={o.samples} with temperature=0: greedy decoding gives the same answer "
                         f"{o.samples} times; set temperature > 0 (a run's validation samples at its "
                         f"val_kwargs.temperature, e.g. temperature=1.0) or drop samples=")
    if o.request_timeout_s <= 0:
        raise UsageError(f"request_timeout_s must be positive, got {o.request_timeout_s}")
    if o.scorer_device not in ("auto", "cuda", "cpu") and not re.fullmatch(r"cuda:\d+", o.scorer_device):
        raise UsageError(f"scorer_device={o.scorer_device!r}; use auto, cuda, cuda:N or cpu")
    problem = resampling_problem(o.bootstrap_resamples, o.bootstrap_seed, "bootstrap_resamples", "bootstrap_seed")
    if problem:
        raise UsageError(problem)
    bootstrap = [f"{k}={getattr(o, k)}" for k in ("bootstrap_resamples", "bootstrap_seed", *BASELINE_MODEL_OPTIONS)
                 if getattr(o, k) != getattr(EvalOptions, k)]
    if bootstrap and not o.baseline:
        raise UsageError(f"{' and '.join(bootstrap)}: only used with baseline= (what to compare with: an earlier "
                         f"evaluation's dir, a model or a hypotheses file), which is not given; add baseline= or "
                         f"drop them")
    if o.baseline_extract is not None and o.baseline_extract not in EXTRACT_MODES:
        raise UsageError(f"baseline_extract={o.baseline_extract!r}; choose from {', '.join(EXTRACT_MODES)}")
    if o.baseline_template is not None and (not o.testsets or o.baseline_template not in TEMPLATES):
        raise UsageError(f"baseline_template={o.baseline_template} is the template testsets= rows are built with for "
                         f"a baseline= model: it needs testsets= and one of {'|'.join(TEMPLATES)} (a data= parquet "
                         f"carries the template it was prepared with)")
    missing = [m for m in o.trained_on if m not in o.metrics]
    if missing:
        raise UsageError(f"trained_on={','.join(o.trained_on)} names {missing[0]}, which metrics= does not compute; "
                         f"add it to metrics= or drop it from trained_on=")
    for metric in QE_METRICS:
        key = model_option(metric)
        if metric in o.metrics and not getattr(o, key):
            raise UsageError(f"{key} is empty but metrics include {metric}; drop it from metrics= or name the model")


def help_text() -> str:
    """Every option, its default and what it does (the comment above its field), for `--help`."""
    import inspect

    said: dict[str, str] = {}
    comment: list[str] = []
    for line in inspect.getsource(_Options).splitlines():
        text = line.strip()
        if text.startswith("#"):
            comment.append(text.lstrip("# "))
        elif re.match(r"^\w+\s*:", text):
            said[text.split(":", 1)[0].strip()] = " ".join(comment)
            comment = []
        else:
            comment = []
    lines = []
    for f in dataclasses.fields(EvalOptions):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        lines.append(f"  {f.name}={'null' if shown is None else shown}" + (f"    {said[f.name]}" if said.get(f.name) else ""))
    return "\n".join(lines)
