"""The one escape for text ckptsel puts into the Markdown it writes (tables, audit findings,
lineage): names come from users' files (tasks, trajectories, pools, paths), and a renderer
must show them as text — never as HTML, a link, a code span or a broken table."""

from __future__ import annotations

_ESCAPES = (
    ("&", "&amp;"),  # first: the entities below stay as written
    ("<", "&lt;"),  # no HTML, comments or autolinks
    (">", "&gt;"),
    ("\\", "\\\\"),  # before the backslash escapes below
    ("|", "\\|"),  # GFM: a pipe inside a table cell
    ("`", "\\`"),  # no code span
    ("](", "\\]("),  # no inline link or image (reference links cannot start inside a line)
    ("\r\n", " "),
    ("\n", " "),
    ("\r", " "),
)


def md_cell(value: object) -> str:
    """``value`` as text that renders as itself in a Markdown table cell or a line of prose:
    ``& < >`` as entities, ``\\ | ` ](`` backslash-escaped, line breaks as spaces. Intervals
    like ``[-0.3, 2.1]`` and plain names are unchanged."""
    text = str(value)
    for raw, escaped in _ESCAPES:
        text = text.replace(raw, escaped)
    return text
