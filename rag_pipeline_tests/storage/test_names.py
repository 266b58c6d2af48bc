"""The one name rule (knowledge bases, datasets, strategy versions) and terminal-safe text (no database)."""

from __future__ import annotations

import os

import pytest

from rag_pipeline.storage.names import (
    DATASET,
    KNOWLEDGE_BASE,
    STRATEGY_VERSION,
    InvalidNameError,
    check_name,
    is_valid_name,
    printable,
)

KINDS = (KNOWLEDGE_BASE, DATASET, STRATEGY_VERSION)
GOOD = ["demo", "hybrid-v1", "scifact.test_2026", "知识库", "评测集-v2", "中文_kb.1", "Ünïcödé", "हिन्दी", "a",
        "x" * 100]
BAD = {  # value -> a fragment of the reason
    "": "empty",
    "x|y": "'|'",
    "../../etc/x": "path separator",
    "a\\b": "path separator",
    "a/b": "path separator",
    "line\nbreak": "control character \\x0a",
    "\x1b[2Jclear": "control character \\x1b",
    "nul\x00": "control character \\x00",
    "del\x7f": "control character \\x7f",
    "c1\x85": "control character \\x85",
    "tab\t": "control character \\x09",
    "has space": "whitespace",
    ".hidden": "starts with '.'",
    "..": "starts with '.'",
    "a,b": "','",
    "x" * 250: "250 characters",
    os.fsdecode(b"bad\xffname"): "not valid UTF-8",
    "bidi\u202eevil": "\\u202e",
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", GOOD)
def test_letters_of_any_script_digits_and_dot_underscore_dash_are_accepted(kind: str, value: str) -> None:
    assert check_name(kind, value) == value
    assert is_valid_name(kind, value)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("value", "reason"), list(BAD.items()))
def test_bad_names_are_refused_with_a_clear_escaped_message(kind: str, value: str, reason: str) -> None:
    with pytest.raises(InvalidNameError, match=r"invalid .* name") as caught:
        check_name(kind, value)
    message = str(caught.value)
    assert f"invalid {kind} name" in message
    assert reason in message
    assert message.isprintable(), "no raw control character, no lone surrogate in the message"
    message.encode("utf-8")  # printable on any UTF-8 terminal
    assert "letters (any script), digits" in message, "the message states the rule"
    assert isinstance(caught.value, ValueError)
    assert not is_valid_name(kind, value)


def test_the_limits_per_kind() -> None:
    for kind in (KNOWLEDGE_BASE, STRATEGY_VERSION):
        check_name(kind, "k" * 100)
        with pytest.raises(InvalidNameError, match="101 characters; the limit is 100"):
            check_name(kind, "k" * 101)
    check_name(DATASET, "d" * 200)
    with pytest.raises(InvalidNameError, match="201 characters; the limit is 200"):
        check_name(DATASET, "d" * 201)


def test_dataset_extras_shards_allowed_and_partition_key_bans_kept() -> None:
    assert check_name(DATASET, "scifact@0001") == "scifact@0001"
    with pytest.raises(InvalidNameError, match="'@'"):
        check_name(KNOWLEDGE_BASE, "scifact@0001")
    with pytest.raises(InvalidNameError, match=r"'\.\.\.'"):
        check_name(DATASET, "a...b")
    for bad in ("a,b", "a[1]", "a|b"):
        assert not is_valid_name(DATASET, bad)


def test_non_strings_are_refused() -> None:
    with pytest.raises(InvalidNameError, match="must be a string"):
        check_name(KNOWLEDGE_BASE, 5)
    with pytest.raises(InvalidNameError, match="must be a string"):
        check_name(DATASET, None)


def test_a_long_bad_name_is_cut_in_the_message() -> None:
    with pytest.raises(InvalidNameError) as caught:
        check_name(KNOWLEDGE_BASE, "\x1b" * 5000)
    assert len(str(caught.value)) < 1000


@pytest.mark.parametrize(("text", "shown"), [
    ("plain", "plain"),
    ("知识库 问题？", "知识库 问题？"),
    ("\x1b[2J", "\\x1b[2J"),
    ("a\x00b", "a\\x00b"),
    ("a\nb\tc\rd", "a\\x0ab\\x09c\\x0dd"),
    ("del\x7f c1\x9b", "del\\x7f c1\\x9b"),
    ("sep\u2028para\u2029", "sep\\u2028para\\u2029"),
    ("rtl\u202eoverride", "rtl\\u202eoverride"),
    (os.fsdecode(b"x\xff"), "x\\udcff"),
])
def test_printable_escapes_control_characters_and_keeps_cjk(text: str, shown: str) -> None:
    assert printable(text) == shown
    assert printable(text).isprintable() or " " in printable(text)
    printable(text).encode("utf-8")


def test_printable_can_keep_line_breaks_and_takes_any_object() -> None:
    assert printable("one\ntwo\x1b", keep="\n") == "one\ntwo\\x1b"
    assert printable(ValueError("bad \x1b[31mred")) == "bad \\x1b[31mred"
    assert printable(42) == "42"
