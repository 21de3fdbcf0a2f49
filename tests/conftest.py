"""Shared by every test tier. Its presence puts ``tests/`` on ``sys.path`` (pytest's default
import mode), so tests import the repository-only fault kit as ``faults_kit``."""
