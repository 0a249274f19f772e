"""`--storage-profiles FILE` for command-line tools: the same per-store settings a training run uses.

Design note: every reader and writer resolves an `s3://` URL through `streaming.storage.profiles.profile_for`,
which reads `STREAMING_STORAGE_PROFILES`; so a tool only has to install the profiles before it opens a URL,
and the processes it starts inherit them. The option accepts what that variable accepts (a JSON/YAML file of
`{prefix: settings}`) and also a foundry `storage` config file (`conf/storage/<name>.yaml`: its `profiles:`
mapping or its `profiles_file:`), so `python -m streaming`, the converters in `scripts/data_prep` and
`train.py storage=<name>` can share one file. Without the option the environment decides, as before.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import Any

from streaming.storage.profiles import parse_profiles, use_profiles

__all__ = ["add_storage_option", "apply_storage_option", "profiles_from_file"]

HELP = (
    "per-store S3 settings by URL prefix: a JSON/YAML profiles file (what STREAMING_STORAGE_PROFILES may "
    "name) or a foundry storage config (conf/storage/<name>.yaml); default: the environment"
)


def add_storage_option(parser: argparse.ArgumentParser, flag: str = "--storage-profiles") -> None:
    """Adds the option (`args.storage_profiles`)."""
    parser.add_argument(flag, dest="storage_profiles", default=None, metavar="FILE", help=HELP)


def profiles_from_file(path: str) -> dict[str, Any]:
    """`{prefix: settings}` from a profiles file or a foundry storage config file; validated.

    Raises:
        ValueError: The file is missing, unparsable, or a profile is bad (naming the file and the profile).
    """
    if not os.path.isfile(path):
        raise ValueError(f"--storage-profiles {path!r}: no such file")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        data = json.loads(text) if path.endswith(".json") else _yaml(text)
    except ValueError as err:
        raise ValueError(f"--storage-profiles {path!r}: cannot parse it: {err}") from None
    if isinstance(data, Mapping) and ("profiles" in data or "profiles_file" in data or "defaults" in data):
        if data.get("profiles_file"):  # a foundry storage config naming a profiles file
            # relative to the cwd, as in foundry
            return profiles_from_file(str(data["profiles_file"]))
        data = data.get("profiles") or {}
    if not isinstance(data, Mapping):
        raise ValueError(f"--storage-profiles {path!r}: expected a mapping of URL prefix -> settings")
    try:
        parse_profiles(data)
    except ValueError as err:
        raise ValueError(f"--storage-profiles {path!r}: {err}") from None
    return dict(data)


def apply_storage_option(path: str | None) -> None:
    """Installs the profiles of `path` for this process and its children (None: leave the environment)."""
    if path is None:
        return
    profiles = profiles_from_file(path)
    if profiles:  # none (conf/storage/default.yaml): the environment decides, as for train.py
        use_profiles(profiles)


def _yaml(text: str) -> Any:  # parsed YAML
    # PyYAML is imported only when a YAML file is given, so that `import streaming` stays cheap.
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(str(err)) from None
