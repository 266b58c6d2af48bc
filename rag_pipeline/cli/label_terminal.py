"""``rag-pipeline label DRAFT``: judge a label draft in the terminal, one question at a time.

The screen shows the question, its pooled candidates (document, ordinal, which strategies found it at which rank,
the grade so far) and the full text of the candidate under the cursor. Keys::

    0 1 2 3      grade the candidate (0 = not relevant, 1-3 relevant) and move to the next one
    r, space     toggle relevant (grade 1) / not relevant (grade 0)
    u            clear the candidate's grade (not judged)
    j, ↓   k, ↑  next / previous candidate
    n, Enter     the question is done: next question (grading every candidate does it too)
    s            skip the question (not exported)
    b            back to the previous question (from the end screen: the last one)
    q            save and quit (Ctrl-C too)

Every change is saved to the draft at once (atomically), with the question the labeller is on, so quitting (or a
crash) loses nothing and ``label`` resumes where it stopped."""

from __future__ import annotations

import os
import select
import shutil
import sys
import termios
import textwrap
import tty
from pathlib import Path

from rag_pipeline.analysis.text_table import cell_width
from rag_pipeline.contracts.labelling import Draft, DraftQuestion
from rag_pipeline.service.labelling.drafts import save_draft
from rag_pipeline.storage.names import printable

KEYS_HELP = ("0-3 grade · r/space relevant · u clear · j/k or ↓/↑ move · n/Enter next question · s skip · "
             "b back · q quit")
END_HELP = "that was the last question: q saves and quits · b goes back to it"
_ESCAPES = {"\x1b[A": "up", "\x1b[B": "down", "\x1bOA": "up", "\x1bOB": "down"}


def wrap(text: str, width: int) -> list[str]:
    """``textwrap.wrap`` by display columns: a CJK character takes two (Chinese has no spaces to break at)."""
    lines = []
    for line in textwrap.wrap(text, width):
        if cell_width(line) <= width:
            lines.append(line)
            continue
        current, used = "", 0
        for ch in line:
            if used + cell_width(ch) > width:
                lines.append(current)
                current, used = "", 0
            current += ch
            used += cell_width(ch)
        lines.append(current)
    return lines


def text_lines(text: str, width: int) -> list[str]:
    """A chunk's text as screen lines: its own line breaks kept (runs of blank lines as one), each line's spaces
    and tabs collapsed, other control characters escaped, wrapped to ``width`` columns."""
    lines: list[str] = []
    for raw in text.splitlines():
        line = printable(" ".join(raw.split()))
        if line or (lines and lines[-1]):
            lines += wrap(line, width) or [""]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def clip(line: str, width: int) -> str:
    """``line`` cut to ``width`` display columns."""
    used = 0
    for i, ch in enumerate(line):
        used += cell_width(ch)
        if used > width:
            return line[:i]
    return line


class Labeller:
    """The state of one labelling session over a draft file (pure: :meth:`press` takes a key name)."""

    def __init__(self, draft: Draft, path: Path):
        self.draft, self.path = draft, path
        self.cursor = 0
        self.message = ""
        self.done = False
        self.at_end = False  # n or s on the last question: the end screen

    @property
    def question(self) -> DraftQuestion:
        return self.draft.questions[self.draft.position]

    def _move_question(self, step: int) -> None:
        last = len(self.draft.questions) - 1
        target = self.draft.position + step
        if target > last:  # past the last question: the end screen, from which b comes back to it
            self.at_end = True
            return
        if target < 0:
            self.message = "this is the first question"
            return
        self.draft.position, self.cursor = target, 0

    def press(self, key: str) -> None:
        """Apply one key (``"0"``, ``"r"``, ``"down"``, ``"enter"`` ...)."""
        q, self.message = self.question, ""
        candidates = q.candidates
        if self.at_end:
            if key == "b":
                self.at_end = False
            elif key == "q":
                self.done = True
            else:
                self.message = END_HELP
            return
        if key in ("0", "1", "2", "3", "r", " ", "u") and not candidates:
            self.message = "no candidate to judge: n goes on, s skips"
            return
        if key in ("0", "1", "2", "3"):
            candidates[self.cursor].grade = int(key)
            self.cursor = min(self.cursor + 1, len(candidates) - 1)
        elif key in ("r", " "):
            c = candidates[self.cursor]
            c.grade = 0 if (c.grade or 0) >= 1 else 1
        elif key == "u":
            candidates[self.cursor].grade = None
        elif key in ("j", "down", "\t"):
            self.cursor = min(self.cursor + 1, max(0, len(candidates) - 1))
            return
        elif key in ("k", "up"):
            self.cursor = max(self.cursor - 1, 0)
            return
        elif key in ("n", "enter"):
            q.status = "judged"
            self._move_question(+1)
        elif key == "s":
            q.status = "skipped"
            self._move_question(+1)
        elif key == "b":
            self._move_question(-1)
        elif key == "q":
            self.done = True
        else:
            self.message = f"unknown key {key!r}: {KEYS_HELP}"
            return
        if key in ("0", "1", "2", "3", "r", " "):
            if q.status == "skipped":
                q.status = "pending"
            if all(c.grade is not None for c in candidates):  # every candidate graded: the question is judged
                q.status = "judged"
        save_draft(self.draft, self.path)

    def screen(self, width: int = 100, height: int = 30) -> str:
        """The whole screen as text."""
        d, q = self.draft, self.question
        p = d.progress()
        counts = f"judged {p['judged']}, skipped {p['skipped']}, pending {p['pending']}"
        if self.at_end:
            return "\n".join([f"[end] all {len(d.questions)} questions seen · {counts} · knowledge base "
                              f"{printable(d.knowledge_base)}", "", *wrap(self.message or END_HELP, width)])
        graded = sum(c.grade is not None for c in q.candidates)
        status = f"{q.status} ({graded}/{len(q.candidates)} graded)" if q.status == "pending" and graded else q.status
        lines = [f"[{d.position + 1}/{len(d.questions)}] case {printable(q.case_id)} · {status} · {counts} · "
                 f"knowledge base {printable(d.knowledge_base)}",
                 *(wrap("Q: " + printable(q.question), width) or ["Q:"]), ""]
        rows = max(3, height - len(lines) - 12)
        first = max(0, min(self.cursor - rows // 2, len(q.candidates) - rows))
        for i, c in enumerate(q.candidates[first:first + rows], start=first):
            grade = " " if c.grade is None else str(c.grade)
            found = " ".join(f"{s}:{r}" for s, r in c.found_by.items()) or "prior label"
            mark = ">" if i == self.cursor else " "
            lines.append(clip(f"{mark}{i + 1:3d} [{grade}] {printable(c.document_name)} #{c.ordinal}  {found}", width))
        if not q.candidates:
            lines.append("  (no candidate: no strategy returned anything)")
        if q.candidates:
            c = q.candidates[self.cursor]
            lines += ["", clip(f"── {self.cursor + 1}/{len(q.candidates)} · {printable(c.document_name)} "
                               f"#{c.ordinal} · chars {c.char_start}-{c.char_end} · {c.chunk_id}", width)]
            body = text_lines(c.text, width) or ["(no text)"]
            lines += body[:8] + (["…"] if len(body) > 8 else [])
        lines += ["", *wrap(self.message or KEYS_HELP, width)]
        return "\n".join(lines)


def _read_key(fd: int) -> str:
    data = os.read(fd, 1)
    if not data:
        return "q"
    if data == b"\x1b":
        while select.select([fd], [], [], 0.05)[0]:
            data += os.read(fd, 1)
            if len(data) >= 3:
                break
        return _ESCAPES.get(data.decode("latin-1"), "escape")
    if data in (b"\r", b"\n"):
        return "enter"
    if data == b"\x03":
        raise KeyboardInterrupt
    if data[0] >= 0x80:  # the rest of a UTF-8 character: not a key we use
        while select.select([fd], [], [], 0.01)[0]:
            os.read(fd, 1)
        return "?"
    return data.decode("ascii", "replace")


def run(draft: Draft, path: Path) -> Labeller:
    """The interactive loop on the terminal (stdin must be one); returns the session when the user quits."""
    if not sys.stdin.isatty():
        raise OSError("`rag-pipeline label` needs a terminal; to turn a draft into a dataset without one, use "
                      "`rag-pipeline label DRAFT --export DATASET.json`")
    session = Labeller(draft, path)
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        while not session.done:
            size = shutil.get_terminal_size((100, 30))
            sys.stdout.write("\x1b[2J\x1b[H" + session.screen(max(40, size.columns - 1), size.lines) + "\n")
            sys.stdout.flush()
            session.press(_read_key(fd))
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        save_draft(session.draft, path)
        sys.stdout.write("\n")
    return session
