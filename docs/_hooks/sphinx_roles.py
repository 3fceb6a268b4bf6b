"""MkDocs hook: render the Sphinx cross-reference roles found in docstrings.

The library's docstrings use roles such as ``:class:`~aiostream_kafka.config.ClientConfig```
and ``:meth:`stream```. mkdocstrings renders them as the role name followed by a code
span; this hook drops the role name and, for ``~a.b.C``, keeps only the last component,
as Sphinx would display it.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|meth|func|attr|exc|mod|data|obj):<code>(~?)([^<]*)</code>")


def _replace(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    if tilde:
        target = target.rsplit(".", 1)[-1]
    return f"<code>{target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_replace, html)
