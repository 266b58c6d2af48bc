"""The request sent for one case (an answer endpoint's or an HTTP retriever's): the filled JSON template (values
escaped by the encoder, never spliced; ``{question}`` ``{case_id}`` ``{k}``, and ``{pool_size}`` for a retriever), the
URL and the headers (``env:NAME`` values hidden from ``repr``); docs/answers-collection.md."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from rag_pipeline.contracts.errors import BadInputError
from rag_pipeline.storage.http.scrubbing import Scrubber, header_secrets, query_credential, redact_url, url_secrets

_PLACEHOLDER = re.compile(r"\{(question|case_id|k|pool_size)\}")  # one pass: a question holding "{k}" stays
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


def _values(question: str, case_id: str, k: int, pool_size: int | None) -> dict[str, str | int]:
    values: dict[str, str | int] = {"question": question, "case_id": case_id, "k": k}
    if pool_size is not None:  # a retriever's request: how many candidates to return
        values["pool_size"] = pool_size
    return values


def fill_template(template: Any, question: str, case_id: str, k: int, pool_size: int | None = None) -> Any:
    """``template`` with the placeholders of its string values filled (see the module docstring); a string that is
    exactly ``{k}`` or ``{pool_size}`` becomes the number."""
    values = _values(question, case_id, k, pool_size)
    return _fill(template, values)


def _fill(template: Any, values: Mapping[str, str | int]) -> Any:
    if isinstance(template, str):
        whole = values.get(template[1:-1]) if template.startswith("{") and template.endswith("}") else None
        if isinstance(whole, int):
            return whole
        return _PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))), template)
    if isinstance(template, list):
        return [_fill(item, values) for item in template]
    if isinstance(template, dict):
        return {key: _fill(value, values) for key, value in template.items()}
    return template


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EndpointConfigError(f"--endpoint {redact_url(url)!r}: expected an http:// or https:// URL with a "
                                  "host")
    if (name := query_credential(url)) is not None:
        raise EndpointConfigError(f"--endpoint: the URL holds a credential in its query string (parameter {name!r}): "
                                  "put it in a header whose value is env:VARIABLE (--header 'Name: env:VARIABLE')")
    return url


def fill_url(url: str, question: str, case_id: str, k: int, pool_size: int | None = None) -> str:
    values = {key: quote(v, safe="") if isinstance(v, str) else str(v)
              for key, v in _values(question, case_id, k, pool_size).items()}
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), url)


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
