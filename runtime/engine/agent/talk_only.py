"""A model that can only talk (local_models/catalog.json `calls_tools: false`, the bundled 135M one): it is offered no
tools (kits/task.py), and when a request needs files or commands the turn says once per task, in plain words, that
this model cannot do that and which bigger model fits this computer (a warning with code TALK_ONLY, which the
window shows with a way to Settings ▸ Models).

Whether a request needs files or commands is guessed from its words, cheaply and before the model runs (the model
itself cannot tell: it has no tools to reach for): a file name with an extension, a path, an action on files or
folders ("tidy my notes folder", "list the files"), running something ("run the tests", "execute this script"),
installing, or a shell command at the start of a line. A question about files in general ("what is a PDF
file?") may match too: then the person reads one sentence more, once.
"""

from __future__ import annotations

import re

from ...local_models.catalog import best_fit

TALK_ONLY = "talk_only"  # the warning's code

_FILE_NAME = (r"\b[\w-]+\.(?:txt|md|py|js|ts|json|csv|tsv|pdf|docx?|xlsx?|pptx?|png|jpe?g|gif|log|sh|ya?ml|toml"
              r"|html?|css|ini|cfg|xml|zip|tar|gz)\b")
_PATH = r"(?:^|\s)(?:~|\.{1,2})?/[\w.-]+|\b[A-Za-z]:\\"
_ON_FILES = (r"\b(?:read|open|list|show|create|make|write|save|delete|remove|rename|move|copy|edit|change|tidy|clean"
             r"|organi[sz]e|sort|find|search|look|check|compress|back ?up|upload|download)\b[^.?!\n]{0,40}?\b(?:files?"
             r"|folders?|director(?:y|ies)|documents?|workspace|disk|drive|downloads|desktop|repo(?:sitory)?)\b")
_RUN = (r"\b(?:run|execute|launch|start|install|uninstall|compile|build)\b[^.?!\n]{0,30}?\b(?:commands?|scripts?"
        r"|programs?|tests?|code|shell|terminal|apps?|servers?)\b")
_INSTALL = r"\b(?:un)?install\b"
_SHELL = r"^\s*(?:\$ )?(?:ls|cd|grep|git|pip3?|npm|mkdir|rm|cp|mv|sudo|apt(?:-get)?|curl|wget|chmod)\s"
_NEEDS = re.compile("|".join(f"(?:{p})" for p in (_FILE_NAME, _PATH, _ON_FILES, _RUN, _INSTALL, _SHELL)),
                    re.IGNORECASE | re.MULTILINE)


def needs_files_or_commands(text: str) -> bool:
    """Whether a request seems to need files or commands (see the module docstring)."""
    return bool(_NEEDS.search(text))


def notice() -> str:
    """What the person is told, with the best catalog model for this computer when one fits."""
    sentence = ("This built-in model is small and can only talk: it cannot open or change files or run commands, "
                "so it answered from its words alone.")
    entry = best_fit()
    bigger = (f"{entry.label} can, and fits this computer (a {entry.approx_size_gb:.1f} GB download in Settings ▸ "
              "Models)") if entry is not None else "A bigger model from Settings ▸ Models can"
    return f"{sentence} {bigger}; then “Another model…” continues this task with it."


def said_before(saved_parts: list[str]) -> bool:
    """Whether an earlier answer of the task carries the notice (its messages' parts, as stored JSON text)."""
    return any(f'"{TALK_ONLY}"' in parts for parts in saved_parts if parts)
