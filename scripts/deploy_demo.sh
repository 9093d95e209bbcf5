#!/usr/bin/env bash
# One-command local deployment demo: partitions a data set into 3 node files, starts a real
# SuperLink and 3 SuperNodes on 127.0.0.1 (insecure: loopback only), runs a short FDP-ADMM
# federation, prints the result and stops every process it started (by process group), also on
# failure, Ctrl-C or SIGTERM (see fdp_flower/engines/flower.py).
#
#   scripts/deploy_demo.sh                                  # paper design, fixed cosine basis
#   scripts/deploy_demo.sh --scenario scenarios/deploy_federated_fpca.yaml
#   scripts/deploy_demo.sh --dataset tecator --scenario scenarios/tecator.yaml --site-config 'allow-nonprivate=true'
#   scripts/deploy_demo.sh --site-config 'max-eps=0.6'      # every site's privacy policy (docs/deployment.md)
#   PYTHON=/path/to/venv/bin/python scripts/deploy_demo.sh  # default: .venv/bin/python, else python3
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
exec "$PYTHON" -W "ignore::DeprecationWarning" -m fdp_flower.engines.flower "$@"
