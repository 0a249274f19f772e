"""Credential masking for anything we print or record: URLs, free text, and whole config trees (issue 39: the
one implementation `streaming` and `foundry` share).

What counts as a secret:

- the user info of a URL (``https://user:token@host`` -> ``https://***@host``);
- signed or secret query parameters (``sig``, ``signature``, ``X-Amz-*``, ``X-Goog-*``, Azure SAS fields, any
  name with ``token``, ``key``, ``secret``, ``credential``, ``password`` or ``auth`` in it);
- the value of a known credential key (``password``, ``token``, ``api_key``, ``secret_access_key``,
  ``session_token``, ``sas_token``, ``account_key``, ``connection_string``, ``credentials``, ...), both as a
  mapping key and as ``key=value`` inside text (Hydra overrides, connection strings, environment dumps).

- by value: the value of every environment variable whose name marks a credential (``is_secret_env``: a word
  ``KEY``/``TOKEN``/``PASS*``/``PWD`` in its ``_``-separated name, or ``SECRET``, ``WEBHOOK``, ``CREDENTIAL``,
  ``PASSWORD`` anywhere in it: ``AWS_SECRET_ACCESS_KEY``, ``HF_TOKEN``, ``DB_PASS``, ``MYSQL_PWD``,
  ``SLACK_WEBHOOK_URL``; plus the names or patterns listed in ``$FOUNDRY_SECRET_ENV``, comma-separated), never
  ordinary variables (``PWD``, ``OLDPWD``, ``HOME``, ``PATH``, ...), wherever it appears, raw or URL-encoded,
  so a secret that reached a config through ``${oc.env:...}`` (a tag, a run name, a URL) is masked in any text
  or field, whatever its key. Values shorter than 8 characters are left alone (they would mask ordinary
  words).

Design note: redaction builds new values and never mutates its input, so code that needs the real value (a
backend opening a signed URL) keeps using the original object while every file and logger gets the redacted
copy. The marker is ``***``. Values that are not strings (numbers, booleans, None) are never secrets.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, quote_plus, urlsplit, urlunsplit

__all__ = [
    "MASK",
    "install_masked_excepthook",
    "masked_traceback",
    "SECRET_ENV_VAR",
    "is_secret_env",
    "is_secret_key",
    "is_secret_param",
    "redact_text",
    "redact_url",
    "redact_value",
    "secret_env_values",
]

MASK = "***"

# Key names (normalised: snake_case, lower) that hold a credential wherever they appear.
_SECRET_KEYS = frozenset(
    {
        "token",
        "sig",
        "pwd",
        "auth",
        "authorization",
        "credentials",
        "hf_token",
        "api_token",
        "id_token",
        "github_token",
        "wandb_api_key",
        "pw",
    }
)
_MIN_SECRET_VALUE = 8
# Environment variables named like credentials that hold none, and ordinary ones whose names hold a
# credential word (`PWD` is the working directory: masking it hid every path, issue 39).
_NOT_SECRET_ENV = frozenset(
    {
        "google_application_credentials",
        "aws_shared_credentials_file",
        "pwd",
        "oldpwd",
        "home",
        "path",
        "user",
        "logname",
        "shell",
        "ssh_auth_sock",
    }
)
# Words of an environment variable's `_`-separated name that mark a credential, and parts anywhere in it.
_SECRET_ENV_WORDS = frozenset({"key", "keys", "token", "tokens", "pass", "pwd", "pw", "auth", "sig"})
_SECRET_ENV_PARTS = (
    "secret",
    "webhook",
    "credential",
    "password",
    "passwd",
    "passphrase",
    "apikey",
    "api_key",
)
SECRET_ENV_VAR = "FOUNDRY_SECRET_ENV"
"""Comma-separated names or shell patterns (`MY_*_SALT`) of more environment variables to treat as secrets."""
_SECRET_KEY_PARTS = (
    "password",
    "passwd",
    "secret",
    "api_key",
    "apikey",
    "private_key",
    "account_key",
    "access_key",
    "connection_string",
    "credential",
    "signature",
    "bearer",
)
# Tokenizer special-token fields end in `_token` but hold no secret.
_NOT_SECRET_TOKENS = frozenset(
    {"pad_token", "eos_token", "bos_token", "unk_token", "sep_token", "cls_token", "mask_token"}
)
# Azure SAS fields and other signing parameters whose names say nothing about secrecy.
_SECRET_PARAMS = frozenset(
    {"se", "sp", "sv", "st", "sr", "si", "spr", "skoid", "sktid", "skt", "ske", "sks", "skv", "policy"}
)
_PARAM_HINT = re.compile(r"sig|key|token|secret|credential|passw|auth")

_SCHEME = r"[A-Za-z][A-Za-z0-9+.\-]*://"
# scheme://<userinfo>@ (the user info stops at the first / ? # @ or whitespace)
_USERINFO = re.compile(rf"({_SCHEME})[^/?#@\s'\"]*@")
# ?name=value &name=value #name=value ;name=value (query strings, fragments, connection strings)
_PARAM = re.compile(r"([?&#;])([\w.\-~%]+)=([^&#\s,;'\"\])}]*)")
# name=value anywhere (Hydra overrides `+a.b.token=x`, `AWS_SECRET_ACCESS_KEY=...`): the last dotted
# component of the name decides
_ASSIGN = re.compile(r"(?<![\w.\-])([A-Za-z_][\w.\-]*)=('[^']*'|\"[^\"]*\"|\[[^\]]*\]|[^\s,&;'\"\])}]*)")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _normalise(name: str) -> str:
    return _CAMEL.sub("_", name.strip()).lower().replace("-", "_")


def is_secret_key(name: object) -> bool:
    """True when a mapping key (or ``key=`` name) names a credential: ``password``, ``aws_secret_access_key``,
    ``AccountKey``, ``sas_token``, ``hf_token``, ... (tokenizer fields such as ``pad_token`` are not)."""
    if not isinstance(name, str) or not name:
        return False
    key = _normalise(name)
    if key in _SECRET_KEYS:
        return True
    if key.endswith("_token") and key not in _NOT_SECRET_TOKENS:
        return True
    return any(part in key for part in _SECRET_KEY_PARTS)


def is_secret_param(name: str) -> bool:
    """True for URL query (or fragment) parameter names that carry a signature or credential."""
    low = name.lower()
    if low in _SECRET_PARAMS or low.startswith(("x-amz-", "x-goog-")):
        return True
    return bool(_PARAM_HINT.search(low)) or is_secret_key(name)


def _redact_params(text: str) -> str:
    return _PARAM.sub(
        lambda m: f"{m.group(1)}{m.group(2)}={MASK}" if is_secret_param(m.group(2)) else m.group(0), text
    )


def redact_url(url: str) -> str:
    """The URL normalised for an error message: user info and secret query parameters masked, fragment
    dropped (``https://u:p@host/a?sig=x#f`` -> ``https://***@host/a?sig=***``)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparseable url>"
    netloc = parts.hostname or ""
    if port:
        netloc += f":{port}"
    if parts.username or parts.password:
        netloc = f"{MASK}@" + netloc
    query = _redact_params("?" + parts.query)[1:] if parts.query else ""
    return urlunsplit((parts.scheme, netloc if parts.scheme else parts.netloc, parts.path, query, ""))


def _user_patterns() -> list[str]:
    return [p.strip().lower() for p in os.environ.get(SECRET_ENV_VAR, "").split(",") if p.strip()]


def is_secret_env(name: str, *, patterns: list[str] | None = None) -> bool:
    """Whether the environment variable ``name`` holds a credential, judged by its name (see the module note):
    ``AWS_ACCESS_KEY_ID`` (half of a key pair), ``DB_PASS``, ``MYSQL_PWD``, ``SLACK_WEBHOOK_URL`` are;
    ``PWD``, ``HOME``, ``TOKENIZERS_PARALLELISM`` and paths to credential files are not. `patterns`: the
    user's list (``$FOUNDRY_SECRET_ENV``, read when not given)."""
    low = name.lower()
    if any(fnmatch.fnmatchcase(low, p) for p in (_user_patterns() if patterns is None else patterns)):
        return True
    if low in _NOT_SECRET_ENV:
        return False
    words = set(low.split("_"))
    return bool(words & _SECRET_ENV_WORDS) or any(p in low for p in _SECRET_ENV_PARTS) or is_secret_key(low)


def secret_env_values() -> list[str]:
    """The values of this process's credential environment variables (``is_secret_env``), each with its
    URL-encoded forms (a secret inside a URL's query), longest first."""
    values: set[str] = set()
    # once per call: this runs for every line printed
    patterns = _user_patterns()
    for key, value in os.environ.items():
        if len(value) >= _MIN_SECRET_VALUE and is_secret_env(key, patterns=patterns):
            values |= {value, quote(value, safe=""), quote_plus(value), quote(value)}
    return sorted(values, key=len, reverse=True)


def _mask_values(text: str) -> str:
    for value in secret_env_values():
        if value in text:
            text = text.replace(value, MASK)
    return text


def redact_text(text: str) -> str:
    """``text`` with every embedded secret masked and everything else verbatim.

    Masks URL user info, secret query/fragment parameters, and the value of ``name=value`` pairs whose name
    (its last dotted component) is a credential key, so it also serves Hydra override strings
    (``+variables.token=abc`` -> ``+variables.token=***``) and connection strings (``AccountKey=***;``).
    """
    if not text:
        return text
    out = _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    out = _redact_params(_mask_values(out))
    return _ASSIGN.sub(
        lambda m: f"{m.group(1)}={MASK}" if is_secret_key(m.group(1).rsplit(".", 1)[-1]) else m.group(0),
        out,
    )


def _mask_all(obj: Any) -> Any:
    """Every string leaf masked (the value of a credential key that is a mapping or list)."""
    if isinstance(obj, str):
        return MASK if obj else obj
    if isinstance(obj, Mapping):
        return {k: _mask_all(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _mask_all(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list | tuple):
        return type(obj)(_mask_all(v) for v in obj) if isinstance(obj, tuple) else [_mask_all(v) for v in obj]
    return obj


def redact_value(obj: Any, *, key: object = None) -> Any:
    """A redacted copy of a config tree (the input is never mutated).

    Walks mappings, lists, tuples and dataclass instances (which become dicts, as `dataclasses.asdict`
    would make them); strings go through `redact_text`; the value of a credential key (`is_secret_key`) is
    masked whole (every string inside it, when it is a mapping or list). Other values are returned as is.

    Args:
        obj: The value to redact (a dataclass config, a dict from `OmegaConf.to_container`, a string, ...).
        key: The mapping key `obj` is stored under, when known.
    """
    if is_secret_key(key):
        return _mask_all(obj)
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, Mapping):
        return {(redact_text(k) if isinstance(k, str) else k): redact_value(v, key=k) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: redact_value(getattr(obj, f.name), key=f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return tuple(redact_value(v) for v in obj)
    if isinstance(obj, Sequence) and not isinstance(obj, bytes | bytearray):
        return [redact_value(v) for v in obj]
    return obj


def masked_traceback(err: BaseException) -> str:
    """`err`'s traceback as Python prints it, every secret masked (`redact_text`): exception messages carry
    URLs, overrides and environment values (a `TransientStorageError` printed a `data.remote` URL with its
    key)."""
    return redact_text("".join(traceback.format_exception(err)))


def _hook(kind: type[BaseException], err: BaseException, tb: Any) -> None:
    if err.__traceback__ is None:
        err = err.with_traceback(tb)
    sys.stderr.write(masked_traceback(err))
    sys.stderr.flush()


def _thread_hook(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is not None and not isinstance(args.exc_value, SystemExit):
        sys.stderr.write(f"Exception in thread {args.thread.name if args.thread else '?'}:\n")
        _hook(args.exc_type, args.exc_value, args.exc_traceback)


def install_masked_excepthook() -> None:
    """Every uncaught exception of this process (main thread and threads) is printed through
    `masked_traceback`. Called once by each entry point (`train.py`'s `run_cli`, the tools' `run_tool`);
    idempotent."""
    sys.excepthook = _hook
    threading.excepthook = _thread_hook
