"""``open_store`` splits a plain store URL itself (no ``urllib.parse`` import on a resume's
path); it must split every URL exactly as ``urllib.parse.urlsplit`` does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from hypothesis import example, given, settings
from hypothesis import strategies as st

from unbroken.stores import open_store, split_url

# Characters urlsplit treats specially, mixed with ordinary ones, so most examples are near the edge.
_PIECES = st.sampled_from([*"sqlitefm:/?#[]@%.-_~+ \t\r\n\x00\x1fé\\;=&AZ09", "://", "///", "[::1]"])
_RESTS = st.lists(_PIECES, max_size=24).map("".join)


@settings(max_examples=2000, deadline=None)
@given(scheme=st.sampled_from(["sqlite", "file", "SQLite", "s3", "sq1", "x+y", "", "é"]), rest=_RESTS)
@example(scheme="sqlite", rest="/" + "/tmp/runs.db")
@example(scheme="sqlite", rest="host/runs.db")
@example(scheme="sqlite", rest="")
@example(scheme="file", rest="localhost/srv/runs")
@example(scheme="sqlite", rest="/runs.db?durability=normal")
@example(scheme="sqlite", rest=" /runs.db")
def test_split_url_agrees_with_urlsplit(scheme: str, rest: str) -> None:
    url = f"{scheme}://{rest}"
    try:
        parts = urlsplit(url)
    except ValueError:  # (a bracketed host that does not read: urlsplit refuses, and so must we)
        try:
            split_url(url)
        except ValueError:
            return
        raise AssertionError(f"split_url accepted {url!r}, which urlsplit refuses") from None
    assert split_url(url) == (parts.netloc, parts.path, parts.query)


def test_opening_a_plain_sqlite_url_imports_no_url_parser(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    open_store(url).close()  # (creating the file reads the schema through importlib.resources, which imports pathlib)
    code = (
        "import sys\n"
        "from unbroken import open_store\n"
        "open_store(sys.argv[1]).close()\n"
        "print(','.join(m for m in ('urllib.parse', 'ipaddress', 'pathlib') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
