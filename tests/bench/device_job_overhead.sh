#!/usr/bin/env bash
# Issue 17's acceptance where it can be measured: the whole-job benchmark on a lent device machine
# (16 cores for 2 ranks: a core more than ranks for the runner, unlike the 2-core development
# machines), sized for one device call (~7 minutes; the device time of a session is 15 minutes).
#
# That machine is bare: python3 there holds torch, psutil, rich, numpy and nvidia-ml-py, not the
# two small pure-Python packages the runner also needs. Before the call, in the repository root:
#
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl platformdirs tomli-w
#
# then run this file through the device tool with carry [".whl"]:
#
#   bash tests/bench/device_job_overhead.sh
#
# What it runs: bench_job_overhead.py, bare torchrun vs `rankwatch run` (zero-code), 6 alternating
# rounds, both models, quiet and busy; the figures (and every raw number) go to $OUT.
# ROUNDS, STEPS, GPT_STEPS and LOADS override the sizes (a quick local check: ROUNDS=1 STEPS=300
# GPT_STEPS=20 LOADS=quiet).
set -euo pipefail
cd "$(dirname "$0")/../.."
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/rankwatch-site .whl/*.whl
  export PYTHONPATH="/tmp/rankwatch-site${PYTHONPATH:+:$PYTHONPATH}"
fi
PYTHON=${PYTHON:-python3}
OUT=${OUT:-/tmp}
"$PYTHON" -c "import torch, psutil, platformdirs, tomli_w, rich" || {
  echo "device_job_overhead: a package the runner needs is missing (see the top of this file)" >&2
  exit 2
}
nproc; uptime
PYTHONUNBUFFERED=1 "$PYTHON" tests/bench/bench_job_overhead.py --variants bare,rankwatch \
  --rounds "${ROUNDS:-6}" --steps "${STEPS:-2000}" --gpt-steps "${GPT_STEPS:-150}" --first 1000 \
  --loads "${LOADS:-quiet,busy}" --timeout 120 --json "$OUT/job-overhead.json" 2>&1 | tee "$OUT/job-overhead.txt"
