"""The environment a launch that stands for a fresh clone must not inherit from the machine running the
tests (tests/launcher/test_smoke_tiny.py's fresh-clone dry run, tests/loop/'s real launches)."""

# user-level locations a fresh clone must not depend on (the QE_RL_* path defaults of conf/paths, Hugging
# Face's caches) and a GPU pretence (CUDA_VISIBLE_DEVICES) the CPU launches must not see
LEAKY_ENV = ("QE_RL_MODELS", "QE_RL_DATA", "QE_RL_RESULTS", "HF_HOME", "HF_HUB_CACHE", "CUDA_VISIBLE_DEVICES")
