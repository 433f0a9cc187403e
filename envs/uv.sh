#!/usr/bin/env bash
# Run the project's pinned uv: `envs/uv.sh pip sync ...`, `envs/uv.sh pip compile ...`.
# The one place the uv version lives: envs/lock.sh resolves the locks with it (its output format is part
# of the lock) and `make setup` installs them with it. A uv of this version on PATH is used as is;
# otherwise it is installed once with pip into a cached tool venv ($XDG_CACHE_HOME/qe-rl/uv-<version>),
# from PyPI, or with no index at all from $WHEELHOUSE when that is set (`make wheelhouse` puts uv's wheel
# there, for a compute node without internet).
#   envs/uv.sh --path   print the uv binary (installing it if needed) instead of running it
set -euo pipefail

UV_VERSION=0.13.9
PY=${PYTHON:-python3.11}

uv_bin=$(command -v uv || true)
if [ -z "$uv_bin" ] || [ "$("$uv_bin" --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  tool_dir=${XDG_CACHE_HOME:-$HOME/.cache}/qe-rl/uv-$UV_VERSION
  if [ ! -x "$tool_dir/bin/uv" ]; then
    source=()
    [ -n "${WHEELHOUSE:-}" ] && source=(--no-index --find-links "$WHEELHOUSE")
    "$PY" -m venv "$tool_dir"
    "$tool_dir/bin/pip" install -q --disable-pip-version-check "${source[@]}" "uv==$UV_VERSION" >&2
  fi
  uv_bin=$tool_dir/bin/uv
fi

if [ "${1:-}" = --path ]; then
  echo "$uv_bin"
else
  exec "$uv_bin" "$@"
fi
