"""`foundry.env_refs`: records keep `${oc.env:...}` unresolved (issue 39, secrets by source)."""

from __future__ import annotations

from omegaconf import OmegaConf

from foundry.env_refs import env_refs, escape_env, keep_env_refs, record_container


def test_escape_touches_only_live_env_interpolations() -> None:
    assert escape_env("${oc.env:A}") == "\\${oc.env:A}"
    assert escape_env("\\${oc.env:A}") == "\\${oc.env:A}"  # already literal
    assert escape_env("\\\\${oc.env:A}") == "\\\\\\${oc.env:A}"  # an escaped backslash, then a live one
    assert escape_env({"a": ["${oc.env:A,${oc.env:B}}", 3]}) == {"a": ["\\${oc.env:A,\\${oc.env:B}}", 3]}
    assert escape_env("${x.y}") == "${x.y}"


def test_a_record_resolves_everything_but_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("SITE", "corp-7h2")
    cfg = OmegaConf.create({
        "site": "dc-${oc.env:SITE}", "copy": "${site}/x", "n": 3, "m": "${n}",
        "lit": "\\${oc.env:SITE}", "dflt": "${oc.env:NOT_SET_ANYWHERE,fallback}",
    })  # fmt: skip
    rec = record_container(cfg)
    assert rec == {"site": "dc-${oc.env:SITE}", "copy": "dc-${oc.env:SITE}/x", "n": 3, "m": 3,
                   "lit": "${oc.env:SITE}", "dflt": "${oc.env:NOT_SET_ANYWHERE,fallback}"}  # fmt: skip
    assert "corp-7h2" not in str(rec)
    refs = env_refs(cfg)
    assert refs == {"site": ("dc-corp-7h2", "dc-${oc.env:SITE}"), "copy": ("dc-corp-7h2/x", "dc-${oc.env:SITE}/x"),
                    "dflt": ("fallback", "${oc.env:NOT_SET_ANYWHERE,fallback}")}  # fmt: skip


def test_a_resolver_that_needs_the_value_falls_back_leaf_by_leaf(monkeypatch) -> None:
    """`oc.decode` reads its (escaped) argument again: the leaves holding the value are recorded as written."""
    monkeypatch.setenv("STEPS", "70000")
    cfg = OmegaConf.create(
        {"steps": "${oc.decode:${oc.env:STEPS}}", "twice": "${steps}", "plain": "${oc.decode:'5'}"}
    )
    rec = record_container(cfg)
    assert rec == {"steps": "${oc.decode:${oc.env:STEPS}}", "twice": "${steps}", "plain": 5}


def test_no_env_no_work() -> None:
    assert env_refs(OmegaConf.create({"a": "${b}", "b": 1})) == {}


def test_typed_records_get_the_text_back_where_the_value_is_unchanged() -> None:
    refs = {"data.remote": ("s3://b/k", "s3://b/${oc.env:K}"), "trainer.steps": (7, "${oc.env:STEPS}"),
            "tags.1": ("x", "${oc.env:T}")}  # fmt: skip
    tree = {"data": {"remote": "s3://b/k"}, "trainer": {"steps": 14}, "tags": ("a", "x")}
    assert keep_env_refs(tree, refs) == {"data": {"remote": "s3://b/${oc.env:K}"}, "trainer": {"steps": 14},
                                         "tags": ["a", "${oc.env:T}"]}  # fmt: skip
    assert tree["data"]["remote"] == "s3://b/k"


def test_a_recorded_interpolation_resolves_when_read_back(monkeypatch, tmp_path) -> None:
    """run.json keeps `${oc.env:FOUNDRY_CACHE,...}/tokenizer.json`; `generate.py`/exports read the run's tokenizer
    from it and resolve it where they run."""
    import json

    from foundry.env_refs import resolve_recorded
    from foundry.tokenizers import run_tokenizer_config

    monkeypatch.setenv("FOUNDRY_CACHE", str(tmp_path / "cache"))
    recorded = "${oc.env:FOUNDRY_CACHE,${oc.env:HOME,.}/.cache/foundry}/tok.json"
    assert resolve_recorded({"name": recorded, "n": 1}) == {"name": f"{tmp_path}/cache/tok.json", "n": 1}
    (tmp_path / "run.json").write_text(json.dumps({"config": {"tokenizer": {"name": recorded}}}))
    assert run_tokenizer_config(str(tmp_path)).name == f"{tmp_path}/cache/tok.json"
