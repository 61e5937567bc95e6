"""Loading local Hugging Face models and tokenizers, optional LoRA, and frozen copies to sample from."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def quiet_transformers() -> None:
    """No per-file progress bars from transformers: a run's terminal shows the run's own progress."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def load_model(path: str | Path, dtype: torch.dtype) -> PreTrainedModel:
    """Load a causal LM from a local directory (never the network)."""
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True)
    return cast("PreTrainedModel", model)


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """Load the tokenizer saved next to the model."""
    from transformers import AutoTokenizer

    return cast("PreTrainedTokenizerBase", AutoTokenizer.from_pretrained(str(path), local_files_only=True))


def add_lora(model: PreTrainedModel, rank: int, alpha: int | None, seed: int) -> PreTrainedModel:
    """Wrap ``model`` with LoRA adapters on every linear layer; only the adapters stay trainable."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, target_modules="all-linear", lora_dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cast("PreTrainedModel", get_peft_model(model, config))


def frozen_copy(model: PreTrainedModel) -> PreTrainedModel:
    """An independent copy to sample from; LoRA adapters are merged in so decoding stays fast."""
    clone = copy.deepcopy(model)
    merge = getattr(clone, "merge_and_unload", None)
    if callable(merge):
        clone = cast("PreTrainedModel", merge())
    cast(torch.nn.Module, clone).eval()
    for p in clone.parameters():
        p.requires_grad_(False)
    return clone
