"""The path language mapping an endpoint's JSON reply to an answer line: ``choices[0].message.content``,
``citations[*].chunk_id``, ``[-1]``; the empty path is the whole reply (docs/answers-collection.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rag_pipeline.contracts.errors import BadInputError

_STEP = re.compile(r"([^.\[\]]+)?((?:\[(?:-?\d+|\*)\])*)")
_INDEX = re.compile(r"\[(-?\d+|\*)\]")
_MISSING = object()
STAR = "*"


class PathSyntaxError(BadInputError, ValueError):
    """A response path that is not in the path language."""


class PathNotFound(LookupError):  # noqa: N818 - a lookup result the collector records, not a crash
    """The reply has nothing at the path; ``where`` names the first step that failed."""

    def __init__(self, where: str):
        self.where = where
        super().__init__(where)


@dataclass(frozen=True)
class ResponsePath:
    """A parsed path: ``steps`` are keys (str) and list steps (int, or ``"*"`` as :data:`STAR` in a tuple)."""

    text: str
    steps: tuple[str | int | tuple[str], ...]

    def find(self, document: Any) -> Any:
        """The value at this path in ``document``; :class:`PathNotFound` when a step has nothing."""
        return _walk(document, self.steps, self.text)


def parse_path(text: str, flag: str = "path") -> ResponsePath:
    """Parse ``text``; :class:`PathSyntaxError` naming ``flag`` and the bad part."""
    if text.strip() == "":
        return ResponsePath(text, ())
    steps: list[str | int | tuple[str]] = []
    for part in text.split("."):
        match = _STEP.fullmatch(part)
        if not part or match is None or (match.group(1) is None and not match.group(2)):
            raise PathSyntaxError(f"{flag} {text!r}: bad step {part!r} (a path is key.key[0].key[*]; "
                                  "see docs/answers-collection.md)")
        if match.group(1) is not None:
            steps.append(match.group(1))
        for index in _INDEX.findall(match.group(2)):
            steps.append((STAR,) if index == STAR else int(index))
    return ResponsePath(text, tuple(steps))


def _walk(value: Any, steps: tuple, text: str, done: str = "") -> Any:
    for i, step in enumerate(steps):
        if isinstance(step, tuple):  # [*]
            if not isinstance(value, list):
                raise PathNotFound(f"{done or 'the reply'} is not a list")
            return [_walk(item, steps[i + 1:], text, f"{done}[{n}]") for n, item in enumerate(value)]
        if isinstance(step, int):
            if not isinstance(value, list) or not -len(value) <= step < len(value):
                raise PathNotFound(f"{done or 'the reply'} has no item [{step}]")
            value, done = value[step], f"{done}[{step}]"
            continue
        found = value.get(step, _MISSING) if isinstance(value, dict) else _MISSING
        if found is _MISSING:
            raise PathNotFound(f"{done or 'the reply'} has no key {step!r}")
        value, done = found, f"{done}.{step}" if done else step
    return value
