"""``python -m faults_kit powerloss-child JSON``: the power-loss recording child."""

from __future__ import annotations

import sys

from ._power_loss_child import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
