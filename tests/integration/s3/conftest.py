from __future__ import annotations

from s3test import moto_subprocess, s3_url

__all__ = ["moto_subprocess", "s3_url"]
