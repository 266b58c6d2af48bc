"""The request sent for one case: the filled JSON template (values escaped by the encoder, never spliced), the
URL and the headers (``env:NAME`` values hidden from ``repr``); docs/answers-collection.md."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from rag_pipeline.answers.scrubbing import Scrubber, header_secrets, redact_url, url_secrets
from rag_pipeline.contracts.errors import BadInputError

_PLACEHOLDER = re.compile(r"\{(question|case_id|k)\}")  # one pass: a question holding "{k}" stays as it is
ENV_PREFIX = "env:"
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an RFC 9110 token


class EndpointConfigError(BadInputError, ValueError):
    """A flag of the endpoint collection that cannot be used (the message names the flag)."""


def parse_template(text: str) -> Any:
    """The parsed ``--request-template``; :class:`EndpointConfigError` if it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise EndpointConfigError(f"--request-template is not JSON: {exc.msg} at line {exc.lineno} column "
                                  f"{exc.colno}") from None


def fill_template(template: Any, question: str, case_id: str, k: int) -> Any:
    """``template`` with the placeholders of its string values filled (see the module docstring)."""
    if isinstance(template, str):
        if template == "{k}":
            return k
        values = {"question": question, "case_id": case_id, "k": str(k)}
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
    if isinstance(template, list):
        return [fill_template(item, question, case_id, k) for item in template]
    if isinstance(template, dict):
        return {key: fill_template(value, question, case_id, k) for key, value in template.items()}
    return template


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EndpointConfigError(f"--endpoint {redact_url(url)!r}: expected an http:// or https:// URL with a "
                                  "host")
    return url


def fill_url(url: str, question: str, case_id: str, k: int) -> str:
    values = {"question": quote(question, safe=""), "case_id": quote(case_id, safe=""), "k": str(k)}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], url)


class ResolvedHeaders:
    """The request headers with their ``env:`` values read, never shown in ``repr`` or ``str``."""

    def __init__(self, specs: tuple[str, ...] | list[str], environ: Mapping[str, str] | None = None, *,
                 url: str = ""):
        environ = os.environ if environ is None else environ
        self._headers: dict[str, str] = {}
        for number, spec in enumerate(specs, 1):
            name, sep, value = spec.partition(":")
            name, value = name.strip(), value.strip()
            if not sep or not _HEADER_NAME.match(name):  # not echoed: it may be a secret without its name
                raise EndpointConfigError(f"--header number {number}: expected 'Name: value' (or 'Name: "
                                          "env:VARIABLE'), with a name of letters, digits and -")
            if value.startswith(ENV_PREFIX):
                variable = value[len(ENV_PREFIX):]
                if not _VARIABLE.match(variable):  # not echoed: it may be the secret itself
                    raise EndpointConfigError(f"--header {name}: after env: give the name of an environment "
                                              "variable (letters, digits and _)")
                if variable not in environ:
                    raise EndpointConfigError(f"--header {name}: environment variable {variable!r} is not set")
                value = environ[variable]
            if any(c in value for c in "\r\n\x00"):
                raise EndpointConfigError(f"--header {name}: the value holds a line break or NUL")
            if not value.isascii():  # httpx sends header values as ASCII
                raise EndpointConfigError(f"--header {name}: the value holds a character that is not ASCII")
            self._headers[name] = value
        self._scrubber = Scrubber([*(s for v in self._headers.values() for s in header_secrets(v)),
                                   *url_secrets(url)])

    def as_dict(self) -> dict[str, str]:
        return dict(self._headers)

    def scrub(self, text: str) -> str:
        """``text`` with every secret value of 4+ characters, in any echoed form, replaced by ``[secret]``."""
        return self._scrubber(text)

    def __repr__(self) -> str:
        return f"ResolvedHeaders({sorted(self._headers)})"

    __str__ = __repr__
