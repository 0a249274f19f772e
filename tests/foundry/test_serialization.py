"""foundry.serialization.load_file: weights-only unless opted in; a pickle is refused naming the file."""

from __future__ import annotations

import pytest
import torch

from foundry.models.export import load_state_dict_file
from foundry.serialization import load_file


class _Payload:
    def __reduce__(self):
        return (print, ("pickled code ran",))


def test_tensors_load(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"model": {"w": torch.ones(2)}}, path)
    assert torch.equal(load_file(str(path), allow_pickle=False)["model"]["w"], torch.ones(2))
    assert torch.equal(load_state_dict_file(path)["w"], torch.ones(2))


def test_a_pickle_is_refused_naming_the_file_and_the_opt_in(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    torch.save({"x": _Payload()}, path)
    with pytest.raises(ValueError, match=r"evil\.pt.*pickled.*checkpoint\.allow_pickle=true"):
        load_file(str(path), allow_pickle=False)
    with pytest.raises(ValueError, match=r"evil\.pt.*safetensors"):
        load_state_dict_file(path)
    assert "pickled code ran" not in capsys.readouterr().out
