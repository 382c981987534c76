"""Names an edit leaves undefined: the feedback for a Python result that parses and keeps
what it must but uses a name it never defines or imports (a ``logger`` the model calls and
never creates: a ``NameError`` the first time that line runs).

Contract: :func:`new_undefined_names` runs pyflakes' undefined-name check (its scoping rules,
builtins and ``__all__`` handling; the well-kept tool for exactly this) on the file before
and after the edit and returns the names only the edited file leaves undefined, each with
the first line that uses it. Languages other than Python, and files that do not parse, give
none. It never refuses a result: a result with such names is asked for again with them as
the reason (``--attempts``), and written, with a warning, if no attempt does better.
"""

from __future__ import annotations

MAX_LISTED = 5  # names named in the feedback and the warning


def new_undefined_names(before: str, after: str, lang: str | None) -> list[tuple[int, str]]:
    """``(line, name)`` for each name ``after`` uses undefined that ``before`` did not leave
    undefined, in order of first use; ``[]`` outside Python or when either does not parse."""
    if lang != "python":
        return []
    old, new = _undefined(before), _undefined(after)
    if old is None or new is None:
        return []
    known = {name for _, name in old}
    out: list[tuple[int, str]] = []
    for line, name in new:
        if name not in known:
            known.add(name)
            out.append((line, name))
    return out


def describe(names: list[tuple[int, str]]) -> str:
    """``"logger (line 12), cfg (line 30)"``: the first :data:`MAX_LISTED` names."""
    shown = ", ".join(f"{name} (line {line})" for line, name in names[:MAX_LISTED])
    more = len(names) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def _undefined(text: str) -> list[tuple[int, str]] | None:
    import ast

    from pyflakes import checker, messages

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found = checker.Checker(tree, filename="<edit>").messages
    return sorted(
        (m.lineno, m.message_args[0]) for m in found if isinstance(m, messages.UndefinedName)
    )
