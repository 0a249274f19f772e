"""`stackbase.limits`: each limit on untrusted input has a default and a variable to raise it (issue 39)."""

from __future__ import annotations

import pytest

from stackbase.limits import LIMITS, hint, limit


def test_defaults_and_overrides(monkeypatch) -> None:
    assert limit("LINE_MB") == LIMITS["LINE_MB"][0] == 16
    monkeypatch.setenv("FOUNDRY_MAX_LINE_MB", "64")
    assert limit("LINE_MB") == 64
    assert (
        hint("LINE_MB") == "if the file is trusted, raise the limit with FOUNDRY_MAX_LINE_MB=<more> (now 64)"
    )


@pytest.mark.parametrize("text", ["0", "-3", "lots", "1.5"])
def test_a_bad_value_names_the_variable(monkeypatch, text) -> None:
    monkeypatch.setenv("FOUNDRY_MAX_YAML_NODES", text)
    with pytest.raises(ValueError, match="FOUNDRY_MAX_YAML_NODES=.*positive whole number"):
        limit("YAML_NODES")


def test_the_readers_take_their_limits_from_the_environment(monkeypatch, tmp_path) -> None:
    from stackbase.bounded import TooLarge, check_yaml_expansion, parse_json, read_text_lines

    path = tmp_path / "task.jsonl"
    path.write_bytes(b"x" * (3 << 19) + b"\n")  # a 1.5 MiB line
    monkeypatch.setenv("FOUNDRY_MAX_LINE_MB", "1")
    with pytest.raises(TooLarge, match="FOUNDRY_MAX_LINE_MB=<more> \\(now 1\\)"):
        list(read_text_lines(path))
    monkeypatch.setenv("FOUNDRY_MAX_LINE_MB", "2")
    assert len(list(read_text_lines(path))) == 1
    bomb = "a: &a [1, 1, 1]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n"  # 3 + 9 + 27 nodes and containers
    monkeypatch.setenv("FOUNDRY_MAX_YAML_NODES", "20")
    with pytest.raises(TooLarge, match="FOUNDRY_MAX_YAML_NODES"):
        check_yaml_expansion(bomb, source="x.yaml")
    monkeypatch.delenv("FOUNDRY_MAX_YAML_NODES")
    check_yaml_expansion(bomb, source="x.yaml")
    monkeypatch.setenv("FOUNDRY_MAX_JSON_DEPTH", "3")
    with pytest.raises(TooLarge, match="FOUNDRY_MAX_JSON_DEPTH"):
        parse_json("[[[[1]]]]", source="index.json")


def test_security_md_lists_every_limit_with_its_default() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "SECURITY.md").read_text()
    for name, (default, _) in LIMITS.items():
        assert f"| `FOUNDRY_MAX_{name}` | {default:,} |" in text, name
