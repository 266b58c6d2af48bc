"""The optional LLM judge's shapes: its configuration, identity, and verdicts on one answer (docs/judge.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class JudgeConfig(BaseModel):
    """An optional LLM judge: any OpenAI-compatible chat endpoint (``POST {url}/chat/completions``), docs/judge.md.

    ``api_key`` is sent as ``Authorization: Bearer`` and never stored, printed or part of the judge's identity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=1, description="base URL of the chat API, e.g. http://127.0.0.1:8080/v1")
    model: str = Field(min_length=1, max_length=200, description="the model name sent with every request")
    repeats: int = Field(1, ge=1, le=20, description="times each prompt is asked (mean and spread reported)")
    timeout_s: float = Field(120, gt=0, le=3600, description="longest wait for one reply, seconds")
    retries: int = Field(3, ge=0, le=10, description="retries of a request after 429, 5xx, a timeout or no "
                                                     "connection (exponential backoff, Retry-After honoured)")
    concurrency: int = Field(2, ge=1, le=64, description="requests in flight at once")
    backoff_s: float = Field(0.5, ge=0, le=60, description="first retry's wait, doubled each retry (a Retry-After "
                                                            "header wins, up to 60 s)")
    api_key: SecretStr | None = Field(None, exclude=True, description="bearer token; never stored")


class JudgeIdentity(BaseModel):
    """Who judged: the endpoint's host (no credentials, no path), the model and the prompts' version hash."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    model: str
    prompt_version: str = Field(description="sha256 prefix of every prompt text and reply schema")

    @property
    def label(self) -> str:
        return f"{self.model}@{self.host} prompts:{self.prompt_version}"


class JudgeClaim(BaseModel):
    """One claim of an answer as the judge split it, and whether a cited chunk supports it."""

    claim: str
    supported: bool
    chunk_id: str | None = Field(None, description="the cited chunk that supports it; None: none named")


class JudgeScore(BaseModel):
    """The judge's verdicts on one answer (docs/judge.md): faithfulness over the repeats, refusal by majority.

    A value the judge could not give is ``None`` with its reason in ``skipped`` (``no claims``, ``no cited chunks``,
    ``not judged: …``), never 0 or NaN; ``judged`` counts the valid replies among ``asked``."""

    faithfulness: float | None = Field(description="mean over the repeats of supported claims / claims")
    faithfulness_spread: float | None = Field(description="population standard deviation over the repeats; "
                                                          "None: fewer than 2 repeats gave a value")
    faithfulness_min: float | None = None
    faithfulness_max: float | None = None
    faithfulness_values: list[float] = Field(default_factory=list, description="one per repeat with a value")
    claims: list[JudgeClaim] = Field(default_factory=list, description="the claims of the first reply that has any")
    refused: bool | None = Field(description="the majority of the refusal votes; None: not asked, not judged, or a tie")
    refused_votes: list[bool] = Field(default_factory=list)
    asked: int = Field(description="replies asked for (prompts x repeats)")
    judged: int = Field(description="valid replies among them")
    not_judged_reason: str | None = Field(None, description="why a reply was not valid (the first such reply)")
    skipped: dict[str, str] = Field(default_factory=dict, description="faithfulness / refused -> why it is None")
    judge: JudgeIdentity


class JudgeItem(BaseModel):
    """One answer to judge (:func:`rag_pipeline.answers.judge.scores.judge_cases`).

    ``ask_refusal`` is for a case whose refusal neither the flag nor a phrase decided (docs/design.md §12.4)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str
    answer: str
    cited_chunk_texts: dict[str, str] = Field(default_factory=dict, description="cited chunk id -> its text")
    ask_faithfulness: bool = True
    ask_refusal: bool = True

