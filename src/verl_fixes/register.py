"""Imported by verl in every process of a run (VERL_USE_EXTERNAL_MODULES, read by verl/__init__.py
import_external_libs; src/node/environment.py run_env puts REGISTER_MODULE first in it on every accelerator): each
fix applied."""
from __future__ import annotations

from . import weight_sync_socket

APPLIED = weight_sync_socket.apply()
