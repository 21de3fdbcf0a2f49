from __future__ import annotations

from redistest import durable_redis, redis_url

__all__ = ["durable_redis", "redis_url"]
