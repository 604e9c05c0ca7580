#!/bin/sh
# The first minutes on a real card (bench/first_gpu_run.py says what each check is): one line per check with its
# figure, exit 1 on any failure, ended after 570 s whatever happens. PYTHON: the interpreter with Paddle (a GPU build).
#   bench/first_gpu_run.sh [--device gpu:N]
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root" || exit 2
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec timeout --kill-after=15 570 "${PYTHON:-python}" bench/first_gpu_run.py "$@"
