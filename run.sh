#!/usr/bin/env bash
# The main job in one command: install fdp-flower into .venv (if needed), start our own SuperLink with
# Flower's simulation runtime (a free loopback port, FLWR_HOME in a new temp dir: a SuperLink somebody
# else runs on this machine is never used), `flwr run` the app on it with one simulated SuperNode per
# client, read the status of that run id, stop every process it started and print where the results are.
#
#   ./run.sh                                              # the default federation (scenarios/flwr_default.yaml)
#   ./run.sh --run-config "num-server-rounds=5 eps=0.8"  # typed keys of [tool.flwr.app.config]
#   ./run.sh scenarios/quickstart.yaml --set algorithm.rho=0.2 --out my-results
#
# Arguments are those of `fdp-flower run --engine flower`.  Results go under ./results of the directory
# you call it from (or --out), never into the SuperLink's working directory; Flower's whole output of the
# run (with its final-results dump, which is not repeated on the terminal) is flower.log in the results.
# FDP_FLOWER_VENV=/path/to/venv: use that environment (fdp-flower's dependencies installed) instead of
# building ./.venv; nothing is installed then.  PYTHON: the interpreter that builds ./.venv.
set -euo pipefail
CALLER_DIR=$PWD
APP_DIR=$(cd "$(dirname "$0")" && pwd)
if [ -n "${FDP_FLOWER_VENV:-}" ]; then
  VENV=$FDP_FLOWER_VENV
else
  VENV=$APP_DIR/.venv
  if [ ! -x "$VENV/bin/flwr" ] || [ "$APP_DIR/pyproject.toml" -nt "$VENV/.installed" ]; then
    # pip's whole output goes to install.log; the terminal gets one line per package (a first install
    # downloads about 100 packages, Flower and Ray the largest: a few minutes)
    LOG=$VENV/install.log
    echo "run.sh: creating $VENV (${PYTHON:-python3} -m venv)"
    "${PYTHON:-python3}" -m venv "$VENV"
    : > "$LOG"
    step() {  # step <what> <pip arguments...>: run pip, show its progress, stop with its last lines if it fails
      local what=$1; shift
      echo "run.sh: $what (pip's output: $LOG)"
      if ! PYTHONUNBUFFERED=1 "$VENV/bin/pip" install --progress-bar off "$@" 2>&1 | tee -a "$LOG" \
          | awk '/^ *(Obtaining|Installing build dependencies: started|Collecting|Installing collected|Successfully installed)/ {
                   line = $0; sub(/^ +/, "", line); sub(/ \(from .*$/, "", line); print "  " substr(line, 1, 150); fflush() }'; then
        echo "run.sh: pip install $* failed; the end of $LOG:" >&2
        tail -n 20 "$LOG" >&2
        exit 1
      fi
    }
    step "upgrading pip" --upgrade pip
    step "installing fdp-flower and its dependencies (pip install -e .)" -e "$APP_DIR"  # the test extras are test.sh's
    touch "$VENV/.installed"
    echo "run.sh: installed; starting the run"
  fi
fi
# flwr starts flower-superlink / flower-superexec / flwr-simulation by name: put the venv first on PATH;
# this checkout's fdp_flower first on the import path (it is the app `flwr run` packs)
export PATH="$VENV/bin:$PATH" PYTHONPATH="$APP_DIR${PYTHONPATH:+:$PYTHONPATH}"
export FLWR_TELEMETRY_ENABLED=0
# The app's dependencies are already installed in the venv: do not let the SuperLink re-install them.
export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
cd "$CALLER_DIR"
exec "$VENV/bin/python" -m fdp_flower.cli run --engine flower "$@"
