"""MkDocs hook: a page that shows a raw Sphinx role (``:func:`x``` printed as it is, because a
docstring's role was not converted by docs/_hooks/sphinx_roles.py) fails the strict build."""

from __future__ import annotations

import logging
import re

log = logging.getLogger("mkdocs.hooks.raw_roles")
RAW = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|exc|obj|const|type):<code>")


def on_page_content(html: str, page, config, files) -> str:
    found = RAW.findall(html)
    if found:
        log.warning(
            "%s shows %d raw Sphinx role(s), e.g. %r: convert them (docs/_hooks/sphinx_roles.py)", page.file.src_uri, len(found), found[0]
        )
    return html
