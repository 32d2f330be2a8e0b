"""Griffe extension for the ``di`` API reference (configured in ``mkdocs.yml``).

``di``'s docstrings head their examples ``Example:``. Griffe's Google-style parser
reads only ``Examples:`` as an examples section (it renders ``Example:`` as an
admonition of plain text, so the ``>>>`` lines lose their code formatting); this
extension renames the heading before the docstrings are parsed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE_HEADING = re.compile(r"^(?P<indent>[ \t]*)Example:[ \t]*$", flags=re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Read ``Example:`` as the Google-style ``Examples:`` section."""

    def on_object(self, *, obj: Any, **kwargs: Any) -> None:
        """Rename the heading in ``obj``'s docstring, if it has one."""
        docstring = obj.docstring
        if docstring is not None and "Example:" in docstring.value:
            docstring.value = _EXAMPLE_HEADING.sub(r"\g<indent>Examples:", docstring.value)
