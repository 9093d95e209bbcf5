"""``python -m fdp_flower.cli``: the ``fdp-flower`` command without its console script (used by run.sh)."""
import sys

from fdp_flower.cli import main

sys.exit(main())
