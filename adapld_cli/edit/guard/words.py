"""The guard's word lists and the patterns built from them.

What the instruction's words mean to the guard (deleting, shrinking, moving, renaming, a whole
kind of thing) and the patterns that find identifiers, C headers and placeholders in code.
The lists are spelled out in ``docs/scope-guard.md#word-lists``.
"""

from __future__ import annotations

import re

# Deletion/shrinking words (inflections spelled out so "cutoff" or "empty" never match).
DELETION_WORDS: tuple[str, ...] = (
    "delete", "deletes", "deleted", "deleting", "deletion",
    "remove", "removes", "removed", "removing", "removal",
    "drop", "drops", "dropped", "dropping",
    "strip", "strips", "stripped", "stripping",
    "shorten", "shortens", "shortened", "shortening", "shorter",
    "simplify", "simplifies", "simplified", "simplifying", "simpler",
    "trim", "trims", "trimmed", "trimming",
    "cut", "cuts", "cutting",
    "prune", "prunes", "pruned", "pruning",
    "purge", "purges", "purged", "purging",
    "erase", "erases", "erased", "erasing",
    "eliminate", "eliminates", "eliminated", "eliminating",
    "clean up", "cleanup", "clean-up",
    "condense", "condensed", "compact", "compacted", "minify", "minified",
    "collapse", "collapsed", "merge", "merged", "combine", "combined",
    "inline", "inlined", "dedupe", "deduplicate", "deduplicated",
    "reduce", "reduced", "truncate", "truncated", "discard", "discarded",
    "get rid", "rid of", "keep only", "only keep", "extract", "extracted",
)  # fmt: skip
DELETION_RE = re.compile(
    r"(?<![\w-])(?:" + "|".join(re.escape(w) for w in DELETION_WORDS) + r")(?![\w-])",
    re.IGNORECASE,
)

# The imperative forms among them (rule 3 asks for a request, not a mention).
SHRINK_VERBS: tuple[str, ...] = (
    "delete", "remove", "drop", "strip", "shorten", "simplify", "trim", "cut", "prune", "purge",
    "erase", "eliminate", "clean up", "condense", "compact", "minify", "collapse", "merge",
    "combine", "inline", "dedupe", "deduplicate", "reduce", "truncate", "discard", "get rid",
    "keep only", "only keep", "extract", "shorter", "simpler",
)  # fmt: skip
SHRINK_RE = re.compile(
    r"(?<![\w-])(?:" + "|".join(re.escape(w) for w in SHRINK_VERBS) + r")(?![\w-])",
    re.IGNORECASE,
)
SHRINK_ANYWHERE = {"shorter", "simpler"}  # requests wherever they stand

# Words that ask for a whole kind of thing, and the kind nouns (kind noun -> item kinds it
# covers; "code" covers all).
WHOLESALE_RE = re.compile(
    r"\b(?:unused|dead|redundant|duplicated?|obsolete|deprecated|unnecessary|all|every)\b",
    re.IGNORECASE,
)
KIND_NOUNS: dict[str, tuple[str, ...]] = {
    r"imports?|includes?|use (?:statements?|declarations?)": ("import",),
    r"functions?|methods?|helpers?|procedures?|constructors?|funcs?": ("function",),
    r"class(?:es)?|structs?|types?|interfaces?|enums?|traits?|records?": ("class",),
    r"constants?|variables?|globals?|assignments?|macros?|defines?|statics?": ("assignment",),
    r"keys?|entry|entries|fields?|settings?|options?|sections?|tables?": ("key",),
    r"code": ("import", "function", "class", "assignment", "key"),
}
CODE_SPAN_RE = re.compile(r"`[^`\n]*`")  # `duplicate` is a name, not a wholesale word

# Renaming and moving.
RENAME_RE = re.compile(r"\b(?:renam\w*|call(?:ed)? it|name it|names? to)\b", re.IGNORECASE)
MOVE_RE = re.compile(
    r"\b(?:mov(?:e|es|ed|ing)|extract\w*|wrap\w*|convert\w*|refactor\w*|split\w*|group\w*"
    r"|nest\w*|reorgani[sz]\w*|restructur\w*)\b",
    re.IGNORECASE,
)

# Where a word stands: a request starts a clause or follows one of these leads.
CLAUSE_START_RE = re.compile(  # a full stop ends a clause, the dot of ``self.split`` does not
    r"(?:^|[;:!?,\n(]|\.\s)\s*(?:(?:please|also|then|and|now|just|first|finally)\s+)*$", re.I
)
REQUEST_LEAD_RE = re.compile(r"\b(?:and|then|also|or|you|please)\s+$", re.IGNORECASE)

# Words of code.
WORD_RE = re.compile(r"[\w$]+")
HEADER_RE = re.compile(r"(.+?)(\.(?:h|hh|hpp|hxx|h\+\+|inc|inl|tcc))")
COMMON_WORDS = frozenset({  # keywords and the like: they make any two bodies look akin
    "def", "class", "return", "if", "elif", "else", "for", "while", "in", "not", "and", "or",
    "is", "self", "this", "None", "True", "False", "pass", "lambda", "with", "as", "try",
    "except", "finally", "raise", "yield", "break", "continue", "import", "from", "const",
    "let", "var", "function", "fn", "pub", "mut", "impl", "struct", "new", "null", "nil",
    "func", "int", "void", "static", "public", "private", "final", "async", "await",
})  # fmt: skip
PLACEHOLDER_RE = re.compile(  # "# ... rest unchanged", "// existing code", "# (omitted)"
    r"\.\.\.|…|\b(?:unchanged|as before|rest of|existing (?:code|logic|implementation)|omitted)\b",
    re.IGNORECASE,
)
