from __future__ import annotations

from pgtest import outage, pg_schema, pg_store, pg_url

__all__ = ["outage", "pg_schema", "pg_store", "pg_url"]
