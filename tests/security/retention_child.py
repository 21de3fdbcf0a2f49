"""Applies a retention policy to the store named on the command line (crash tests arm
``UNBROKEN_CRASH_AT`` and this process SIGKILLs itself at a retention crash point)."""

from __future__ import annotations

import sys
import time

from unbroken import open_store, ops

if __name__ == "__main__":
    url, days_ahead, ledger_days = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    with open_store(url) as store:
        policy = ops.Retention(runs_days=30, ledger_days=None if ledger_days == "-" else float(ledger_days))
        ops.apply_retention(store, policy, now=time.time() + days_ahead * ops.DAY)
