#!/usr/bin/env bash
# The GPU check: what Rankwatch claims about a GPU job, seen on one, in one device call
# (at most ~7 minutes with the machine's start, on 1 GPU and 16 cores). Every raw number is
# printed and kept under $OUT; the figures go to tests/bench/PERFORMANCE.md.
#
# That machine is bare: python3 there holds torch, psutil, rich, numpy and nvidia-ml-py, not the
# two small pure-Python packages the runner also needs. Before the call, in the repository root:
#
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl platformdirs tomli-w
#
# then run this file through the device tool with carry [".whl"]:
#
#   bash tests/bench/gpu_check.sh
#
# What it runs, each part on its own (one failing does not stop the others):
#   1. rankwatch doctor;
#   2. tests/bench/gpu_phases_inprocess.py: the phases on the GPU's clock in one process, that the
#      instrumentation adds no synchronising CUDA call (torch.profiler, with and without the hooks),
#      the cost of a mark, a step GradScaler skipped, the allocator's memory;
#   3. tests/bench/gpu_job_check.py: a 1-rank NCCL job under `rankwatch run`, its losses compared
#      exactly with the script's, its phases adding up, the verdict, `rankwatch gpus` meanwhile;
#   4. bench_job_overhead.py --models gpu: bare torchrun vs zero-code vs --no-instrument,
#      ROUNDS (6) alternating rounds, quiet and with every core busy;
#   5. tests/bench/gpu_instrument_ab.py: the instrumentation on and off (and parts of it) every 80
#      steps in one process, quiet and busy (~4 minutes; runs before 4 when both are asked).
# PARTS picks them (default 1,2,3,4). The third lease found the instrumentation alone costs nothing
# measurable in one process while whole runs were 8-12 % slower than bare (bare with 1 OpenMP
# thread, Rankwatch with 16 until the runner kept an exported OMP_NUM_THREADS), so the next runs
#   PARTS=5 bash tests/bench/gpu_check.sh      # off, full, and full with the real reporter thread
#   PARTS=4 VARIANTS=bare,rankwatch OVERHEAD_DEADLINE=300 OVERHEAD_TIMEOUT=360 bash tests/bench/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/rankwatch-site .whl/*.whl
  export PYTHONPATH="/tmp/rankwatch-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD:$PWD/runner/worker_path${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export RANKWATCH_HOME=/tmp/rankwatch-gpu-check
OUT=${OUT:-/tmp}
PARTS=",${PARTS:-1,2,3,4},"   # which parts to run, e.g. PARTS=1,3,4
status=0
nproc; uptime; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
[[ $PARTS == *,1,* ]] && { echo "== 1. doctor"; timeout 60 python3 -m runner doctor 2>&1 | tee "$OUT/doctor.txt" || status=1; }
[[ $PARTS == *,2,* ]] && { echo "== 2. in-process phases"
timeout 150 python3 tests/bench/gpu_phases_inprocess.py --json "$OUT/inprocess.json" 2>&1 \
  | tee "$OUT/inprocess.txt" || status=1; }
[[ $PARTS == *,3,* ]] && { echo "== 3. a job under rankwatch run"
timeout 150 python3 tests/bench/gpu_job_check.py --steps "${STEPS:-300}" --json "$OUT/job.json" 2>&1 \
  | tee "$OUT/job.txt" || status=1; }
[[ $PARTS == *,5,* ]] && { echo "== 5. what each part of the instrumentation costs a GPU step, in one process"
timeout "${AB_TIMEOUT:-300}" python3 tests/bench/gpu_instrument_ab.py --modes "${AB_MODES:-off,full,reporter}" \
  --cycles "${AB_CYCLES:-12}" --busy --json "$OUT/ab.json" 2>&1 | tee "$OUT/ab.txt" || status=1; }
[[ $PARTS == *,4,* ]] && { echo "== 4. overhead (loads alternate round by round; no run starts after OVERHEAD_DEADLINE s)"
timeout "${OVERHEAD_TIMEOUT:-330}" python3 tests/bench/bench_job_overhead.py --models gpu --nproc 1 \
  --variants "${VARIANTS:-bare,rankwatch,no-instrument}" --rounds "${ROUNDS:-6}" --deadline "${OVERHEAD_DEADLINE:-inf}" --gpu-steps "${GPU_STEPS:-300}" \
  --first 150 --warmup 50 --loads "${LOADS:-quiet,busy}" --timeout 90 --json "$OUT/overhead.json" 2>&1 \
  | tee "$OUT/overhead.txt" || status=1; }
exit $status
