"""A left-padded batch of KV caches that rows can join and leave between decoding steps.

This is what lets concurrent ``sample`` calls share one forward pass per step (continuous
batching): new prompts are prefilled together and merged into the running batch, finished rows
are dropped. Rows are left-padded so every row's next token sits in the last column; position ids
come from the attention mask, so padding never shifts a row's positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class _LMOutput(Protocol):
    logits: torch.Tensor
    past_key_values: DynamicCache


class CausalLM(Protocol):
    """The slice of a Hugging Face causal LM this module calls."""

    def __call__(
        self,
        *,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: DynamicCache,
        use_cache: bool,
        logits_to_keep: int,
    ) -> _LMOutput: ...


LayerKV = tuple[torch.Tensor, torch.Tensor]


@dataclass(slots=True)
class KVBatch:
    """Caches [B, H, L, D] per layer, the mask [B, L] over them and each row's next position."""

    layers: list[LayerKV]
    attention_mask: torch.Tensor
    next_positions: torch.Tensor

    @property
    def size(self) -> int:
        return int(self.attention_mask.shape[0])


def _forward(
    model: CausalLM,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    layers: list[LayerKV],
) -> tuple[torch.Tensor, list[LayerKV]]:
    """One forward over ``input_ids`` given past ``layers``; returns last-position logits and caches."""
    cache = DynamicCache(ddp_cache_data=layers) if layers else DynamicCache()
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    new_layers: list[LayerKV] = []
    for layer in out.past_key_values.layers:
        keys, values = cast(DynamicLayer, layer).keys, cast(DynamicLayer, layer).values
        if keys is None or values is None:
            raise RuntimeError("the model returned an uninitialised KV cache layer")
        new_layers.append((keys, values))
    return out.logits[:, -1, :], new_layers


def prefill(model: CausalLM, prompts: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, KVBatch]:
    """Run the prompts (left-padded together); returns next-token logits [b, V] and their batch."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[i, width - len(prompt) :] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    logits, layers = _forward(model, ids, mask, positions, [])
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long)
    return logits, KVBatch(layers=layers, attention_mask=mask, next_positions=lengths)


def decode(model: CausalLM, batch: KVBatch, tokens: list[int]) -> tuple[torch.Tensor, KVBatch]:
    """Feed one token per row; returns next-token logits [B, V] and the extended batch."""
    ids = torch.tensor(tokens, dtype=torch.long).unsqueeze(1)
    mask = torch.cat([batch.attention_mask, torch.ones((batch.size, 1), dtype=torch.long)], dim=1)
    logits, layers = _forward(model, ids, mask, batch.next_positions.unsqueeze(1), batch.layers)
    return logits, KVBatch(layers=layers, attention_mask=mask, next_positions=batch.next_positions + 1)


def _left_pad(batch: KVBatch, width: int) -> KVBatch:
    extra = width - int(batch.attention_mask.shape[1])
    if extra == 0:
        return batch
    layers: list[LayerKV] = []
    for k, v in batch.layers:
        k_pad = k.new_zeros((*k.shape[:2], extra, k.shape[3]))
        v_pad = v.new_zeros((*v.shape[:2], extra, v.shape[3]))
        layers.append((torch.cat([k_pad, k], dim=2), torch.cat([v_pad, v], dim=2)))
    mask_pad = batch.attention_mask.new_zeros((batch.size, extra))
    return KVBatch(layers, torch.cat([mask_pad, batch.attention_mask], dim=1), batch.next_positions)


def merge(a: KVBatch, b: KVBatch) -> KVBatch:
    """Stack two batches (rows of ``a`` first), left-padding the shorter one."""
    width = max(int(a.attention_mask.shape[1]), int(b.attention_mask.shape[1]))
    a, b = _left_pad(a, width), _left_pad(b, width)
    layers = [
        (torch.cat([ka, kb], dim=0), torch.cat([va, vb], dim=0))
        for (ka, va), (kb, vb) in zip(a.layers, b.layers, strict=True)
    ]
    return KVBatch(
        layers,
        torch.cat([a.attention_mask, b.attention_mask], dim=0),
        torch.cat([a.next_positions, b.next_positions], dim=0),
    )


def select(batch: KVBatch, keep: list[int]) -> KVBatch:
    """Keep only rows ``keep`` and drop leading columns that became padding for every row."""
    index = torch.tensor(keep, dtype=torch.long)
    mask = batch.attention_mask.index_select(0, index)
    used = mask.any(dim=0).nonzero()
    start = int(used[0]) if used.numel() else int(mask.shape[1])
    layers = [(k.index_select(0, index)[:, :, start:], v.index_select(0, index)[:, :, start:]) for k, v in batch.layers]
    return KVBatch(layers, mask[:, start:], batch.next_positions.index_select(0, index))
