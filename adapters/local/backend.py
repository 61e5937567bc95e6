"""``LocalTrainer``: the ``Trainer`` port over an in-process PyTorch causal LM.

Mirrors Tinker's ``TrainingClient``: ``forward_backward`` accumulates gradients of Tinker's summed
losses (see ``losses``), ``optim_step`` applies Adam with ``AdamParams`` and zeroes them, and
``sampler`` publishes a frozen copy of the current weights. All torch work runs on one worker
thread so the event loop stays free.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch
from safetensors.torch import load_model as load_safetensors
from safetensors.torch import save_model as save_safetensors
from transformers.cache_utils import DynamicLayer

from adapters.local.allocator import release_large_blocks
from adapters.local.losses import build_inputs, token_losses
from adapters.local.model_io import add_lora, frozen_copy, load_model, load_tokenizer
from adapters.local.prefix_groups import prefix_groups
from adapters.local.sampler import LocalSampler
from adapters.local.worker import TorchWorker
from ports.policy import AdamParams, ForwardBackwardOutput, LossName, TrainingDatum

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_WEIGHTS = "weights.safetensors"
_OPTIMIZER = "optimizer.pt"
_META = "state.json"

SHARED_PREFIX_MIN_WORK = 10**10
"""A prefix is run once for its group when the tokens it spares times the model's parameters reach this: about
75 tokens on a 135 M-parameter model (a GRPO group's prompt: half the training step), never on the ~120
K-parameter tiny one. There a demo batch is no faster, and the tiny model's warm start (Adam at a rate of 1e-2)
turns the last bits of float rounding into different weights within ~100 steps, so its seeded outcomes stay the
ones measured with every sequence run in full (bench/README.md, bench_pretrained_step)."""


class LocalTrainer:
    """A trainable policy held in this process (full fine-tuning, or LoRA with ``lora_rank > 0``: Tinker's alpha,
    on the output layer too unless ``train_unembed`` is false, as on the service)."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: torch.dtype = torch.float32,
        lora_rank: int = 0,
        train_unembed: bool = True,
        seed: int = 0,
        checkpoint_dir: str | Path | None = None,
        num_threads: int | None = None,
        max_batch_rows: int = 64,
        tokens_per_chunk: int = 16384,
        logits_per_chunk: int = 1 << 25,
        shared_prefix_min_work: float = SHARED_PREFIX_MIN_WORK,
    ) -> None:
        """Load ``model_path`` (local directory). Checkpoints go to ``checkpoint_dir`` (unset: a temp dir made at
        the first save).

        A forward over many sequences runs in chunks of at most ``tokens_per_chunk`` tokens, fewer where the
        vocabulary is large: at most ``logits_per_chunk`` logits (the backward keeps several copies of them, and
        every layer's activations, for a whole chunk; a real model's 49 K-token vocabulary at 16 K tokens would
        hold gigabytes). Sequences that share a long prefix (a group's prompt) run it once
        (``adapters.local.prefix_groups``) where the work spared, tokens times parameters, reaches
        ``shared_prefix_min_work``: the same logprobs and gradients for fewer tokens. Its samplers prefill a prefix
        that prompts share (a system or tools prompt) once by the same rule."""
        self._path = Path(model_path)
        self._dtype = dtype
        self._lora_rank = lora_rank
        self._seed = seed
        self._checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self._max_batch_rows = max_batch_rows
        release_large_blocks()
        self._worker = TorchWorker(num_threads)
        self._tokenizer = load_tokenizer(self._path)
        model = load_model(self._path, dtype)
        vocab = int(model.config.vocab_size)
        self._tokens_per_chunk = max(1, min(tokens_per_chunk, logits_per_chunk // vocab))
        if lora_rank > 0:
            model = add_lora(model, lora_rank, seed, unembed=train_unembed)
        # Dropout stays off (eval mode) so training-forward logprobs equal the sampler's; gradients still flow.
        cast(torch.nn.Module, model).eval()
        self._model = model
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._parameter_count = sum(p.numel() for p in model.parameters())
        self._shared_prefix_min_work = shared_prefix_min_work
        self._optimizer = torch.optim.AdamW(self._params, lr=AdamParams().learning_rate)
        self._steps = 0
        pad = self._tokenizer.pad_token_id
        self._pad = int(pad) if isinstance(pad, int) else 0

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    @property
    def tokenizer_path(self) -> str:
        """Where the tokenizer lives, for ``tinker_cookbook.tokenizer_utils.get_tokenizer``."""
        return str(self._path)

    @property
    def tokens_per_chunk(self) -> int:
        """The most tokens one training forward takes (a batch beyond it runs in several, exactly)."""
        return self._tokens_per_chunk

    @property
    def model(self) -> PreTrainedModel:
        """The live training model (mutated by ``optim_step``)."""
        return self._model

    @property
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return list(self._params)

    async def forward_backward(self, data_D: Sequence[TrainingDatum], loss: LossName) -> ForwardBackwardOutput:
        """Add the gradient of ``loss`` (summed over all tokens of ``data_D``) to the accumulated one."""
        return await self._worker.run(functools.partial(self._forward, list(data_D), loss, True))

    async def forward(self, data_D: Sequence[TrainingDatum], loss: LossName) -> ForwardBackwardOutput:
        """Like ``forward_backward`` but without gradients (Tinker's ``forward``)."""
        return await self._worker.run(functools.partial(self._forward, list(data_D), loss, False))

    async def optim_step(self, params: AdamParams) -> Mapping[str, float]:
        """Apply one AdamW step with the accumulated gradients, then zero them."""
        return await self._worker.run(functools.partial(self._optim_step, params))

    async def sampler(self, name: str) -> LocalSampler:
        """Publish a frozen copy of the current weights; later steps never change what it samples."""
        model = await self._worker.run(functools.partial(frozen_copy, self._model))
        return LocalSampler(
            model,
            self._tokenizer,
            worker=self._worker,
            name=name,
            max_batch_rows=self._max_batch_rows,
            shared_prefix_min_work=self._shared_prefix_min_work,
        )

    async def save_state(self, name: str) -> str:
        """Write weights, optimizer state and metadata under ``checkpoint_dir/name``; returns that path."""
        return await self._worker.run(functools.partial(self._save, name))

    async def load_state(self, path: str) -> None:
        """Restore weights and optimizer state written by ``save_state``."""
        await self._worker.run(functools.partial(self._load, Path(path)))

    async def save_weights_for_sampler(self, name: str) -> str:
        """The weights (and optimizer) under ``checkpoint_dir/name``, as ``save_state`` writes them."""
        return await self.save_state(name)

    async def scorer(self, path: str) -> LocalSampler:
        """A sampler on the weights saved at ``path``, built beside the trained model, which stays as it is."""
        model = await self._worker.run(functools.partial(self._frozen_from, Path(path)))
        return LocalSampler(
            model,
            self._tokenizer,
            worker=self._worker,
            name=Path(path).name,
            max_batch_rows=self._max_batch_rows,
            shared_prefix_min_work=self._shared_prefix_min_work,
        )

    def close(self) -> None:
        """Stop the worker thread (after queued work)."""
        self._worker.close()

    def _forward(self, data: list[TrainingDatum], loss: LossName, backward: bool) -> ForwardBackwardOutput:
        if not data:
            return ForwardBackwardOutput(logprobs_D=(), metrics={"loss:sum": 0.0})
        if any(not d.model_input for d in data):
            raise ValueError("datum model_input must not be empty")
        logprobs_D: list[tuple[float, ...]] = [()] * len(data)
        total = 0.0
        for indices, prefix in self._batches(data):
            chunk = [data[i] for i in indices]
            with torch.set_grad_enabled(backward):
                if prefix:
                    target_logprobs = self._shared_prefix_target_logprobs(chunk, prefix)
                else:
                    target_logprobs = self._target_logprobs(chunk)
                inputs = build_inputs(chunk, loss, target_logprobs.dtype)
                target_logprobs = target_logprobs * inputs.valid
                chunk_loss = token_losses(loss, target_logprobs, inputs).sum()
            if backward:
                torch.autograd.backward(chunk_loss)
            total += float(chunk_loss.detach())
            rows = target_logprobs.detach().tolist()
            for i, d, row in zip(indices, chunk, rows, strict=True):
                logprobs_D[i] = tuple(row[: len(d.model_input)])
        return ForwardBackwardOutput(logprobs_D=tuple(logprobs_D), metrics={"loss:sum": total})

    def _batches(self, data: list[TrainingDatum]) -> list[tuple[list[int], int]]:
        """The forward passes over ``data``: (indices, shared prefix length), 0 for a plain padded batch."""
        batches: list[tuple[list[int], int]] = []
        plain: list[int] = []
        for group in prefix_groups([d.model_input for d in data]):
            if group.saved_tokens * self._parameter_count < self._shared_prefix_min_work:
                plain.extend(group.members)
                continue
            # Pieces whose suffixes fit the chunk's token budget beside the prefix, each running the prefix again.
            piece: list[int] = []
            width = 0
            for i in group.members:
                new_width = max(width, len(data[i].model_input) - group.prefix)
                if piece and group.prefix + new_width * (len(piece) + 1) > self._tokens_per_chunk:
                    batches.append((piece, group.prefix))
                    piece, new_width = [], len(data[i].model_input) - group.prefix
                piece.append(i)
                width = new_width
            batches.append((piece, group.prefix))
        batches.extend((chunk, 0) for chunk in self._chunks(sorted(plain), data))
        return batches

    def _chunks(self, indices: list[int], data: list[TrainingDatum]) -> list[list[int]]:
        """Split into padded batches of at most ``tokens_per_chunk`` tokens (the loss is a sum, so exact)."""
        chunks: list[list[int]] = []
        width = 0
        for i in indices:
            new_width = max(width, len(data[i].model_input))
            if not chunks or new_width * (len(chunks[-1]) + 1) > self._tokens_per_chunk:
                chunks.append([])
                new_width = len(data[i].model_input)
            chunks[-1].append(i)
            width = new_width
        return chunks

    def _shared_prefix_target_logprobs(self, data: list[TrainingDatum], prefix: int) -> torch.Tensor:
        """As ``_target_logprobs``, the first ``prefix`` tokens (the same in every datum) run once: their KV cache,
        expanded to the batch, is what the suffixes attend to, and gradients flow back through it."""
        first = torch.tensor(data[0].model_input[:prefix], dtype=torch.long).unsqueeze(0)
        out = self._model(input_ids=first, use_cache=True)
        cache = out.past_key_values
        layers = list(getattr(cache, "layers", ()))
        if not layers or any(type(layer) is not DynamicLayer for layer in layers):
            # A cache this expansion does not know (sliding windows): run every sequence in full from now on.
            self._shared_prefix_min_work = math.inf
            return self._target_logprobs(data)
        for layer in layers:
            layer.keys = layer.keys.expand(len(data), -1, -1, -1)
            layer.values = layer.values.expand(len(data), -1, -1, -1)
        width = max(len(d.model_input) for d in data) - prefix
        ids = torch.full((len(data), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(data), prefix + width), dtype=torch.long)
        mask[:, :prefix] = 1
        targets = torch.zeros((len(data), prefix + width), dtype=torch.long)
        for i, d in enumerate(data):
            n = len(d.model_input)
            ids[i, : n - prefix] = torch.tensor(d.model_input[prefix:], dtype=torch.long)
            mask[i, prefix:n] = 1
            targets[i, :n] = torch.tensor(d.target_tokens[:n], dtype=torch.long)
        suffix = self._model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        head = self._logprobs(out.logits[0])  # [prefix, V], once for the group
        tail = self._logprobs(suffix.logits)  # [D, width, V]
        head_rows = head[torch.arange(prefix).unsqueeze(0), targets[:, :prefix]]
        tail_rows = tail.gather(-1, targets[:, prefix:].unsqueeze(-1)).squeeze(-1)
        return torch.cat([head_rows, tail_rows], dim=1)

    def _logprobs(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits.to(torch.float64 if self._dtype == torch.float64 else torch.float32), -1)

    def _target_logprobs(self, data: list[TrainingDatum]) -> torch.Tensor:
        """log p(target_t | input_<=t) for every position, right-padded to [D, T]."""
        width = max(len(d.model_input) for d in data)
        ids = torch.full((len(data), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(data), width), dtype=torch.long)
        targets = torch.zeros((len(data), width), dtype=torch.long)
        for i, d in enumerate(data):
            n = len(d.model_input)
            ids[i, :n] = torch.tensor(d.model_input, dtype=torch.long)
            mask[i, :n] = 1
            targets[i, :n] = torch.tensor(d.target_tokens[:n], dtype=torch.long)
        logits = cast(torch.Tensor, self._model(input_ids=ids, attention_mask=mask).logits)
        return self._logprobs(logits).gather(-1, targets.unsqueeze(-1)).squeeze(-1)

    def _optim_step(self, params: AdamParams) -> dict[str, float]:
        for group in self._optimizer.param_groups:
            group.update(
                lr=params.learning_rate,
                betas=(params.beta1, params.beta2),
                eps=params.eps,
                weight_decay=params.weight_decay,
            )
        grads = [p.grad for p in self._params if p.grad is not None]
        norm = (
            float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) if grads else 0.0
        )
        if params.grad_clip_norm > 0 and grads:
            torch.nn.utils.clip_grad_norm_(self._params, params.grad_clip_norm)
        if not math.isfinite(norm):
            # A huge reward or a NaN loss: applying the step would poison every weight. Skip it, say so.
            self._optimizer.zero_grad(set_to_none=True)
            logger.warning("optimizer step skipped: non-finite gradient norm %s", norm)
            return {"skipped_nonfinite": 1.0, "learning_rate": params.learning_rate, "step": float(self._steps)}
        self._optimizer.step()
        self._optimizer.zero_grad(set_to_none=True)
        self._steps += 1
        return {
            "grad_norm": norm,
            "skipped_nonfinite": 0.0,
            "learning_rate": params.learning_rate,
            "step": float(self._steps),
        }

    def _save(self, name: str) -> str:
        if self._checkpoint_dir is None:
            self._checkpoint_dir = Path(tempfile.mkdtemp(prefix="local-trainer-"))
        out = self._checkpoint_dir / name
        out.mkdir(parents=True, exist_ok=True)
        save_safetensors(self._model, str(out / _WEIGHTS))
        torch.save(self._optimizer.state_dict(), out / _OPTIMIZER)
        meta = {
            "name": name,
            "base_model": str(self._path),
            "lora_rank": self._lora_rank,
            "dtype": str(self._dtype),
            "steps": self._steps,
        }
        (out / _META).write_text(json.dumps(meta, indent=2))
        return str(out)

    def _frozen_from(self, path: Path) -> PreTrainedModel:
        clone = copy.deepcopy(self._model)
        missing, unexpected = load_safetensors(clone, str(path / _WEIGHTS))
        if missing or unexpected:
            raise ValueError(f"{path} does not match the model: missing={missing}, unexpected={unexpected}")
        return frozen_copy(clone)

    def _load(self, path: Path) -> None:
        meta = json.loads((path / _META).read_text())
        if int(meta["lora_rank"]) != self._lora_rank:
            raise ValueError(f"checkpoint has lora_rank {meta['lora_rank']}, trainer has {self._lora_rank}")
        missing, unexpected = load_safetensors(self._model, str(path / _WEIGHTS))
        if missing or unexpected:
            raise ValueError(f"checkpoint does not match the model: missing={missing}, unexpected={unexpected}")
        self._optimizer.load_state_dict(torch.load(path / _OPTIMIZER, weights_only=True))
        self._optimizer.zero_grad(set_to_none=True)
        self._steps = int(meta["steps"])
