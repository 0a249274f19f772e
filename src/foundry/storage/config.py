"""The `storage` group's schema: per-store S3 settings by URL prefix for everything a run reads and writes.

Design note: foundry only declares and validates the schema; the settings themselves belong to
`streaming.storage.profiles`, which every reader and writer of object storage (data streams, checkpoint
folders, `open_url`, the converters, `foundry.sync`) consults through one function, `profile_for(url)`.
`apply_storage` hands this run's profiles to streaming by `use_profiles`, which sets
`STREAMING_STORAGE_PROFILES`, so DataLoader workers and subprocesses inherit them. A profile names where the
credentials are (environment variables, an AWS profile), never the secrets: a secret-looking key is refused at
compose time like any typo. With no profiles, `S3_ENDPOINT_URL` and the AWS chain apply as before.

    storage:
      profiles:
        "s3://r2-bucket/": {endpoint_url: "https://<account>.r2.cloudflarestorage.com", region: auto,
                            access_key_id_env: R2_ACCESS_KEY_ID, secret_access_key_env: R2_SECRET_ACCESS_KEY}
        "s3://aws-bucket/": {aws_profile: prod, region: us-east-1}
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from streaming.storage.profiles import ENV_VAR, parse_profiles, use_profiles

__all__ = ["StorageConfig", "StorageProfileConfig", "apply_storage"]


@dataclass
class StorageProfileConfig:
    """One store's settings (the fields of `streaming.storage.profiles.StorageProfile`)."""

    endpoint_url: str | None = None
    """The store's S3 endpoint (R2, MinIO, ...); null = AWS's own."""
    region: str | None = None
    aws_profile: str | None = None
    """A named profile of ~/.aws/config and ~/.aws/credentials."""
    access_key_id_env: str | None = None
    """The name of the environment variable holding the access key id (never the key itself)."""
    secret_access_key_env: str | None = None
    session_token_env: str | None = None
    addressing_style: str | None = None
    """`path`, `virtual` or `auto` (boto3's default)."""
    unsigned: bool = False
    """A public bucket: unsigned reads."""


@dataclass
class StorageConfig:
    """`storage.profiles`: URL prefix (`s3://bucket/` or `s3://bucket/path/`) -> settings;
    longest prefix wins."""

    profiles: dict[str, StorageProfileConfig] = field(default_factory=dict)
    profiles_file: str | None = None
    """A JSON/YAML file of profiles instead (what `STREAMING_STORAGE_PROFILES` may name);
    not with `profiles`."""

    def __post_init__(self) -> None:
        if self.profiles and self.profiles_file:
            raise ValueError("storage: set profiles or profiles_file, not both")
        if self.profiles_file and not os.path.isfile(self.profiles_file):
            raise ValueError(f"storage.profiles_file={self.profiles_file!r}: no such file")
        try:
            parse_profiles(self._plain())
        except ValueError as err:
            raise ValueError(f"storage.profiles: {err}") from None

    def _plain(self) -> dict[str, dict[str, object]]:
        return {prefix: asdict(p) for prefix, p in self.profiles.items()}


def apply_storage(cfg: StorageConfig) -> None:
    """Install this run's profiles for this process and its children (nothing configured: leave the
    environment's `STREAMING_STORAGE_PROFILES`, if any, as it is)."""
    if cfg.profiles_file:
        os.environ[ENV_VAR] = os.path.abspath(cfg.profiles_file)
    elif cfg.profiles:
        use_profiles(cfg._plain())
