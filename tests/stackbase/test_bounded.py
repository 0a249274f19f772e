"""`stackbase.bounded` (issue 39): nothing untrusted is inflated, expanded or read whole before its size is
checked: zip records (a Composer `.pt` bomb), YAML aliases (a translator bomb), text lines (an ICL task file)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from stackbase.bounded import (
    NotJSON,
    TooLarge,
    check_yaml_expansion,
    json_depth,
    parse_json,
    read_json,
    read_text_lines,
    read_zip_member,
)

REPO = Path(__file__).resolve().parents[2]


def _torch_zip(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _rewrite(blob: bytes, *, record: str, data: bytes, compress: bool) -> bytes:
    """`blob` (a torch zip) with the record ending in `record` replaced by `data`."""
    src, out = zipfile.ZipFile(io.BytesIO(blob)), io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if info.filename.endswith(record):
                dst.writestr(info.filename, data, zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED)
            else:
                dst.writestr(info, src.read(info.filename))
    return out.getvalue()


def test_a_record_larger_than_its_tensor_is_refused_before_inflating():
    """The reproduction: a small file whose storage record inflates far past what the pickle says."""
    from foundry.compat.composer.unpickle import load_torch_bytes

    blob = _torch_zip({"w": torch.ones(4)})
    bomb = _rewrite(blob, record="data/0", data=bytes(64 << 20), compress=True)
    assert len(bomb) < 1 << 20  # under 1 MB on disk, 64 MiB inflated
    with pytest.raises(TooLarge, match=r"record .*data/0 declares 67108864 bytes, its index says 16"):
        load_torch_bytes(io.BytesIO(bomb), source="bomb.pt")
    assert torch.equal(load_torch_bytes(io.BytesIO(blob), source="ok.pt")["w"], torch.ones(4))


def test_a_compressed_record_past_the_ratio_is_refused_even_when_its_size_matches():
    from foundry.compat.composer.unpickle import load_torch_bytes

    blob = _torch_zip({"w": torch.ones(16 << 20, dtype=torch.uint8)})  # the pickle declares 16 MiB
    bomb = _rewrite(blob, record="data/0", data=bytes(16 << 20), compress=True)
    with pytest.raises(TooLarge, match=r"would inflate \d+ bytes to 16777216 \(over 200x\): a zip bomb"):
        load_torch_bytes(io.BytesIO(bomb), source="bomb.pt")


def test_read_zip_member_checks_the_limit_and_reads_what_is_declared():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a", b"x" * 1000)
    with zipfile.ZipFile(buf) as z:
        assert read_zip_member(z, "a", source="t.zip", expected=1000) == b"x" * 1000
        with pytest.raises(TooLarge, match="over the limit of 10"):
            read_zip_member(z, "a", source="t.zip", limit=10)


def _yaml_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def test_a_yaml_bomb_is_refused_without_expanding():
    with pytest.raises(TooLarge, match="expand to over 10,000 nodes"):
        check_yaml_expansion(_yaml_bomb(), source="bomb.yaml")
    with pytest.raises(TooLarge, match="expand to over 10,000 nodes"):  # 9^5 nodes: OmegaConf took minutes
        check_yaml_expansion(_yaml_bomb(5), source="bomb.yaml")
    check_yaml_expansion(_yaml_bomb(3), source="small.yaml")  # 9^3 nodes: fine
    deep = "a: " + "[" * 100 + "]" * 100 + "\n"
    with pytest.raises(TooLarge, match="nested deeper than 64 levels"):
        check_yaml_expansion(deep, source="deep.yaml")
    check_yaml_expansion("a: [unclosed\n", source="bad.yaml")  # malformed: left to the loader's message


def test_the_translator_refuses_a_yaml_bomb_with_one_error_line(tmp_path):
    """The reproduction: 9 anchors x 9 aliases kept the translator silent until killed."""
    path = tmp_path / "bomb.yaml"
    path.write_text("model:\n  name: mpt_causal_lm\n" + _yaml_bomb())
    proc = subprocess.run([sys.executable, "-m", "foundry.compat.llmfoundry", str(path)], capture_output=True,
                          text=True, timeout=300, cwd=REPO)  # fmt: skip
    err = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2 and err[-1].startswith("error: ") and "nodes" in err[-1], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_a_line_over_the_limit_is_refused_naming_file_and_line(tmp_path):
    path = tmp_path / "task.jsonl"
    path.write_bytes(b'{"a": 1}\n' + b'{"q": "' + b"x" * 4096 + b'"}\n')
    assert list(read_text_lines(path, max_line_bytes=8192)) == ['{"a": 1}\n', '{"q": "' + "x" * 4096 + '"}\n']
    with pytest.raises(TooLarge, match=r"task.jsonl:2: a line longer than 1,024 bytes"):
        list(read_text_lines(path, max_line_bytes=1024))


def test_an_icl_task_file_with_a_20_mb_line_is_refused(tmp_path):
    """The reproduction: one 20 MB line gave no output for 5 minutes."""
    from foundry.eval.data import _read_jsonl

    path = tmp_path / "task.jsonl"
    path.write_bytes(b'{"context": "' + b"y" * (20 << 20) + b'", "continuation": " z"}\n')
    with pytest.raises(TooLarge, match=r"task.jsonl:1: a line longer than 16,777,216 bytes"):
        _read_jsonl(path)


# ---------------------------------------------------------------------------------------------------- JSON


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        (b"0", 0),
        (b'"[[["', 0),
        (b"[]", 1),
        (b'{"a": [1, {"b": "]]"}]}', 3),
        (b'["\\\\", ["\\"[", [[]]]]', 4),
        (b"[" * 7 + b"]" * 7, 6),  # counted to limit + 1
        (b"[[]", -1),
    ],
)
def test_json_depth_is_measured_on_the_text(text, depth):
    assert json_depth(text, limit=5) == depth


@pytest.mark.parametrize("deep", ["[" * 100_000 + "]" * 100_000, '{"a":' * 5000 + "0" + "}" * 5000])
def test_json_nested_past_the_limit_is_refused_before_parsing(deep):
    with pytest.raises(TooLarge, match=r"x\.json: JSON nested too deeply \(over 100 levels\)"):
        parse_json(deep, source="x.json")
    assert parse_json("[" * 100 + "]" * 100, source="x.json") is not None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\xff{}", r"x\.json: not UTF-8 text \(byte 0\)"),
        (b'{"a": 1,}', r"x\.json: not valid JSON \(Expecting property name .*: line 1 column 9\)"),
        (b"1" * 5000, r"x\.json: not valid JSON \(Exceeds the limit"),
        (b"", r"x\.json: not valid JSON"),
    ],
)
def test_what_is_not_json_is_one_error_naming_the_file(raw, message):
    with pytest.raises(NotJSON, match=message):
        parse_json(raw, source="x.json")


def test_read_json_stops_reading_at_the_limit(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"a": "x" * 1000}))
    assert read_json(path)["a"] == "x" * 1000
    with pytest.raises(TooLarge, match=r"big\.json: over 100 bytes"):
        read_json(path, max_bytes=100)
    with pytest.raises(FileNotFoundError):
        read_json(tmp_path / "absent.json")


def test_a_damaged_record_is_one_error_naming_the_file():
    """The fuzz suite's: a flipped byte inside a record ended in `zipfile.BadZipFile` (Bad CRC-32)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a", b"x" * 1000)
    data = bytearray(buf.getvalue())
    data[data.index(b"x" * 1000) + 10] ^= 0xFF
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        with pytest.raises(ValueError, match=r"t\.zip: record a is damaged \(BadZipFile: Bad CRC-32"):
            read_zip_member(z, "a", source="t.zip")


@pytest.mark.parametrize(
    ("text", "message"),
    [  # the fuzz suite's (tests/fuzz/test_fuzz_llmfoundry_yaml.py): each was a RecursionError
        ("a: &x {b: *x}\n", r"r\.yaml: an anchor contains an alias of itself \(line 1\)"),
        ("a: " + "{b: " * 1100 + "1" + "}" * 1100 + "\n", r"r\.yaml: nested deeper than 64 levels"),
    ],
)
def test_a_recursive_alias_or_a_deep_flow_mapping_is_refused(text, message):
    with pytest.raises(TooLarge, match=message):
        check_yaml_expansion(text, source="r.yaml")
