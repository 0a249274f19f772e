"""Per-store S3 settings chosen by URL prefix: one run can read data from one store and write checkpoints to
another (Cloudflare R2 and AWS, two MinIOs, ...).

Design note: the profiles travel in one environment variable, ``STREAMING_STORAGE_PROFILES``, holding either
the JSON mapping itself or the path of a ``.json`` / ``.yaml`` file with it::

    {"s3://r2-bucket/": {"endpoint_url": "https://<account>.r2.cloudflarestorage.com", "region": "auto",
                         "access_key_id_env": "R2_KEY_ID", "secret_access_key_env": "R2_SECRET"},
     "s3://aws-bucket/": {"aws_profile": "prod", "region": "us-east-1"}}

An environment variable (not a module-level registry) because DataLoader workers, torchrun ranks and the
converters' subprocesses must all see the same settings: ``use_profiles`` (the Python API, used by foundry's
``storage`` config) writes it, every process reads it. Configs never hold secrets: credentials are named by
environment variable (``*_env``) or AWS profile (``aws_profile``); a secret-looking key is refused.

``profile_for(url)`` is the only place that decides an S3 URL's endpoint, region, credentials and addressing
style: the longest matching prefix wins; with none, the default profile keeps the old behaviour
(``S3_ENDPOINT_URL``, ``S3_UNSIGNED``, the standard AWS chain). A matching profile without ``endpoint_url``
means AWS's own endpoint (boto3's defaults), not ``S3_ENDPOINT_URL``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from functools import cache
from typing import Any

__all__ = ["ENV_VAR", "StorageProfile", "parse_profiles", "profile_for", "resolve", "use_profiles"]

ENV_VAR = "STREAMING_STORAGE_PROFILES"
_STYLES = ("auto", "path", "virtual")
_SECRET_KEYS = ("secret", "secret_access_key", "aws_secret_access_key", "access_key_id", "session_token")


@dataclass(frozen=True)
class StorageProfile:
    """S3 settings for the URLs under ``prefix`` (``""`` = the default profile, from the environment)."""

    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    aws_profile: str | None = None  # a named profile of ~/.aws/config and ~/.aws/credentials
    access_key_id_env: str | None = None  # names of environment variables holding the credentials
    secret_access_key_env: str | None = None
    session_token_env: str | None = None
    addressing_style: str | None = None  # "path" (MinIO, moto), "virtual" or "auto"
    unsigned: bool = False  # public bucket: unsigned requests

    def __post_init__(self) -> None:
        where = f"storage profile {self.prefix!r}"
        if self.prefix and not self.prefix.startswith("s3://"):
            raise ValueError(f"{where}: the prefix must be an s3:// URL prefix such as 's3://my-bucket/'")
        if self.addressing_style not in (None, *_STYLES):
            raise ValueError(
                f"{where}: addressing_style must be one of {_STYLES}, got {self.addressing_style!r}"
            )
        if (self.access_key_id_env is None) != (self.secret_access_key_env is None):
            raise ValueError(f"{where}: set both access_key_id_env and secret_access_key_env, or neither")
        if self.aws_profile and self.access_key_id_env:
            raise ValueError(f"{where}: set aws_profile or access_key_id_env/secret_access_key_env, not both")

    def credentials(self) -> tuple[str, str, str | None] | None:
        """``(key id, secret, session token)`` from the named environment variables, or None (AWS chain).

        Raises:
            PermissionError: A named variable is unset, naming it and the profile.
        """
        if self.access_key_id_env is None or self.secret_access_key_env is None:
            return None
        names = [self.access_key_id_env, self.secret_access_key_env]
        missing = [n for n in names if not os.environ.get(n)]
        if missing:
            raise PermissionError(
                f"storage profile {self.prefix!r}: environment variable {missing[0]} is not set "
                "(it holds this store's credentials)"
            )
        token = os.environ.get(self.session_token_env) if self.session_token_env else None
        return os.environ[names[0]], os.environ[names[1]], token


def _profile(prefix: str, settings: Any) -> StorageProfile:
    if not isinstance(settings, Mapping):
        raise ValueError(f"storage profile {prefix!r}: expected a mapping of settings, got {settings!r}")
    known = {f.name for f in fields(StorageProfile)} - {"prefix"}
    for key in settings:
        if key in _SECRET_KEYS:
            raise ValueError(
                f"storage profile {prefix!r}: {key!r} looks like a secret; never put secrets in profiles, "
                "name environment variables with access_key_id_env / secret_access_key_env instead"
            )
        if key not in known:
            raise ValueError(f"storage profile {prefix!r}: unknown setting {key!r}; known: {sorted(known)}")
    return StorageProfile(prefix=prefix, **dict(settings))


def parse_profiles(profiles: Mapping[str, Any]) -> tuple[StorageProfile, ...]:
    """Validated profiles from ``{prefix: {setting: value}}``.

    Raises:
        ValueError: A bad prefix or setting, naming the profile and the fix.
    """
    return tuple(_profile(str(prefix), settings) for prefix, settings in profiles.items())


@cache
def _load(raw: str) -> tuple[StorageProfile, ...]:
    text = raw
    if not raw.lstrip().startswith("{"):
        if not os.path.isfile(raw):
            raise ValueError(f"{ENV_VAR}={raw!r}: neither a JSON object nor an existing .json/.yaml file")
        with open(raw, encoding="utf-8") as f:
            text = f.read()
    try:
        data = json.loads(text) if raw.endswith(".json") or text.lstrip().startswith("{") else _yaml(text)
    except ValueError as err:
        raise ValueError(f"{ENV_VAR}: cannot parse the profiles: {err}") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"{ENV_VAR}: expected a mapping of URL prefix -> settings")
    return parse_profiles(data)


def _yaml(text: str) -> Any:
    # PyYAML is imported here, only for a YAML profiles file, so that `import streaming` stays cheap.
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(str(err)) from None


def resolve(url: str, profiles: tuple[StorageProfile, ...], environ: Mapping[str, str]) -> StorageProfile:
    """The profile for ``url``: the longest matching prefix, else the default one from ``environ``."""
    matches = [p for p in profiles if url.startswith(p.prefix)]
    if matches:
        return max(matches, key=lambda p: len(p.prefix))
    unsigned = environ.get("S3_UNSIGNED", "").lower() in ("1", "true", "yes")
    return StorageProfile(endpoint_url=environ.get("S3_ENDPOINT_URL") or None, unsigned=unsigned)


def profile_for(url: str) -> StorageProfile:
    """The S3 settings for ``url`` under the current ``STREAMING_STORAGE_PROFILES`` and environment."""
    raw = os.environ.get(ENV_VAR, "")
    return resolve(url, _load(raw) if raw.strip() else (), os.environ)


def use_profiles(profiles: Mapping[str, Any] | None) -> None:
    """Install ``{prefix: settings}`` for this process and the processes it starts (None clears them).

    Raises:
        ValueError: As ``parse_profiles``, before anything changes.
    """
    if not profiles:
        os.environ.pop(ENV_VAR, None)
        return
    parsed = parse_profiles(profiles)
    body = {
        p.prefix: {k: v for k, v in asdict(p).items() if k != "prefix" and v not in (None, False)}
        for p in parsed
    }
    os.environ[ENV_VAR] = json.dumps(body, sort_keys=True)
