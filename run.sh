#!/usr/bin/env bash
# The main job in one command: install fdp-flower into .venv (if needed) and run the default
# FDP-ADMM federation on Flower's simulation engine (`flwr run .`), then check the run's status.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/flwr ] || [ pyproject.toml -nt .venv/.installed ]; then
  "$PY" -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet -e ".[test]"
  touch .venv/.installed
fi
# flwr starts flower-superlink / flower-superexec / flwr-simulation by name: put .venv first on PATH
export PATH="$PWD/.venv/bin:$PATH"
export FLWR_TELEMETRY_ENABLED=0
# The app's dependencies are already installed in .venv: do not let the SuperLink re-install them.
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
flwr run . --stream "$@"
# `flwr run --stream` exits 0 even when the ServerApp fails: read the run's status.
status=$(flwr ls --format json | .venv/bin/python -c \
  'import json,sys; r=json.load(sys.stdin)["runs"][0]; print(r["status"], "|", r["status-details"])')
echo "run status: $status"
case "$status" in finished:completed*) exit 0 ;; *) exit 1 ;; esac
