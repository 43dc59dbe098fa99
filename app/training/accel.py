"""The fast path on a GPU: what TRAIN_AMP=auto and TRAIN_COMPILE=auto become, fused AdamW, the
batch memory format each model prefers, and torch.compile with a fallback to eager.

The driver resolves the `auto` values once (`resolve`), prints them, and hands the workers and
the run summary the concrete values, so every worker and every record agrees on what ran.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from app.data.schema import DatasetInfo
from app.settings import TrainSettings
from app.training.augment import augment_mode
from app.training.model import uses_channels_last, vit_patch_for

COMPILE_CACHE_PREFIX = "trainctl-inductor-"  # + the uid, in this machine's temp folder


def resolve(settings: TrainSettings, info: DatasetInfo) -> tuple[TrainSettings, list[str]]:
    """Settings with auto values made concrete, and one note per choice made for the user."""
    gpu = settings.use_gpu
    notes: list[str] = []
    amp = settings.amp
    if amp == "auto":
        amp = "bf16" if gpu and _bf16_supported() else "off"
        if gpu:
            notes.append(
                "bf16 autocast (TRAIN_AMP=auto)"
                if amp == "bf16"
                else "no autocast: this GPU has no bf16 (TRAIN_AMP=auto)"
            )
    elif gpu:
        notes.append(f"TRAIN_AMP={amp} as set")
    compiled = settings.compile
    if compiled == "auto":
        compiled = "on" if gpu else "off"
        if gpu:
            notes.append("torch.compile (TRAIN_COMPILE=auto)")
    elif gpu:
        notes.append(f"TRAIN_COMPILE={compiled} as set")
    if gpu:
        notes.append("fused AdamW")
        layout = "channels_last" if uses_channels_last(settings.model) else "contiguous NCHW"
        notes.append(f"{layout} batches for {settings.model}")
    patch = settings.vit_patch
    if settings.model == "vit" and not patch:
        patch = vit_patch_for(info.height) or 0
    augment = augment_mode(settings.augment, settings.dataset)
    update = {"amp": amp, "compile": compiled, "vit_patch": patch, "augment": augment}
    return settings.model_copy(update=update), notes


def _bf16_supported() -> bool:
    # The driver may run where there is no GPU (a Kubernetes head pod): every GPU since Ampere
    # has bf16, and the worker checks again on its own device (`autocast_dtype`).
    if not torch.cuda.is_available():
        return True
    return torch.cuda.is_bf16_supported(including_emulation=False)


def autocast_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    if amp == "bf16":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
            _say("this GPU has no bf16; training without autocast")
            return None
        return torch.bfloat16
    return torch.float16 if amp == "fp16" else None


def make_optimizer(
    params: Iterable[nn.Parameter] | list[dict[str, Any]],
    settings: TrainSettings,
    device: torch.device,
) -> torch.optim.AdamW:
    """AdamW over parameters or param groups (app/training/finetune.py: head and backbone)."""
    # Fused AdamW updates every parameter in a few kernels instead of several per tensor.
    return torch.optim.AdamW(
        params, lr=settings.lr, weight_decay=settings.weight_decay, fused=device.type == "cuda"
    )


def private_compile_cache() -> Path:
    """Point torch.compile's cache at a folder only this user on this machine can write.

    Inductor loads the Python modules, shared objects and pickles it finds in its cache
    without checking them, so whoever can write the cache runs code in the worker. It used to
    live on the run storage, which every RayJob of a namespace shares; now it is local:
    <tmp>/trainctl-inductor-<uid>, created 0700 and checked to be a real folder of ours that
    no one else can write (else a fresh mkdtemp folder). The cost: each new pod compiles cold
    (25-50 s on the first step on a GPU); restarted workers on the same pod still reuse it.
    An explicit TORCHINDUCTOR_CACHE_DIR, the operator's choice, wins.
    """
    explicit = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if explicit:
        return Path(explicit)
    folder = Path(tempfile.gettempdir()) / f"{COMPILE_CACHE_PREFIX}{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    if not _private(folder):
        folder = Path(tempfile.mkdtemp(prefix=COMPILE_CACHE_PREFIX))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    return folder


def _private(folder: Path) -> bool:
    """A real folder (not a link), owned by this user, that no one else can write or enter."""
    try:
        status = folder.lstat()
    except OSError:
        return False
    return (
        stat.S_ISDIR(status.st_mode)
        and status.st_uid == os.getuid()
        and status.st_mode & 0o077 == 0
    )


def memory_format(model_name: str) -> torch.memory_format:
    return torch.channels_last if uses_channels_last(model_name) else torch.contiguous_format


class CompiledModel:
    """Calls the model through torch.compile when asked, the plain module otherwise.

    Compilation happens at the first call, so a failure shows there: it is reported in one line
    and the run goes on with the plain module, whose weights are the same tensors. Batches of
    another size (an epoch's last, partial one) also take the plain module, so that a run never
    compiles a second graph for a shape that comes once per epoch.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        enabled: bool,
        backend: str | Callable[..., Any] | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.plain = model
        self.say = say or _say
        self.compiled: Any = None
        self.batch_rows: int | None = None
        self.failure: str | None = None
        if enabled:
            # TRAINCTL_COMPILE_BACKEND (not a setting: for tests and debugging) swaps Inductor
            # for e.g. aot_eager, which traces the same graphs without generating code.
            backend = backend or os.environ.get("TRAINCTL_COMPILE_BACKEND") or "inductor"
            try:
                self.compiled = torch.compile(model, backend=backend)
            except Exception as err:  # any failure means: train uncompiled
                self._fail(err)

    @property
    def active(self) -> bool:
        return self.compiled is not None

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if self.compiled is not None:
            rows = int(images.shape[0])
            self.batch_rows = self.batch_rows or rows
            if rows == self.batch_rows:
                try:
                    return self.compiled(images)
                except torch.OutOfMemoryError:
                    raise
                except Exception as err:  # a compiler failure: go on eager
                    self._fail(err)
        return self.plain(images)

    def _fail(self, err: BaseException) -> None:
        self.compiled = None
        # Dynamo wraps the compiler's own error; the innermost one says what went wrong.
        root: BaseException = err
        while (inner := getattr(root, "inner_exception", None) or root.__cause__) is not None:
            root = inner
        first = (str(root).strip().splitlines() or [""])[0][:200]
        self.failure = f"{type(root).__name__}: {first}"
        self.say(f"torch.compile failed ({self.failure}); training uncompiled")


def _say(message: str) -> None:
    # Workers' stdout does not reach the driver (log_to_driver is off); stderr lands in the
    # worker's log, and the epoch metrics carry `compiled` for the driver to report.
    print(f"trainctl: {message}", file=sys.stderr, flush=True)
