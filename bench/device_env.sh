# Sourced by the one-call device scripts (bench/gpu_session.sh, tools/dev/schedule_sweep.sh),
# from the repo root on the GPU machine: lark and pyelftools from the wheels carried in .whl/, kdsl from the
# tree, logs under $OUT, and the device's name in $OUT/device.txt.
OUT=${OUT:-/tmp/kdsl-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KDSL_CACHE_DIR=/tmp/kdsl-cache
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl 2>/dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/device.txt"
