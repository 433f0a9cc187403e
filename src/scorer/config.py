"""Scorer service configuration: dataclasses, YAML load/dump and validation.

Stdlib + PyYAML only: the train env builds these configs (it cannot import comet or torch).
Every validation problem raises ConfigError with one line naming the file and the key.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

import yaml

from .backends import BACKENDS, KINDS, KindInfo

HOST_DEFAULT = "127.0.0.1"
DEVICES_RE = re.compile(r"^(cpu|cuda|cuda:\d+)$")
DTYPES = ("fp32", "bf16", "fp16")
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
HF_PREFIX = "hf:"


# ModelSpec keys some backend reads and others refuse (each descriptor's spec_keys)
BACKEND_SPEC_KEYS = tuple(dict.fromkeys(key for d in BACKENDS.values() for key in d.spec_keys))


class ConfigError(ValueError):
    """A config problem, always one line."""


# the parts of a COMET checkpoint's path every checkpoint has (<model>/checkpoints/model.ckpt)
CHECKPOINT_PARTS = ("checkpoints", "model.ckpt", "checkpoint")


def checkpoint_name(path: str) -> str:
    """What a QE model's path names it by, wherever it lies: the dir holding checkpoints/model.ckpt
    (XCOMET-XL), a model dir's own name (metricx-24-hybrid-xl-v2p6), a hub name's last part (hf:Unbabel/XCOMET-XL);
    "" for none. How a service and a launcher on other machines tell whether they mean one checkpoint, and what
    a run's name calls it (src/plan/run_names.py)."""
    text = path[3:] if path.startswith("hf:") else path
    parts = [p for p in text.split("/") if p and p not in CHECKPOINT_PARTS]
    return parts[-1] if parts else ""


@dataclass
class ModelSpec:
    # Checkpoint file (.ckpt), a model dir holding checkpoints/model.ckpt, or "hf:Org/Name"
    # resolved from the local HF cache only (the service runs with HF_HUB_OFFLINE=1).
    path: str
    kind: str
    # Local dir (or cached hub name) for the encoder config + tokenizer, overriding the
    # checkpoint's `pretrained_model` (e.g. xlm-roberta-large) so nothing is fetched.
    encoder: Optional[str] = None
    # Score for empty / whitespace-only MT; the model is not run on it. None: the kind's worst score
    # (KindInfo.empty_mt_score in its backend's descriptor).
    empty_mt_score: Optional[float] = None
    # comet's set_decoding_threshold: a subword is an error when P(error) > threshold;
    # None keeps comet's argmax rule. Word-level kinds only.
    decoding_threshold: Optional[float] = None
    # Local dir (or cached hub name) of the tokenizer, for a backend whose descriptor reads it
    # (Descriptor.spec_keys); None: the model dir must hold one.
    tokenizer: Optional[str] = None

    @property
    def info(self) -> KindInfo:
        return KINDS[self.kind]

    @property
    def needs_ref(self) -> bool:
        return self.info.ref == "required"

    @property
    def word_level(self) -> bool:
        return self.info.word_level

    @property
    def empty_score(self) -> float:
        return self.info.empty_mt_score if self.empty_mt_score is None else self.empty_mt_score


@dataclass
class ScorerConfig:
    models: Dict[str, ModelSpec] = field(default_factory=dict)
    host: str = HOST_DEFAULT
    port: int = 0  # 0 = pick a free port; the ready file tells which
    device: str = "cpu"  # cpu | cuda | cuda:N
    dtype: str = "fp32"  # fp32 | bf16 | fp16 (autocast; bf16/fp16 are for cuda)
    batch_tokens: int = 16384  # padded tokens per batch, summed over all encoder passes
    max_batch_items: int = 256
    max_wait_ms: float = 20.0  # how long the oldest queued item may wait for company
    max_queue: int = 8192  # queued items (all models); beyond it /score answers 503
    max_body_bytes: int = 8 * 1024 * 1024
    max_items_per_request: int = 2048
    # Batches computed at once, each on its own thread (the model's weights are shared).
    # 0 = auto: 1 on a GPU, 2 on a CPU with at least 2 cores (docs/scorer-api.md)
    inference_threads: int = 0
    torch_threads: int = 0  # 0 = torch's default; on CPU divided among the inference threads
    drain_timeout_s: float = 10.0  # on SIGTERM: time to finish queued work before exiting
    # A connection must deliver a request's headers within this many seconds of opening (or of
    # its previous answer: idle kept-alive connections close after it too), and the body within
    # this many seconds of its headers; else it is closed (a late body gets 408 first), so a
    # stalled client holds a socket and its partial request only this long. Above aiohttp
    # clients' 15 s idle keep-alive (the reward workers'), so the client, not the service,
    # closes an idle pooled connection and no request is sent into a closing one.
    read_timeout_s: float = 30.0


_INT_FIELDS = {"port": (0, 65535), "batch_tokens": (1, None), "max_batch_items": (1, None),
               "max_queue": (1, None), "max_body_bytes": (1024, None),
               "max_items_per_request": (1, None), "torch_threads": (0, None),
               "inference_threads": (0, 64)}
_FLOAT_FIELDS = {"max_wait_ms": (0.0, 60_000.0), "drain_timeout_s": (0.0, 3600.0),
                 "read_timeout_s": (0.1, 3600.0)}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def _check_range(where: str, v, lo, hi) -> None:
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        bounds = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ConfigError(f"{where} must be {bounds}, got {v!r}")


def _model_from_dict(name: str, data: Any, where: str) -> ModelSpec:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping with at least `path` and `kind`")
    known = {f.name for f in dataclasses.fields(ModelSpec)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
    for key in ("path", "kind"):
        if key not in data:
            raise ConfigError(f"{where}.{key} is required")
    path, kind = data["path"], data["kind"]
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{where}.path must be a non-empty string")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind must be one of {', '.join(KINDS)}; got {kind!r}")
    backend = KINDS[kind].backend
    # a key one backend reads (its descriptor's spec_keys) is refused for another backend's kinds
    for key in BACKEND_SPEC_KEYS:
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{where}.{key} must be a non-empty string or null")
        if value is not None and key not in BACKENDS[backend].spec_keys:
            kinds = ", ".join(k for k, i in KINDS.items() if key in BACKENDS[i.backend].spec_keys)
            raise ConfigError(f"{where}.{key} only applies to kinds {kinds}, not {kind!r}")
    encoder, tokenizer = data.get("encoder"), data.get("tokenizer")
    empty = data.get("empty_mt_score")
    if empty is not None and not _is_num(empty):
        raise ConfigError(f"{where}.empty_mt_score must be a finite number, got {empty!r}")
    thr = data.get("decoding_threshold")
    if thr is not None:
        if not KINDS[kind].word_level:
            raise ConfigError(f"{where}.decoding_threshold only applies to word-level kinds "
                              f"(unified, xcomet), not {kind!r}")
        if not _is_num(thr) or not 0.0 < thr < 1.0:
            raise ConfigError(f"{where}.decoding_threshold must be in (0, 1) or null, got {thr!r}")
    return ModelSpec(path=path, kind=kind, encoder=encoder,
                     empty_mt_score=None if empty is None else float(empty),
                     decoding_threshold=None if thr is None else float(thr), tokenizer=tokenizer)


def from_dict(data: Any, source: str = "<dict>") -> ScorerConfig:
    """Validates a plain mapping (as parsed from YAML) into a ScorerConfig."""
    def err(msg: str) -> ConfigError:
        return ConfigError(f"scorer config {source}: {msg}")

    try:
        if not isinstance(data, Mapping):
            raise ConfigError("top level must be a mapping")
        known = {f.name for f in dataclasses.fields(ScorerConfig)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
        kw: Dict[str, Any] = {}
        for key, (lo, hi) in _INT_FIELDS.items():
            if key in data:
                if not _is_int(data[key]):
                    raise ConfigError(f"{key} must be an integer, got {data[key]!r}")
                _check_range(key, data[key], lo, hi)
                kw[key] = data[key]
        for key, (lo, hi) in _FLOAT_FIELDS.items():
            if key in data:
                if not _is_num(data[key]):
                    raise ConfigError(f"{key} must be a number, got {data[key]!r}")
                _check_range(key, data[key], lo, hi)
                kw[key] = float(data[key])
        if "host" in data:
            if not isinstance(data["host"], str) or not data["host"].strip():
                raise ConfigError("host must be a non-empty string")
            kw["host"] = data["host"]
        if "device" in data:
            if not isinstance(data["device"], str) or not DEVICES_RE.match(data["device"]):
                raise ConfigError(f"device must be cpu, cuda or cuda:N, got {data['device']!r}")
            kw["device"] = data["device"]
        if "dtype" in data:
            if data["dtype"] not in DTYPES:
                raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {data['dtype']!r}")
            kw["dtype"] = data["dtype"]
        models = data.get("models")
        if not isinstance(models, Mapping) or not models:
            raise ConfigError("models must be a non-empty mapping of name -> {path, kind, ...}")
        kw["models"] = {}
        for name, spec in models.items():
            if not isinstance(name, str) or not MODEL_NAME_RE.match(name):
                raise ConfigError(f"model name {name!r} must match {MODEL_NAME_RE.pattern}")
            kw["models"][name] = _model_from_dict(name, spec, f"models.{name}")
        return ScorerConfig(**kw)
    except ConfigError as e:
        raise err(str(e)) from None


def to_dict(cfg: ScorerConfig) -> Dict[str, Any]:
    d = dataclasses.asdict(cfg)
    # Key order: models last, so the service knobs are visible first in the dumped file.
    models = d.pop("models")
    d["models"] = models
    return d


def load_config(path: "str | os.PathLike[str]") -> ScorerConfig:
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"scorer config {path}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        first = str(e).strip().splitlines()
        raise ConfigError(f"scorer config {path}: invalid YAML: {' '.join(first)}") from None
    return from_dict(data, source=path)


def dump_config(cfg: ScorerConfig, path: "str | os.PathLike[str]") -> None:
    """Writes `cfg` as YAML after validating it (a config that dumps also loads)."""
    data = to_dict(cfg)
    from_dict(data, source=os.fspath(path))
    tmp = f"{os.fspath(path)}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False, allow_unicode=True)
    os.replace(tmp, path)
