"""Credential redaction of URLs, free text (overrides, connection strings) and config trees."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import pytest

from stackbase.secrets import MASK, is_secret_key, redact_text, redact_value

URL = "https://user:tok3n@host/x?sig=SECRET&a=1"


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "token",
        "api_key",
        "apiKey",
        "access_key",
        "secret_access_key",
        "aws_secret_access_key",
        "AWS_SESSION_TOKEN",
        "sas_token",
        "AccountKey",
        "connection_string",
        "credentials",
        "wandb_api_key",
        "hf_token",
        "client-secret",
    ],
)
def test_credential_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    [
        "tokenizer",
        "pad_token",
        "eos_token",
        "tokens_per_step",
        "max_tokens",
        "url",
        "remote",
        "name",
        None,
        3,
    ],
)
def test_ordinary_keys(key):
    assert not is_secret_key(key)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (URL, "https://***@host/x?sig=***&a=1"),
        ("+variables.token=PLAINTOK", "+variables.token=***"),
        ("variables.url='https://u:tok3n@h/x?sig=S'", "variables.url='https://***@h/x?sig=***'"),
        (
            "tags=[smoke,https://u:p@h/y,https://h/z?a=1&token=T]",
            "tags=[smoke,https://***@h/y,https://h/z?a=1&token=***]",
        ),
        ("x.password=[a,b],optimizer.lr=1e-3", "x.password=***,optimizer.lr=1e-3"),
        ("x.password='with space' y=1", "x.password=*** y=1"),
        (
            "DefaultEndpointsProtocol=https;AccountName=acc;AccountKey=abc==;EndpointSuffix=core.windows.net",
            "DefaultEndpointsProtocol=https;AccountName=acc;AccountKey=***;EndpointSuffix=core.windows.net",
        ),
        ("AWS_SECRET_ACCESS_KEY=xyz and more", "AWS_SECRET_ACCESS_KEY=*** and more"),
        ("https://h/cb#access_token=zz&state=1", "https://h/cb#access_token=***&state=1"),
        (
            "s3://bucket/key?versionId=3 lr=1e-3 tokenizer.pad_token=<pad>",
            "s3://bucket/key?versionId=3 lr=1e-3 tokenizer.pad_token=<pad>",
        ),
        ("", ""),
    ],
)
def test_redact_text(text, expected):
    assert redact_text(text) == expected


@dataclass
class _Data:
    remote: str = URL
    local: str = "/tmp/cache"
    pad_token: str = "<pad>"


@dataclass
class _Root:
    data: _Data = field(default_factory=_Data)
    tags: list[str] = field(default_factory=lambda: ["smoke", URL])
    variables: dict = field(
        default_factory=lambda: {"password": "hunter2", "credentials": {"k": "v", "n": 3}}
    )
    seed: int = 17
    token: str | None = None


def test_redact_value_walks_dataclasses_dicts_and_lists_without_mutating():
    cfg = _Root()
    before = copy.deepcopy(cfg)
    out = redact_value(cfg)
    assert cfg == before  # the code that does I/O keeps the real values
    assert out == {
        "data": {"remote": "https://***@host/x?sig=***&a=1", "local": "/tmp/cache", "pad_token": "<pad>"},
        "tags": ["smoke", "https://***@host/x?sig=***&a=1"],
        "variables": {"password": MASK, "credentials": {"k": MASK, "n": 3}},
        "seed": 17,
        "token": None,
    }
    assert "tok3n" not in repr(out) and "SECRET" not in repr(out) and "hunter2" not in repr(out)


def test_redact_value_keeps_tuples_and_scalars():
    assert redact_value(("a", URL, 1, 2.5, True, None)) == (
        "a",
        "https://***@host/x?sig=***&a=1",
        1,
        2.5,
        True,
        None,
    )
