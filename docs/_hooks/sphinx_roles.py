"""Griffe extension (mkdocs.yml: mkdocstrings' ``extensions``): the docstrings' Sphinx roles as
links on the API page.

The package's docstrings cross-reference with Sphinx roles (``:func:`~ckptsel.records.load```,
``:class:`Selection```); mkdocstrings renders docstrings as Markdown and would print the role
as it is. Before any docstring is rendered, each role becomes an optional cross-reference,
``<autoref identifier="FULL.PATH" optional><code>shown</code></autoref>``: a link where the
target is on the site, plain code where it is not (a private module, say), never a warning.
``~a.b.c`` shows ``c``; ``title <a.b.c>`` shows ``title``; ``!name`` never links; a relative
name is resolved in the documented object's scope (its module's imports included).
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|exc|obj|const|type):`(?P<body>[^`]+)`")
TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")


def target_of(obj: griffe.Object, name: str) -> str:
    """The full path of ``name`` as written in ``obj``'s docstring (itself when unresolvable)."""
    name = name.lstrip(".")
    if name.startswith("ckptsel."):
        return name
    head, _, rest = name.partition(".")
    try:
        full = obj.resolve(head)
    except Exception:  # griffe's NameResolutionError, or an alias it cannot follow
        return name
    return f"{full}.{rest}" if rest else full


def convert(text: str, obj: griffe.Object) -> str:
    """``text`` with every Sphinx role replaced by an optional autorefs cross-reference."""

    def one(match: re.Match) -> str:
        body = match["body"].strip()
        titled = TITLED.match(body)
        if titled:
            shown, name = titled["title"], titled["target"].strip()
        else:
            name = body.lstrip("~!")
            shown = name.rsplit(".", 1)[-1] if body.startswith("~") else name.lstrip(".")
        code = f"<code>{html.escape(shown)}</code>"
        if body.startswith("!"):
            return code
        return f'<autoref identifier="{html.escape(target_of(obj, name))}" optional>{code}</autoref>'

    return ROLE.sub(one, text)


def _walk(obj: griffe.Object) -> Any:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)


class SphinxRoles(griffe.Extension):
    """Rewrite the Sphinx roles of every docstring of a loaded package (see the module doc)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _walk(pkg):
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = convert(obj.docstring.value, obj)
