"""trainer.compile=blocks: one graph for every layer, no recompilation storm, eager eval/generation, same loss."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter

from foundry.models import MPTModelConfig, build_model
from foundry.parallel.wrap import apply_activation_checkpointing, transformer_blocks
from foundry.train.compile import compile_blocks, compile_loss, compile_model, normalize_compile
from foundry.train.config import TrainerConfig


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _model(seed: int = 0, **kw) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = {"d_model": 32, "n_heads": 2, "n_layers": 4, "max_seq_len": 16, "vocab_size": 64, **kw}
    return build_model(MPTModelConfig(**cfg))


def _ids(bs: int = 4, seq: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 64, (bs, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        (False, "none"),
        (None, "none"),
        ("false", "none"),
        (True, "model"),
        ("true", "model"),
        ("blocks", "blocks"),
        ("Blocks", "blocks"),
        ("model", "model"),
    ],
)
def test_trainer_compile_values(value, mode):
    assert normalize_compile(value) == mode
    assert TrainerConfig(compile=value).compile == mode


def test_an_unknown_compile_value_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"trainer.compile='layers': use false, true .* or blocks"):
        TrainerConfig(compile="layers")


def test_one_graph_serves_every_layer_and_a_new_microbatch_adds_one():
    model = _model()
    counter = CompileCounter()
    assert compile_blocks(model, backend=counter) == 4
    ids = _ids()
    model(ids, labels=ids).loss.backward()
    assert counter.frame_count == 1  # 4 layers, one graph
    model(ids, labels=ids).loss.backward()
    assert counter.frame_count == 1  # no recompilation at the next step
    half = ids[:2]
    model(half, labels=half).loss.backward()  # auto micro-batching halved the microbatch
    assert counter.frame_count == 2
    model(ids, labels=ids).loss.backward()  # back to the first size: its graph is still cached
    assert counter.frame_count == 2


def test_changing_shapes_recompile_once_not_once_per_shape():
    """Padded finetuning batches: every row length differs; automatic dynamic shapes compile twice in all."""
    model = _model()
    counter = CompileCounter()
    compile_blocks(model, backend=counter)
    for seq in (16, 9, 12, 5, 14, 7):
        ids = _ids(3, seq)
        model(ids, labels=ids).loss.backward()
    assert counter.frame_count == 2
    static = _model()
    counter_static = CompileCounter()
    compile_blocks(static, backend=counter_static, dynamic=False)  # trainer.compile_dynamic=false
    for seq in (16, 9, 12):
        ids = _ids(3, seq)
        static(ids, labels=ids).loss.backward()
    assert counter_static.frame_count == 3  # one static graph per shape


def test_eval_and_generation_run_eagerly():
    model = _model()
    counter = CompileCounter()
    compile_blocks(model, backend=counter)
    model.eval()
    with torch.no_grad():
        for bs, seq in ((1, 5), (3, 9), (2, 16)):  # eval/ICL shapes vary batch to batch
            model(_ids(bs, seq))
    out = model.generate(_ids(1, 4), max_new_tokens=3, do_sample=False, use_cache=True)
    assert out.shape == (1, 7)
    assert counter.frame_count == 0


def test_compiling_twice_keeps_one_wrapper_and_names_do_not_change():
    model = _model()
    names = list(model.state_dict())
    compile_blocks(model, backend=CompileCounter())
    compile_blocks(model, backend=CompileCounter())
    for block in transformer_blocks(model):
        assert not hasattr(block.forward.__wrapped__, "__wrapped__")
    assert list(model.state_dict()) == names  # checkpoints are unchanged


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    loss = model(ids, labels=ids).loss
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "activation-checkpointing"])
@pytest.mark.parametrize("loss_fn", ["torch_crossentropy", "chunked_crossentropy"])
def test_loss_and_gradients_equal_eager_through_aot_autograd(checkpointing, loss_fn):
    eager, compiled = _model(loss_fn=loss_fn), _model(loss_fn=loss_fn)
    if checkpointing:
        apply_activation_checkpointing(compiled)
    compile_blocks(compiled, backend="aot_eager")  # AOTAutograd's joint graph, without code generation
    ids = _ids()
    loss_e, grads_e = _loss_and_grads(eager, ids)
    loss_c, grads_c = _loss_and_grads(compiled, ids)
    assert loss_c == pytest.approx(loss_e, abs=1e-6)
    for name, g in grads_e.items():
        torch.testing.assert_close(grads_c[name], g, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("loss_fn", ["torch_crossentropy", "chunked_crossentropy"])
def test_compiled_loss_equals_eager_and_compiles_once_per_shape(loss_fn):
    """`blocks` compiles the loss math too: the plain loss 1 graph, the chunked loss 2 (its full chunks, then
    the shorter last one, dynamic); none more at the next steps; none for eval; loss and gradients equal eager."""
    eager, compiled = _model(loss_fn=loss_fn), _model(loss_fn=loss_fn)
    counter = CompileCounter()
    assert compile_loss(compiled, backend=counter)
    compile_blocks(compiled, backend="aot_eager")
    ids = _ids(bs=20)  # 320 rows: the chunked loss's 256-row chunk leaves a 64-row one
    loss_e, grads_e = _loss_and_grads(eager, ids)
    loss_c, grads_c = _loss_and_grads(compiled, ids)
    graphs = counter.frame_count
    assert graphs == (1 if loss_fn == "torch_crossentropy" else 2)
    assert loss_c == pytest.approx(loss_e, abs=1e-6)
    for name, g in grads_e.items():
        torch.testing.assert_close(grads_c[name], g, rtol=1e-5, atol=1e-6, msg=name)
    for seed in (2, 3):
        compiled(_ids(bs=20, seed=seed), labels=_ids(bs=20, seed=seed)).loss.backward()
    with torch.no_grad():
        compiled(ids, labels=ids)
    assert counter.frame_count == graphs


def test_compile_loss_finds_the_model_inside_a_wrapper_and_skips_models_without_it():
    model = _model()
    wrapper = torch.nn.ModuleDict({"module": model})
    assert compile_loss(wrapper, backend="eager") and model._compiled_loss is not None
    assert not compile_loss(torch.nn.Linear(2, 2), backend="eager")


def test_compile_model_modes():
    model = _model()
    assert compile_model(model, "none") is model
    assert compile_model(model, "blocks") is model
    assert hasattr(transformer_blocks(model)[0].forward, "__wrapped__") and model._compiled_loss is not None
    whole = compile_model(_model(), "model")
    assert whole is not model and hasattr(whole, "_orig_mod")


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "amp_bf16"])
def test_inductor_trainer_steps_equal_eager(precision):
    """The real backend (inductor's C++ code on CPU) through the Trainer: 3 AdamW steps, same losses."""
    from foundry.optim import AdamWConfig, build_optimizer
    from foundry.train.batching import plan_batches
    from foundry.train.loop import Trainer

    batches = [{"input_ids": _ids(8, seed=s), "labels": _ids(8, seed=s)} for s in range(3)]
    losses = {}
    for mode in ("none", "blocks"):
        torch._dynamo.reset()
        model = _model(loss_fn="chunked_crossentropy")
        cfg = TrainerConfig(
            global_train_batch_size=8,
            device_train_microbatch_size=4,
            device="cpu",
            progress_bar=False,
            precision=precision,
            compile=mode,
        )
        trainer = Trainer(
            model=model,
            optimizer=build_optimizer(AdamWConfig(lr=1e-3), model=model),
            scheduler=None,
            train_loader=batches,
            eval_loader=batches[:1],
            cfg=cfg,
            plan=plan_batches(global_batch_size=8, world_size=1, microbatch=4),
            max_steps=3,
            eval_interval_steps=0,
            max_seq_len=16,
            device=torch.device("cpu"),
        )
        steps = [trainer.train_step(batch)["train/loss"] for batch in batches]
        trainer._run_eval()
        losses[mode] = (steps, trainer.last_eval["eval/loss"])
    tol = 1e-5 if precision == "fp32" else 2e-2
    assert losses["blocks"][0] == pytest.approx(losses["none"][0], abs=tol)
    assert losses["blocks"][1] == pytest.approx(losses["none"][1], abs=tol)
