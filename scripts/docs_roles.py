"""A griffe extension for the documentation site: the package's docstrings name other objects with Sphinx's roles
(``:class:`~dial_runtime.Conversation```, ``:func:`replay```), which Markdown would show as written. Each becomes
an autorefs link, marked optional so that a name the reference does not document shows as code, not as an error."""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

ROLE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj):`(?P<tilde>~?)(?P<target>[^`]+)`")


def linked(match: re.Match[str]) -> str:
    target = match["target"].strip().lstrip(".")
    shown = target.rsplit(".", 1)[-1] if match["tilde"] else target
    return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'


class SphinxRoles(Extension):
    """Rewrites Sphinx cross-reference roles in every docstring into optional autorefs links."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(linked, obj.docstring.value)
