"""Loading local Hugging Face models and tokenizers, optional LoRA, and frozen copies to sample from."""

from __future__ import annotations

import copy
import warnings
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


TINKER_LORA_ALPHA = 32
"""Tinker's LoRA alpha, whatever the rank (the scale is alpha / rank): SkyRL's Tinker server uses it too, and
tinker-cookbook's ``hyperparam_utils.get_lora_lr_over_full_finetune_lr`` takes it as its default. peft's own
convention (alpha = 2 x rank) would make the local LoRA a different optimiser from the one users train on."""


def add_lora(
    model: PreTrainedModel, rank: int, seed: int, *, unembed: bool = True, alpha: int = TINKER_LORA_ALPHA
) -> PreTrainedModel:
    """Wrap ``model`` with LoRA adapters on every linear layer, the output layer too with ``unembed`` (Tinker's
    ``train_unembed``, on by default there); only the adapters stay trainable."""
    from peft import LoraConfig, get_peft_model

    output = model.get_output_embeddings()  # type: ignore[no-untyped-call]
    names = {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and (unembed or module is not output)
    }
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=sorted(names), lora_dropout=0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cast("PreTrainedModel", get_peft_model(model, config))


def frozen_copy(model: PreTrainedModel) -> PreTrainedModel:
    """An independent copy to sample from; LoRA adapters are merged in so decoding stays fast."""
    clone = copy.deepcopy(model)
    merge = getattr(clone, "merge_and_unload", None)
    if callable(merge):
        _untie(cast(torch.nn.Module, clone))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Input and output embeddings are no longer tied")
            clone = cast("PreTrainedModel", merge())
    cast(torch.nn.Module, clone).eval()
    for p in clone.parameters():
        p.requires_grad_(False)
    return clone


def _untie(model: torch.nn.Module) -> None:
    """Give every module its own copy of a weight it shares (tied input and output embeddings), so merging the
    output layer's LoRA into it leaves the input embeddings as the trained model has them."""
    seen: set[int] = set()
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if id(param) in seen:
                setattr(module, name, torch.nn.Parameter(param.detach().clone(), requires_grad=param.requires_grad))
            seen.add(id(param))
