#!/usr/bin/env bash
# Trains recipes side by side on one GPU: one `train_jax.py sweep` process per recipes file,
# each stopped after SECONDS, its log and results JSON written to OUTPUT_DIR as they come.
#
#   bash benchmarks/gpu/sweep_side_by_side.sh SECONDS OUTPUT_DIR DATA_DIR RECIPES.json [RECIPES.json ...]
#
# DATA_DIR is a folder written by export_token_ids.py. Run from the repository's root. If a
# folder .whl is there, its wheels are installed first, under /tmp/site: the GPU machines
# this project is lent have JAX but not Keras (/work/.library/device's README says how to
# download them). Processes share the GPU by time-slicing; each compiles its own programs
# on the host's cores meanwhile (docs/lab-notebook/
# 2026-11-26-tiny-recipe-eight-seeds-at-a-time-on-a-gpu.md).
set -uo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 SECONDS OUTPUT_DIR DATA_DIR RECIPES.json [RECIPES.json ...]" >&2
  exit 2
fi
seconds=$1 output=$2 data=$3
shift 3
if ! [[ $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "SECONDS must be a whole number of seconds, got '$seconds'" >&2
  exit 2
fi
for recipes in "$@"; do
  [ -f "$recipes" ] || { echo "no recipes file $recipes" >&2; exit 2; }
done
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# Each process may take at most this share of the GPU's memory (JAX allocates on demand).
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.3}
mkdir -p "$output"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
pids=()
for recipes in "$@"; do
  name=$(basename "$recipes" .json)
  timeout "$seconds" python3 benchmarks/gpu/train_jax.py sweep --data "$data" --recipes @"$recipes" \
    --output "$output/$name.json" >"$output/$name.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=$?  # 124: stopped at SECONDS; the JSON holds every evaluation so far
done
tail -n 5 "$output"/*.log
exit $status
