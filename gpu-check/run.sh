#!/bin/sh
# The minisci GPU check on an offline node: bash gpu-check/run.sh  (extra arguments go to gpu_check.py)
# Unpacks the source and data into a fresh work directory, installs the wheels there (--no-index),
# runs the check and writes gpu_check.json into the current directory.
set -eu
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1  # nothing may reach for the network
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
LOG="$PWD/gpu_check.json"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/minisci-gpu-check.XXXXXX")
tar -xzf "$HERE/minisci.tar.gz" -C "$WORK"
tar -xzf "$HERE/data.tar.gz" -C "$WORK"
tar -xzf "$HERE/model.tar.gz" -C "$WORK"
"$PYTHON" -m pip install --quiet --no-index --no-deps --target "$WORK/site" "$HERE"/wheels/*.whl
export PYTHONPATH="$WORK/src:$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
cd "$WORK"
exec "$PYTHON" benchmarks/gpu_check.py "$HERE" --data "$WORK/data" --work "$WORK/run" --log "$LOG" "$@"
