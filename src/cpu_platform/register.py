"""Imported by verl in every process of a CPU run (VERL_USE_EXTERNAL_MODULES=src.cpu_platform.register,
read by verl/__init__.py, import_external_libs; set by conf/accelerator/cpu.yaml): the CPU platform is
registered in verl's registry and the shims are applied. Selected by VERL_PLATFORM=cpu
(verl/plugin/platform/platform_manager.py, _detect_platform_name)."""
from __future__ import annotations

from . import platform, shims

APPLIED = shims.apply()
PLATFORM = platform.PlatformCPU
