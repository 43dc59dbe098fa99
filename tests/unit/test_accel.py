"""The GPU fast path's pieces, on CPU: auto settings, compiled checkpoints, compile fallback."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from app.data.schema import DatasetInfo
from app.run import warm_start
from app.runfolder import checkpoints, state_dicts
from app.settings import TrainSettings
from app.training.accel import CompiledModel, make_optimizer, memory_format, resolve
from app.training.model import build_model

INFO = DatasetInfo(3, 32, 32, 10, 64, 16, "tensor", (0.5,) * 3, (0.25,) * 3)


def _settings(**values: object) -> TrainSettings:
    return TrainSettings(_env_file=None, **values)  # type: ignore[call-arg]


def _step(forward: CompiledModel, model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    optimizer = make_optimizer(model.parameters(), _settings(), torch.device("cpu"))
    loss = nn.functional.cross_entropy(forward(images), torch.arange(len(images)) % 10)
    loss.backward()
    optimizer.step()
    return loss


def test_gpu_alone_turns_on_bf16_compile_and_fused_adamw() -> None:
    resolved, notes = resolve(_settings(use_gpu=True, model="vit"), INFO)
    assert (resolved.amp, resolved.compile, resolved.vit_patch) == ("bf16", "on", 4)
    assert notes == [
        "bf16 autocast (TRAIN_AMP=auto)",
        "torch.compile (TRAIN_COMPILE=auto)",
        "fused AdamW",
        "contiguous NCHW batches for vit",
    ]


def test_explicit_settings_win_and_cpu_stays_plain() -> None:
    resolved, notes = resolve(_settings(use_gpu=True, amp="off", compile="off"), INFO)
    assert (resolved.amp, resolved.compile) == ("off", "off")
    assert "TRAIN_AMP=off as set" in notes and "TRAIN_COMPILE=off as set" in notes
    resolved, notes = resolve(_settings(model="cnn"), INFO)
    assert (resolved.amp, resolved.compile, notes) == ("off", "off", [])


def test_each_model_gets_its_memory_format() -> None:
    assert memory_format("cnn") == memory_format("resnet18") == torch.channels_last
    assert memory_format("vit") == torch.contiguous_format
    batch = torch.randn(2, 32, 32, 3).permute(0, 3, 1, 2)  # what epoch_batches yields
    assert batch.contiguous(memory_format=memory_format("vit")).is_contiguous()
    assert batch.contiguous(memory_format=memory_format("cnn")).is_contiguous(
        memory_format=torch.channels_last
    )


def test_compiled_models_checkpoint_loads_into_a_plain_model(tmp_path: Path) -> None:
    model = build_model("cnn", INFO)
    forward = CompiledModel(model, enabled=True, backend="aot_eager")
    _step(forward, model, torch.randn(4, 3, 32, 32))
    assert forward.active and forward.failure is None
    # What torch.compile's wrapper would save (`_orig_mod.` names) is stored plain as well.
    wrapped = forward.compiled.state_dict()
    assert all(key.startswith("_orig_mod.") for key in wrapped)
    checkpoints.write_checkpoint(
        tmp_path, model_state=wrapped, train_state={"epoch": 1}, epoch=1, metrics={}
    )
    weights = torch.load(tmp_path / checkpoints.MODEL_FILE, weights_only=True)
    plain = build_model("cnn", INFO)
    plain.load_state_dict(weights)  # strict: every name matches a plain module's
    for name, tensor in model.state_dict().items():
        assert torch.equal(plain.state_dict()[name], tensor)
    # ...and a warm start / resume loads it back into a model that is then compiled again.
    again = build_model("cnn", INFO)
    warm = TrainSettings(_env_file=None, model="cnn", warm_start=tmp_path)
    again.load_state_dict(warm_start.resolve(warm, INFO).load_weights())
    resumed = CompiledModel(again, enabled=True, backend="aot_eager")
    images = torch.randn(4, 3, 32, 32)
    model.eval(), again.eval()
    assert torch.allclose(resumed(images), model(images))


def test_compile_failure_is_one_line_and_training_goes_on_uncompiled() -> None:
    def broken_backend(graph: object, inputs: object) -> object:
        raise RuntimeError("no compiler on this platform\nsecond line")

    said: list[str] = []
    model = build_model("cnn", INFO)
    forward = CompiledModel(model, enabled=True, backend=broken_backend, say=said.append)
    loss = _step(forward, model, torch.randn(4, 3, 32, 32))
    assert torch.isfinite(loss) and not forward.active
    assert len(said) == 1 and "\n" not in said[0] and "training uncompiled" in said[0]
    assert "no compiler on this platform" in said[0]
    _step(forward, model, torch.randn(4, 3, 32, 32))
    assert len(said) == 1  # said once, not every step


def test_a_batch_of_another_size_takes_the_plain_module() -> None:
    calls: list[int] = []

    def counting_backend(graph: torch.fx.GraphModule, inputs: object) -> object:
        calls.append(1)
        return graph.forward

    model = build_model("cnn", INFO).eval()
    forward = CompiledModel(model, enabled=True, backend=counting_backend)
    with torch.no_grad():
        forward(torch.randn(4, 3, 32, 32))
        forward(torch.randn(3, 3, 32, 32))  # an epoch's last, smaller batch: no recompilation
    assert len(calls) == 1


@pytest.mark.parametrize("prefix", ["_orig_mod.", "module."])
def test_wrapper_names_are_stripped(prefix: str) -> None:
    state = {f"{prefix}weight": torch.zeros(1)}
    assert list(state_dicts.plain_keys(state)) == ["weight"]
