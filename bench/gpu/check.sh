#!/usr/bin/env bash
# The trainer on a lent GPU in one call: what the machine lacks installed from the checkout, the
# `gpu`-marked tests, bench/trainer.py at the 0.9B and 153M shapes in bfloat16 and float32 (fsdp
# against the plain loop, MFU, peak memory, and the time to gather and write the weights a push
# hands vLLM), fsdp's shared prefixes against none at the 153M shape, and a Markdown table of it
# all for docs/trainer.md. Everything goes under $OUT (seven files). Each part has its own time
# limit, so one that hangs does not cost the others.
#
#   bash bench/gpu/prepare.sh                                   # here, once, with network (.gpu/whl)
#   run(command="bash bench/gpu/check.sh", carry=[".gpu"], timeout_s=600)   # the device call
#   PYTHON=.venv/bin/python bash bench/gpu/check.sh --quick    # on CPU: tiny shapes, GPU tests skip
#   bash bench/gpu/check.sh tests 153M                           # only some parts: tests, 0.9B, 153M, prefix
# All three parts took 4.6 minutes on an H200 (plus about a minute to start the machine).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu_check}
PY=${PYTHON:-python3}
GPU_DIR=${GPU_DIR:-.gpu}
QUICK=0
[ "${1:-}" = "--quick" ] && { QUICK=1; shift; }
PARTS=${*:-0.9B tests 153M prefix}
want() { [[ " $PARTS " == *" $1 "* ]] || [ $QUICK = 1 ]; }
mkdir -p "$OUT"
started=$(date +%s)
note() { echo "[$(( $(date +%s) - started ))s] $*" | tee -a "$OUT/env.txt"; }

{ nvidia-smi 2>&1 || echo "no nvidia-smi"; "$PY" --version; } > "$OUT/env.txt"

# 1. What the image lacks: the wheels prepare.sh carried, ray's import-only stand-in (verl imports ray
#    at import time; the in-process trainer never starts it), and the project's sources as `parity`.
if ! "$PY" -c "import verl" 2>/dev/null; then
  [ -d "$GPU_DIR/whl" ] || { note "no $GPU_DIR/whl: run bench/gpu/prepare.sh here and carry $GPU_DIR"; exit 3; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --ignore-requires-python \
    --upgrade --target /tmp/gpu_site "$GPU_DIR"/whl/*.whl > "$OUT/pip.log" 2>&1 || { note "pip failed"; tail -5 "$OUT/pip.log"; exit 3; }
  export PYTHONPATH=/tmp/gpu_site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! "$PY" -c "import ray" 2>/dev/null; then
  export PYTHONPATH=$PWD/bench/gpu/ray_standin:$PYTHONPATH
fi
if ! "$PY" -c "import parity.services.trainer" 2>/dev/null; then
  rm -rf /tmp/gpu_src && mkdir -p /tmp/gpu_src && cp -r sdk/parity /tmp/gpu_src/parity && cp -r services /tmp/gpu_src/parity/services
  export PYTHONPATH=/tmp/gpu_src:$PYTHONPATH
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")' 2>&1 | tee -a "$OUT/env.txt"
note "installed"

# 2. The bench's shapes: 32 rows of 1,024-2,048 tokens (about 50,000 a step), both dtypes, fsdp against
#    the plain loop; the 0.9B rows' save time is the trainer's half of that model's weight push.
bench() {  # NAME LIMIT_S ARGS...
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$PY" bench/trainer.py "$@" --dtype bfloat16,float32 --profile > "$OUT/bench-$name.log" 2>&1
  note "bench $name: exit $?"
}
if [ $QUICK = 1 ]; then
  bench tiny 300 --hidden 128 --layers 2 --heads 2 --rows 8 --length 128 --steps 2 --warmup 1
elif want 0.9B; then
  bench 0.9B 280 --hidden 2048 --layers 24 --heads 16 --rows 32 --length 2048 --steps 3 --warmup 1
fi

# 3. The gpu-marked tests (they skip without CUDA) and the CPU-decidable defaults beside them.
if want tests; then
  timeout 170 "$PY" -m pytest -q -p no:cacheprovider -o addopts="--strict-markers" \
    tests/unit/trainer/test_fsdp_on_gpu.py tests/unit/trainer/test_compute_defaults.py \
    tests/unit/trainer/backends/test_fsdp_shared_prefixes.py > "$OUT/tests.log" 2>&1
  note "tests: exit $? ($(tail -1 "$OUT/tests.log"))"
fi

if [ $QUICK = 0 ] && want 153M; then
  bench 153M 130 --hidden 1024 --layers 16 --heads 16 --rows 32 --length 2048 --steps 3 --warmup 1
fi

# 4. Shared prefixes in fsdp: group sizes 8 and 16, prompt:reply 1:1, 10:1 and 50:1, replies of 256 tokens.
if want prefix; then
  shape=(--hidden 1024 --layers 16 --heads 16 --reply 256 --steps 2 --warmup 1)
  [ $QUICK = 1 ] && shape=(--hidden 128 --layers 2 --heads 2 --reply 16 --steps 1 --warmup 1)
  timeout 150 "$PY" bench/trainer.py --prefix-rows --backends fsdp --dtype bfloat16 "${shape[@]}" > "$OUT/prefix.log" 2>&1
  note "prefix: exit $?"
  tail -9 "$OUT/prefix.log" | head -8
fi

# 5. One table for docs/trainer.md, of the parts run.
shopt -s nullglob
logs=("$OUT"/bench-*.log)
if [ ${#logs[@]} -gt 0 ]; then
  "$PY" bench/gpu/summarize.py "${logs[@]}" > "$OUT/gpu_check.md" 2>>"$OUT/env.txt"
  cat "$OUT/gpu_check.md"
fi
note "done"
