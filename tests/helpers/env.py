"""The environment a launch that stands for a fresh clone on a new machine must not inherit."""

# user-level locations a fresh clone must not depend on (src/config reads them as path defaults,
# Hugging Face its caches) and the GPUs of the machine running the tests
LEAKY_ENV = ("QE_RL_MODELS", "QE_RL_DATA", "QE_RL_RESULTS", "HF_HOME", "HF_HUB_CACHE", "CUDA_VISIBLE_DEVICES")
