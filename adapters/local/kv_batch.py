"""A left-padded batch of KV caches that rows can join and leave between decoding steps.

This is what lets concurrent ``sample`` calls share one forward pass per step (continuous
batching): new prompts are prefilled together and merged into the running batch, finished rows
are dropped. Rows are left-padded so every row's next token sits in the last column; position ids
come from the attention mask, so padding never shifts a row's positions. Padding may also sit between a prompt
prefix that rows share, run once (``prefill_shared``), and each row's own tokens.
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


ROOM = 64
"""Columns a decoding cache is given beyond what it holds when it must grow: a token is then written in place,
where appending by ``torch.cat`` copies the whole cache at every step (about a quarter of SmolLM2's decoding step
at 200 cached tokens, bench/README.md)."""


@dataclass(slots=True)
class KVBatch:
    """Caches [B, H, C, D] per layer, of which the first L columns are used (C >= L: room to decode into), the
    mask [B, L] over them and each row's next position."""

    layers: list[LayerKV]
    attention_mask: torch.Tensor
    next_positions: torch.Tensor

    @property
    def size(self) -> int:
        return int(self.attention_mask.shape[0])

    @property
    def width(self) -> int:
        """L: the columns in use."""
        return int(self.attention_mask.shape[1])

    def used(self) -> list[LayerKV]:
        """Each layer's keys and values over the columns in use (views)."""
        return [(k[:, :, : self.width], v[:, :, : self.width]) for k, v in self.layers]


class _RoomyLayer(DynamicLayer):
    """A ``DynamicLayer`` over buffers with spare columns: ``update`` writes the new keys and values after the
    ``length`` used ones, in place, and copies into larger buffers (``ROOM`` spare) only when they are full. Columns
    past ``length`` belong to no view handed out before, so earlier batches over the same buffers stay intact."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.dtype, self.device = keys.dtype, keys.device
        self.buffers = (keys, values)
        self.length = length
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.buffers
        end = self.length + int(key_states.shape[-2])
        if end > keys.shape[-2]:
            grown = (*keys.shape[:2], end + ROOM, keys.shape[-1])
            old_keys, old_values = keys, values
            keys, values = keys.new_empty(grown), values.new_empty(grown)
            keys[:, :, : self.length] = old_keys[:, :, : self.length]
            values[:, :, : self.length] = old_values[:, :, : self.length]
            self.buffers = (keys, values)
        keys[:, :, self.length : end] = key_states
        values[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = keys[:, :, :end], values[:, :, :end]
        return self.keys, self.values


def _forward(
    model: CausalLM,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    layers: list[LayerKV],
    used: int = 0,
) -> tuple[torch.Tensor, list[LayerKV]]:
    """One forward over ``input_ids`` given past ``layers``; returns last-position logits and caches. With
    ``used``, the past is that many columns of ``layers``' buffers, and the new tokens are written after them in
    place (the returned caches are the buffers, with room); without, the caches are new tensors."""
    cache = DynamicCache(ddp_cache_data=layers) if layers and not used else DynamicCache()
    if used:
        cache.layers = [_RoomyLayer(k, v, used) for k, v in layers]
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
        if isinstance(layer, _RoomyLayer):
            new_layers.append(layer.buffers)
            continue
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


def prefill_shared(
    model: CausalLM, prefix: list[int], suffixes: list[list[int]], pad_token_id: int
) -> tuple[torch.Tensor, KVBatch]:
    """Like ``prefill`` of ``prefix + suffix`` for each suffix (none empty), the prefix run once: its cache is
    expanded to every row, and the suffixes, left-padded after it, attend to it. The padding between prefix and
    suffix is masked, so each row's tokens and positions are its own prompt's."""
    if not prefix or any(not s for s in suffixes):
        raise ValueError("the prefix and every suffix need at least one token")
    n, shared, width = len(suffixes), len(prefix), max(len(s) for s in suffixes)
    head = torch.tensor([prefix], dtype=torch.long)
    _, head_layers = _forward(model, head, torch.ones_like(head), torch.arange(shared).unsqueeze(0), [])
    layers = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in head_layers]
    ids = torch.full((n, width), pad_token_id, dtype=torch.long)
    tail = torch.zeros((n, width), dtype=torch.long)
    for i, suffix in enumerate(suffixes):
        ids[i, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
        tail[i, width - len(suffix) :] = 1
    mask = torch.cat([torch.ones((n, shared), dtype=torch.long), tail], dim=1)
    positions = shared + (tail.cumsum(dim=1) - 1).clamp(min=0)
    logits, layers = _forward(model, ids, mask, positions, layers)
    lengths = torch.tensor([shared + len(s) for s in suffixes], dtype=torch.long)
    return logits, KVBatch(layers=layers, attention_mask=mask, next_positions=lengths)


def decode(model: CausalLM, batch: KVBatch, tokens: list[int]) -> tuple[torch.Tensor, KVBatch]:
    """Feed one token per row; returns next-token logits [B, V] and the extended batch."""
    ids = torch.tensor(tokens, dtype=torch.long).unsqueeze(1)
    mask = torch.cat([batch.attention_mask, torch.ones((batch.size, 1), dtype=torch.long)], dim=1)
    logits, layers = _forward(model, ids, mask, batch.next_positions.unsqueeze(1), batch.layers, batch.width)
    return logits, KVBatch(layers=layers, attention_mask=mask, next_positions=batch.next_positions + 1)


def _left_pad(batch: KVBatch, width: int) -> KVBatch:
    extra = width - batch.width
    if extra == 0:
        return KVBatch(batch.used(), batch.attention_mask, batch.next_positions)
    layers: list[LayerKV] = []
    for k, v in batch.used():
        k_pad = k.new_zeros((*k.shape[:2], extra, k.shape[3]))
        v_pad = v.new_zeros((*v.shape[:2], extra, v.shape[3]))
        layers.append((torch.cat([k_pad, k], dim=2), torch.cat([v_pad, v], dim=2)))
    mask_pad = batch.attention_mask.new_zeros((batch.size, extra))
    return KVBatch(layers, torch.cat([mask_pad, batch.attention_mask], dim=1), batch.next_positions)


def merge(a: KVBatch, b: KVBatch) -> KVBatch:
    """Stack two batches (rows of ``a`` first), left-padding the shorter one."""
    width = max(a.width, b.width)
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
    layers = [(k.index_select(0, index)[:, :, start:], v.index_select(0, index)[:, :, start:]) for k, v in batch.used()]
    return KVBatch(layers, mask[:, start:], batch.next_positions.index_select(0, index))
