"""What a VM query may be: checked before any ZVM is asked.

A value that can name no VM would otherwise go to every ZVM as a ``vmName=`` filter and come back as "no
protected VM matches", hiding the caller's mistake: control, format and separator characters (a bidirectional
override makes a name read as another), a ``..`` path segment, or a list (one guard is about one VM; a VM whose
name holds a comma is named by its vmIdentifier).
"""

from __future__ import annotations

import re
import unicodedata

from rewind.lib.errors import ApplicationError

MAX_QUERY_LENGTH = 255
_NEVER_IN_A_NAME = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_TRAVERSAL = re.compile(r"(^|[/\\])\.\.([/\\]|$)")
_LIST = re.compile(r"[,;]")


class VmQueryError(ApplicationError):
    pass


def _odd_character(text: str) -> str | None:
    for ch in text:
        if unicodedata.category(ch) in _NEVER_IN_A_NAME:
            return f"U+{ord(ch):04X}"
    return None


def check_vm_query(vm: str) -> str:
    """``vm`` stripped of surrounding white space; raises ``VmQueryError`` saying why it can name no VM."""
    query = vm.strip()
    if not query:
        raise VmQueryError("give a VM name, hostname or vmIdentifier")
    if len(query) > MAX_QUERY_LENGTH:
        raise VmQueryError(f"that VM name is too long ({len(query)} characters; at most {MAX_QUERY_LENGTH})")
    odd = _odd_character(query)
    if odd is not None:
        raise VmQueryError(
            f"a VM name holds no control, format or separator characters (found {odd}); nothing was asked"
        )
    if _TRAVERSAL.search(query):
        raise VmQueryError("a VM name is not a path ('..' found); nothing was asked")
    if _LIST.search(query):
        raise VmQueryError(
            "name one VM, not a list (',' or ';' found): guard or recover each VM separately; a VM whose name "
            "holds a comma is named by its vmIdentifier"
        )
    return query
