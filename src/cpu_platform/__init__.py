"""CPU platform: verl 0.9.1's own trainer with vLLM's CPU build on a machine without a GPU (accelerator=cpu; docs/cpu-loop.md).
May import: src.verl_fixes (its after-import hook; verl imports `register` by name in every process of a CPU run, a GPU node never loads it).
"""
