#!/usr/bin/env bash
# Regenerate the locks in envs/lock/ from envs/*.in (registry metadata only: no GPU, no multi-GB download).
#   envs/lock.sh            re-resolve; versions already in a lock are kept while the .in files allow them
#   envs/lock.sh --upgrade  newest versions the .in files allow
#   envs/lock.sh --check    CI: resolve into a temp folder and fail if it differs from the committed locks
# GPU locks first: each CPU lock is resolved under its GPU lock's pins (envs/check_locks.py
# shared-constraints), so shared packages get the same version on both platforms.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_VERSION=3.11                 # the conda env files and `make setup` use the same Python
PLATFORM=x86_64-manylinux_2_28      # GPU nodes and CPU machines alike
UV_VERSION=0.13.9                   # uv's output format is part of the lock: pin it
TORCH_CPU_WHEELS=${TORCH_CPU_WHEELS:-/opt/wheels}   # folder or index holding torch 2.13.0+cpu
PY=${PYTHON:-python3.11}

mode=${1:-}
case "$mode" in ""|--upgrade|--check) ;; *) echo "usage: envs/lock.sh [--upgrade|--check]" >&2; exit 2;; esac

uv_bin=$(command -v uv || true)
if [ -z "$uv_bin" ] || [ "$("$uv_bin" --version | cut -d' ' -f2)" != "$UV_VERSION" ]; then
  tool_dir=${XDG_CACHE_HOME:-$HOME/.cache}/qe-rl/uv-$UV_VERSION
  if [ ! -x "$tool_dir/bin/uv" ]; then
    "$PY" -m venv "$tool_dir"
    "$tool_dir/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION"
  fi
  uv_bin=$tool_dir/bin/uv
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# uv keeps the versions of an existing output file: start from the committed locks
cp envs/lock/*.txt "$work/" 2>/dev/null || true

compile() {  # <env> <platform> [extra uv args]
  local env=$1 platform=$2; shift 2
  local extra=()
  [ "$mode" = --upgrade ] && extra+=(--upgrade)
  "$uv_bin" pip compile "envs/$env-$platform.in" "$@" "${extra[@]}" --quiet \
    --python-platform "$PLATFORM" --python-version "$PYTHON_VERSION" \
    --custom-compile-command "envs/lock.sh" -o "$work/$env-$platform.txt"
  # every CPU pin is "via" the shared constraints (a temp path): the header of the .in says so once
  sed -i "\\|^    #   -c $work/$env-shared.txt\$|d" "$work/$env-$platform.txt"
}

for env in train scorer; do
  compile "$env" gpu
  "$PY" envs/check_locks.py shared-constraints "$work/$env-gpu.txt" > "$work/$env-shared.txt"
  compile "$env" cpu -c "$work/$env-shared.txt" --find-links "$TORCH_CPU_WHEELS"
done
# environment.yml installs train-gpu-env.txt, then flash-attn builds against that torch (check_locks.py)
"$PY" envs/check_locks.py split-built "$work/train-gpu.txt" "$work/train-gpu-env.txt" "$work/train-gpu-built.txt"

if [ "$mode" = --check ]; then
  status=0
  for f in train-gpu train-gpu-env train-gpu-built train-cpu scorer-gpu scorer-cpu; do
    diff -u "envs/lock/$f.txt" "$work/$f.txt" || status=1
  done
  [ $status = 0 ] && echo "locks: all 4 resolve for their platform and match envs/lock/" \
    || echo "locks: envs/lock/ is stale or no longer resolves; run envs/lock.sh and commit the result" >&2
  exit $status
fi
for f in train-gpu train-gpu-env train-gpu-built train-cpu scorer-gpu scorer-cpu; do cp "$work/$f.txt" "envs/lock/$f.txt"; done
"$PY" envs/check_locks.py check
echo "locks written to envs/lock/"
