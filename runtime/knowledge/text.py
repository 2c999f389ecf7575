"""Text of a knowledge document, split into passages that keep their place in it.

Kinds: plain text (txt, csv, json, logs, code: anything that is UTF-8 text), Markdown (headings kept), HTML
(tags dropped, headings kept), PDF (pypdf, page numbers kept) and Word documents (python-docx, headings and
paragraph numbers kept). A passage is about `TARGET` characters, cut at a blank line or a heading where possible,
never longer than `LONGEST`; text files are read a bounded piece at a time, so a 200 MB log with no line breaks
costs no more memory than a small one. Reading stops at `max_chars` of text (the document's status then says so).

Every way a file can fail becomes `Unreadable` with a sentence for the person: a binary file, a password-protected
or damaged PDF, a PDF without text (scanned pages), a damaged Word document, a file that cannot be opened.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

TARGET = 900
LONGEST = 1600
READ_PIECE = 64 * 1024  # bytes read at most per line, so a file without line breaks is read in pieces
SNIFF = 8192
HTML_MAX_BYTES = 32 * 1024 * 1024

KINDS = {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html", ".pdf": "pdf", ".docx": "docx"}
TEXT_SUFFIXES = frozenset("""
.txt .text .rst .csv .tsv .json .jsonl .ndjson .log .xml .yaml .yml .toml .ini .cfg .conf .tex .org .adoc
.py .js .ts .tsx .jsx .java .kt .c .h .cc .cpp .hpp .cs .go .rs .rb .php .swift .m .scala .sh .bash .zsh .ps1
.sql .r .lua .pl .hs .ex .exs .erl .clj .dart .vue .svelte .css .scss .less .ipynb
""".split())
_MD_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.+?)\s*#*\s*$")


class Unreadable(Exception):
    """The document cannot be indexed; the message says why in one sentence."""


@dataclass(slots=True)
class Piece:
    text: str
    heading: str | None = None
    page: int | None = None
    line_start: int | None = None
    line_end: int | None = None


def kind_of(path: Path) -> str | None:
    """The kind a file is read as, from its name; None for a file the library does not take from a folder."""
    suffix = path.suffix.lower()
    if suffix in KINDS:
        return KINDS[suffix]
    return "text" if suffix in TEXT_SUFFIXES else None


def file_digest(path: Path, stop: threading.Event | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            if stop is not None and stop.is_set():
                raise InterruptedError
            h.update(block)
    return h.hexdigest()


class DocumentReader:
    """Reads one document in batches of passages; `progress` (0..1) and `truncated` say how far it got."""

    def __init__(self, path: Path, kind: str, max_chars: int, stop: threading.Event | None = None):
        self.path = path
        self.kind = kind
        self.max_chars = max_chars
        self.stop = stop or threading.Event()
        self.progress = 0.0
        self.truncated = False
        self.chars = 0

    def batches(self, size: int) -> Iterator[list[Piece]]:
        batch: list[Piece] = []
        for piece in self._pieces():
            if self.stop.is_set():
                raise InterruptedError
            if self.chars + len(piece.text) > self.max_chars:
                self.truncated = True
                break
            self.chars += len(piece.text)
            batch.append(piece)
            if len(batch) >= size:
                yield batch
                batch = []
        if batch:
            yield batch
        self.progress = 1.0

    def _pieces(self) -> Iterator[Piece]:
        try:
            if self.kind == "pdf":
                yield from self._pdf()
            elif self.kind == "docx":
                yield from self._docx()
            elif self.kind == "html":
                yield from self._html()
            else:
                yield from _chunk_lines(self._lines(), markdown=self.kind == "markdown")
        except OSError as exc:
            raise Unreadable(f"could not be read ({exc.strerror or exc}).") from None

    # -- text --

    def _lines(self) -> Iterator[tuple[int, str]]:
        """(line number, text) with long lines in pieces of at most READ_PIECE bytes."""
        size = max(self.path.stat().st_size, 1)
        with open(self.path, "rb") as f:
            head = f.read(SNIFF)
            if _binary(head):
                raise Unreadable("looks like a binary file, not text.")
            f.seek(0)
            number, done = 1, 0
            while raw := f.readline(READ_PIECE):
                done += len(raw)
                yield number, raw.decode("utf-8", errors="replace")
                if raw.endswith(b"\n"):  # else the line goes on in the next piece
                    number += 1
                if number % 2048 == 0:
                    self.progress = done / size

    # -- html --

    def _html(self) -> Iterator[Piece]:
        data = self.path.read_bytes()[:HTML_MAX_BYTES]
        if b"\x00" in data[:SNIFF]:
            raise Unreadable("looks like a binary file, not HTML.")
        parser = _Blocks()
        parser.feed(data.decode("utf-8", errors="replace"))
        parser.close()
        self.progress = 0.5
        yield from _chunk_blocks(parser.blocks)

    # -- pdf --

    def _pdf(self) -> Iterator[Piece]:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError

        try:
            reader = PdfReader(str(self.path))
            if reader.is_encrypted and not reader.decrypt(""):
                raise Unreadable("is protected by a password, so Hearth cannot read it.")
            pages = len(reader.pages)
        except (PdfReadError, ValueError, KeyError, TypeError) as exc:
            raise Unreadable(f"could not be read as a PDF ({_short(exc)}).") from None
        found = False
        for i in range(pages):
            if self.stop.is_set():
                raise InterruptedError
            try:
                text = reader.pages[i].extract_text() or ""
            except Exception:  # one damaged page (pypdf raises many kinds) does not lose the others
                text = ""
            self.progress = (i + 1) / pages
            for piece in _chunk_lines(enumerate(text.splitlines(keepends=True), 1), markdown=False):
                found = True
                piece.page, piece.line_start, piece.line_end = i + 1, None, None
                yield piece
        if not found:
            raise Unreadable("has no text Hearth can read (scanned pages would need text recognition).")

    # -- docx --

    def _docx(self) -> Iterator[Piece]:
        import zipfile

        import docx
        from docx.opc.exceptions import PackageNotFoundError

        try:
            document = docx.Document(str(self.path))
        except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
            raise Unreadable(f"could not be read as a Word document ({_short(exc)}).") from None
        blocks = []
        for n, para in enumerate(document.paragraphs, 1):
            style = (para.style.name if para.style is not None else "") or ""
            heading = style.startswith(("Heading", "Title"))
            if para.text.strip():
                blocks.append((n, para.text.strip(), heading))
        self.progress = 0.5
        yield from _chunk_blocks(blocks)


def _binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 3  # a character cut at the end of the sample is not binary
    return False


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 120 else text[:119] + "…"


def _chunk_lines(lines: Iterable[tuple[int, str]], markdown: bool) -> Iterator[Piece]:
    """Passages of consecutive lines; a Markdown heading starts a new one and names the ones below it."""
    buf: list[str] = []
    start = end = 1
    size = 0
    heading = None
    for number, line in lines:
        if markdown and (m := _MD_HEADING.match(line)):
            yield from _flush(buf, heading, start, end)
            buf, size, heading = [], 0, m.group(2).strip()
        if not buf:
            start = number
        buf.append(line)
        end = number
        size += len(line)
        if size >= LONGEST or (size >= TARGET and not line.strip()):
            yield from _flush(buf, heading, start, end)
            buf, size = [], 0
    yield from _flush(buf, heading, start, end)


def _flush(buf: list[str], heading: str | None, start: int, end: int) -> Iterator[Piece]:
    text = "".join(buf).strip()
    for i in range(0, len(text), LONGEST):  # one very long line still gives passages of bounded size
        part = text[i:i + LONGEST].strip()
        if part:
            yield Piece(part, heading, None, start, end)


def _chunk_blocks(blocks: list[tuple[int, str, bool]]) -> Iterator[Piece]:
    """Passages of (line or paragraph number, text, is a heading) blocks, headings kept as their place."""
    buf: list[str] = []
    start = end = 0
    heading = None
    for number, text, is_heading in blocks:
        if is_heading:
            yield from _flush(buf, heading, start, end)
            buf, heading = [], text[:200]
            continue
        if not buf:
            start = number
        buf.append(text + "\n\n")
        end = number
        if sum(map(len, buf)) >= TARGET:
            yield from _flush(buf, heading, start, end)
            buf = []
    yield from _flush(buf, heading, start, end)


class _Blocks(HTMLParser):
    """Text blocks of an HTML page with their line numbers; script and style left out, headings marked."""

    BLOCK = frozenset("p div li tr br section article header footer pre blockquote table ul ol dd dt td th".split())
    HEADINGS = frozenset(("h1", "h2", "h3", "h4", "h5", "h6", "title"))
    SKIP = frozenset(("script", "style", "noscript", "template"))

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[tuple[int, str, bool]] = []
        self._text: list[str] = []
        self._line = 1
        self._skip = 0
        self._heading = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self._skip += 1
        elif tag in self.BLOCK or tag in self.HEADINGS:
            self._end_block()
            self._heading = tag in self.HEADINGS

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag in self.BLOCK or tag in self.HEADINGS:
            self._end_block()

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            if not self._text:
                self._line = self.getpos()[0]
            self._text.append(data)

    def close(self) -> None:
        super().close()
        self._end_block()

    def _end_block(self) -> None:
        text = " ".join("".join(self._text).split())
        if text:
            self.blocks.append((self._line, text, self._heading))
        self._text = []
        self._heading = False


def location(kind: str, passage: dict) -> str:
    """Where a passage is, in words: "page 3", "lines 10–24", "paragraphs 4–9", with its heading."""
    where = []
    if passage.get("page"):
        where.append(f"page {passage['page']}")
    start, end = passage.get("line_start"), passage.get("line_end")
    if start:
        unit = "paragraph" if kind == "docx" else "line"
        where.append(f"{unit} {start}" if start == end else f"{unit}s {start}–{end}")
    if passage.get("heading"):
        where.append(f"“{passage['heading']}”")
    return ", ".join(where)

