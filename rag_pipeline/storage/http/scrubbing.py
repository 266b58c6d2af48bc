"""Secret values in use (header values, the judge's API key, a URL's password) kept out of every stored or
printed text, in their escaped forms too (docs/answers-collection.md "Secrets", docs/judge.md)."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlsplit

SCRUBBED = "[secret]"
MIN_SECRET_CHARS = 4
"""Shorter values are not scrubbed: they would blank out ordinary words."""

_USERINFO = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*:)?//(?P<userinfo>[^/?#]*)@")
_BARE_USERINFO = re.compile(r"^[^/?#]*@")
_ESCAPES = re.compile(r"[\\%&+]")
_SCHEME_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*\s+(?P<token>\S.*)$")


def _hex(number: int, width: int | None = None) -> str:
    """A regex of ``number`` in hex, either case of each letter (``width``: zero-padded to it, else any zeros)."""
    digits = f"{number:0{width}x}" if width else f"{number:x}"
    pattern = "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in digits)
    return pattern if width else "0*" + pattern


def _forms(c: str) -> list[tuple[str, str]]:
    """Every form of one character an echo may take, each as (its first character, a regex of the rest)."""
    code = ord(c)
    forms = [(c, ""), ("\\", r"\\*" + re.escape(c))]  # \" \/ \' \\ and the like
    if code <= 0xFFFF:
        forms.append(("\\", r"\\*u" + _hex(code, 4)))
    else:
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms += [("\\", r"\\*u" + _hex(high, 4) + r"\\+u" + _hex(low, 4)), ("\\", r"\\*U" + _hex(code, 8))]
    if code <= 0xFF:
        forms.append(("\\", r"\\*x" + _hex(code, 2)))
    percent = "".join("%" + _hex(byte, 2) for byte in c.encode("utf-8"))
    forms.append(("%", percent[1:]))
    if c == " ":
        forms.append(("+", ""))
    forms += [("&", f"#0*{code};"), ("&", "#[xX]" + _hex(code) + ";")]
    return forms


def _char(c: str) -> str:
    return "(?:" + "|".join(re.escape(first) + rest for first, rest in _forms(c)) + ")"


def _first_char(c: str) -> str:
    """:func:`_char` after its first character was consumed by the pattern's leading class (a class there lets
    the regex engine skip to candidate positions fast: a 8 MB text costs well under a second, not seconds)."""
    return "(?:" + "|".join(f"(?<={re.escape(first)}){rest}" for first, rest in _forms(c)) + ")"


class Scrubber:
    """``scrubber(text)``: ``text`` without the secret values in any echoed form; ``repr`` only counts them."""

    def __init__(self, values: Iterable[str] = ()):
        self._values = sorted({v for v in values if len(v) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        leads = sorted({first for v in self._values for first, _ in _forms(v[0])})
        self._pattern = (re.compile("[" + "".join(re.escape(c) for c in leads) + "](?:" + "|".join(
            _first_char(v[0]) + "".join(_char(c) for c in v[1:]) for v in self._values) + ")")
                         if self._values else None)
        self._literal = re.compile("|".join(re.escape(v) for v in self._values))

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        if _ESCAPES.search(text) is None:  # no escape in the text: only the values as they are can be in it
            return self._literal.sub(SCRUBBED, text) if any(v in text for v in self._values) else text
        return self._pattern.sub(SCRUBBED, text)

    scrub = __call__

    def __bool__(self) -> bool:
        return bool(self._values)

    def __repr__(self) -> str:
        return f"Scrubber({len(self._values)} values)"

    __str__ = __repr__


def _basic(user: str, password: str) -> list[str]:
    """The Basic credential of ``user:password`` as sent (the header value; base64 with and without padding)."""
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return [f"Basic {encoded}", encoded, encoded.rstrip("=")]


def header_secrets(value: str) -> list[str]:
    """The secrets of a header value: the whole, the token after a scheme word, and Basic's decoded parts."""
    values = [value]
    scheme = _SCHEME_WORD.match(value)
    if scheme:
        token = scheme["token"].strip()
        values.append(token)
        if value.lower().startswith("basic"):
            try:
                decoded = base64.b64decode(token, validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                decoded = ""
            if ":" in decoded:
                values += [decoded, decoded.partition(":")[2]]
    return values


_CREDENTIAL_NAMES = frozenset({"key", "auth", "authorization", "sig", "signature", "pwd", "bearer"})
_CREDENTIAL_SUFFIXES = ("token", "secret", "password", "passwd", "apikey", "accesskey", "subscriptionkey")


def query_credential(url: str) -> str | None:
    """The name of a query parameter of ``url`` that carries a credential (``api_key``, ``access_token``,
    ``X-Api-Key``, ``sig`` …), or None. A URL is stored (a strategy's registry entry and identity, a model row) and
    shown: a credential belongs in a header whose value comes from the environment."""
    for name, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        flat = re.sub(r"[^a-z0-9]", "", name.lower())
        if flat in _CREDENTIAL_NAMES or flat.endswith(_CREDENTIAL_SUFFIXES):
            return name
    return None


def url_secrets(url: str) -> list[str]:
    """The secret values of a URL's ``user:password@``: the password (as written and percent-decoded), the
    ``user:password`` pair and the Basic credential an HTTP client sends for it. None without a password."""
    match = _USERINFO.match(url)
    if not match or ":" not in match["userinfo"]:
        return []
    user, _, password = match["userinfo"].partition(":")
    if not password:
        return []
    plain_user, plain = unquote(user), unquote(password)
    return [password, plain, f"{user}:{password}", f"{plain_user}:{plain}", *_basic(plain_user, plain)]


def redact_url(url: str) -> str:
    """``url`` with its ``user:password@`` (or ``user@``) shown as ``***@``: for messages and identities."""
    if _USERINFO.match(url):
        return _USERINFO.sub(lambda m: (m["head"] or "") + "//***@", url, count=1)
    return _BARE_USERINFO.sub("***@", url, count=1)  # no // (``alice:pw@host/rag``): refused, but never shown
