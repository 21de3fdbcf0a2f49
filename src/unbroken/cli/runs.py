"""Commands about runs: runs, show, history, resume, export, migrate, demo."""

from __future__ import annotations
