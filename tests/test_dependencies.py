"""Dependency ranges, the lowest-versions file and the lock agree with pyproject.toml (no install, no network).

- every runtime dependency has a lower and an upper bound (torch is pinned, see the README);
- `requirements/lowest.txt` pins each runtime dependency at exactly its lower bound, so `make test-compat`
  tests the bounds we publish;
- `requirements/dev.lock` (what `make install` and CI install) pins one version of everything the dev set
  needs, each inside pyproject's range, and nothing machine-specific (no torch build, no local paths).
- `requirements/gpu-image.txt` (the GPU machine's releases, which `make gpu-check` runs under) is inside the ranges.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SELF = canonicalize_name(PROJECT["name"])


def _pins(path: Path) -> dict[str, Version]:
    """`name==version` lines of a requirements file (comments and options ignored)."""
    out: dict[str, Version] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            out[canonicalize_name(req.name)] = Version(spec.version)
    return out


def _closure(extras: list[str]) -> list[Requirement]:
    """The requirements of the base dependencies plus `extras`, following the project's self-references."""
    seen: set[str] = set()
    todo, out = list(extras), [Requirement(r) for r in PROJECT["dependencies"]]
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for line in PROJECT["optional-dependencies"][extra]:
            req = Requirement(line)
            if canonicalize_name(req.name) == SELF:
                todo += sorted(req.extras)
            else:
                out.append(req)
    return out


def test_every_runtime_dependency_has_a_lower_and_an_upper_bound():
    for line in PROJECT["dependencies"]:
        req = Requirement(line)
        ops = {s.operator for s in req.specifier}
        if req.name == "torch":
            assert ops == {"=="}, line
            continue
        assert ">=" in ops and "<" in ops, f"{line}: give a tested lower bound and the next untested major"


def test_lowest_pins_every_runtime_dependency_at_its_lower_bound():
    lowest = _pins(ROOT / "requirements" / "lowest.txt")
    for line in PROJECT["dependencies"]:
        req = Requirement(line)
        if req.name == "torch":
            continue
        (low,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert lowest.get(canonicalize_name(req.name)) == low, (
            f"{line}: requirements/lowest.txt must pin {low}"
        )
    peft = Requirement(PROJECT["optional-dependencies"]["peft"][0])
    (low,) = [Version(s.version) for s in peft.specifier if s.operator == ">="]
    assert lowest["peft"] == low


def test_the_lock_pins_the_whole_dev_set_inside_its_ranges():
    lock_text = (ROOT / "requirements" / "dev.lock").read_text()
    lock = _pins(ROOT / "requirements" / "dev.lock")
    assert "torch" not in lock and SELF not in lock  # torch: constraints.txt; the project: `pip install -e .`
    assert "+cpu" not in lock_text and "file://" not in lock_text and " @ " not in lock_text
    for req in _closure(["dev"]):
        if req.name == "torch" or (req.marker is not None and not req.marker.evaluate()):
            continue
        name = canonicalize_name(req.name)
        assert name in lock, f"{req} is missing from requirements/dev.lock: run `make lock`"
        assert req.specifier.contains(lock[name], prereleases=True), (
            f"requirements/dev.lock pins {name}=={lock[name]}, outside {req}: run `make lock`"
        )


def test_constraints_pin_torch_to_the_cpu_wheel_version_without_a_local_label():
    text = (ROOT / "constraints.txt").read_text()
    assert re.search(r"^torch==2\.13\.0$", text, re.M)


def test_the_gpu_images_packages_are_inside_our_ranges():
    """`make gpu-check` runs under the GPU image's own releases: our ranges must admit them (make test-compat)."""
    image = _pins(ROOT / "requirements" / "gpu-image.txt")
    assert "transformers" in image
    for req in _closure(["peft", "eval"]):
        name = canonicalize_name(req.name)
        if name in image:
            assert req.specifier.contains(image[name], prereleases=True), (
                f"requirements/gpu-image.txt: the GPU machine has {name}=={image[name]}, outside {req}"
            )
