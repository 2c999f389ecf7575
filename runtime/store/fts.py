"""Full-text query text from what a person or a model typed: FTS5's query language (SQLite) and `to_tsquery`'s
(PostgreSQL). No SQL here: the query goes in as a bound parameter.

Words are quoted one by one, so nothing a person types (quotes, `NEAR`, `*`, `-`, parentheses) can be read as
query syntax or make the query fail, and joined with OR: BM25 ranks passages that hold more of the rarer
words first, and a question phrased differently from the passage still finds it. For `to_tsquery` the words need
no quoting: `query_words` keeps only runs of letters, digits and '_', which hold none of its operators
(`& | ! ( ) : * <->`) or quotes; a stopword alone matches nothing, without an error.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_WORDS = 32
# Words that match almost everything and only slow the query down.
STOPWORDS = frozenset("""
a an and are as at be but by can could did do does for from had has have how i if in into is it its me my no not
of on or our so than that the their them then there these they this those to was we were what when where which
who whom why will with would you your yours about also just than very
""".split())


def query_words(text: str) -> list[str]:
    """The words of a query worth matching: stopwords and one-letter words left out, each once, in order."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        if (len(word) > 1 or word.isdigit()) and word not in STOPWORDS:
            seen.setdefault(word, None)
        if len(seen) >= MAX_WORDS:
            break
    return list(seen)


def match_any(words: list[str]) -> str | None:
    """An FTS5 query matching any of `words` (each quoted: never read as query syntax)."""
    return " OR ".join(f'"{w}"' for w in words) or None


def match_all(words: list[str]) -> str:
    """An FTS5 query matching passages that hold every one of `words` (each quoted)."""
    return " AND ".join(f'"{w}"' for w in words)


def tsquery_any(words: list[str]) -> str | None:
    """A `to_tsquery` text matching any of `words` (`query_words`'s), or None when there are none."""
    return " | ".join(words) or None


def tsquery_all(words: list[str]) -> str:
    """A `to_tsquery` text matching rows that hold every one of `words`."""
    return " & ".join(words)
