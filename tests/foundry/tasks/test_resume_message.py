"""The resume-mismatch message names the run and the checkpoint, offers a new `run_name=` first, and offers
`data.on_mixture_change=continue` only for a run the user named."""

from __future__ import annotations

from foundry.errors import ResumeMismatch
from foundry.tasks.resume_message import resume_refusal

MIXTURE = ResumeMismatch(
    "data: ...",
    detail="the resume state does not match this dataset: streams_fingerprint: the stream mixture changed: "
    "stream /mix/c4/train added (766 samples per epoch)",
    what="data",
    mixture_changed=True,
)
CKPT = "outputs/quickstart/checkpoints/ep0-ba600"


def test_a_named_run_is_offered_a_new_run_name_first_then_continue():
    text = str(resume_refusal(MIXTURE, run_name="quickstart", checkpoint=CKPT, named=True))
    assert text.startswith(
        f"run 'quickstart' cannot resume from its checkpoint {CKPT}: it was trained with other data"
    )
    assert "stream /mix/c4/train added" in text and "the resume state does not match" not in text
    assert "run_name=" in text and "data.on_mixture_change=continue" in text
    assert text.index("run_name=") < text.index("data.on_mixture_change=continue")


def test_an_unnamed_run_is_not_offered_to_continue_on_the_changed_mixture():
    text = str(resume_refusal(MIXTURE, run_name="pretrain-mpt-tiny-1", checkpoint=CKPT, named=False))
    assert "run 'pretrain-mpt-tiny-1'" in text and CKPT in text and "pass run_name=<new name>" in text
    assert "on_mixture_change" not in text


def test_other_data_settings_or_another_model_are_not_offered_continue():
    data = ResumeMismatch("x", detail="epoch_size: state has 1, dataset has 2", what="data")
    text = str(resume_refusal(data, run_name="r", checkpoint=CKPT, named=True))
    assert "on_mixture_change" not in text and "restore its data settings" in text
    model = ResumeMismatch(
        "x", detail="a different model config:\n  model.n_layers: checkpoint 2, config 4", what="model"
    )
    text = str(resume_refusal(model, run_name="r", checkpoint=CKPT, named=True))
    assert "model.n_layers: checkpoint 2, config 4" in text and "on_mixture_change" not in text
    assert text.index("run_name=") < text.index("restore those values")
