"""``LocalSampler``: the ``Sampler`` port over one frozen in-process causal LM.

Concurrent ``sample`` calls are micro-batched: requests queue up, and a single driver task runs
decoding steps on the torch worker thread, each step one forward pass over every active row.
Requests join the running batch between steps (their prompts are prefilled together) and leave
it when done, so 16 agents sampling at once cost about one batched forward per token.
"""

from __future__ import annotations

import asyncio
import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from adapters.local import kv_batch
from adapters.local.prefix_groups import PrefixGroup, prompt_groups
from adapters.local.sampling import RowState, StopChecker, choose_tokens, make_row
from adapters.local.worker import TorchWorker
from ports.policy import SampledSequence, SamplingParams, StopReason

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(eq=False, slots=True)
class _Request:
    prompt: list[int]
    rows: list[RowState]
    future: asyncio.Future[list[SampledSequence]]
    remaining: int = 0


@dataclass(eq=False, slots=True)
class _Active:
    request: _Request
    row: RowState = field(repr=False)


class LocalSampler:
    """Samples from a private, frozen copy of a model; safe to share between many coroutines."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        worker: TorchWorker,
        name: str = "",
        max_batch_rows: int = 64,
        seed: int | None = None,
        shared_prefix_min_work: float = math.inf,
    ) -> None:
        """``model`` must not be trained afterwards (``LocalTrainer.sampler`` hands over a copy).
        ``shared_prefix_min_work``: prefill a prefix that prompts share once where the tokens it spares times the
        model's parameters reach it (``LocalTrainer``'s rule for training; never by default)."""
        cast(torch.nn.Module, model).eval()
        for p in model.parameters():
            p.requires_grad_(False)
        self.name = name
        self._model = model
        self._tokenizer = tokenizer
        self._worker = worker
        self._max_rows = max_batch_rows
        self._shared_prefix_min_work = shared_prefix_min_work
        self._parameter_count = sum(p.numel() for p in model.parameters())
        self._rng = random.Random(seed)
        eos = tokenizer.eos_token_id
        self._eos = int(eos) if isinstance(eos, int) else None
        pad = tokenizer.pad_token_id
        self._pad = int(pad) if isinstance(pad, int) else (self._eos or 0)
        self._checker = StopChecker(self._decode)
        self._pending: list[_Request] = []
        self._active: list[_Active] = []
        self._batch: kv_batch.KVBatch | None = None
        self._driver: asyncio.Task[None] | None = None
        self._forward_passes = 0
        self._prefilled_tokens = 0

    @classmethod
    def from_pretrained(
        cls, path: str | Path, *, dtype: torch.dtype = torch.float32, worker: TorchWorker | None = None
    ) -> LocalSampler:
        """A sampler over the model saved at ``path`` (local files only)."""
        from adapters.local.model_io import load_model, load_tokenizer

        return cls(load_model(path, dtype), load_tokenizer(path), worker=worker or TorchWorker())

    @property
    def forward_passes(self) -> int:
        """How many model forward passes sampling has run (a batched step counts once)."""
        return self._forward_passes

    @property
    def prefilled_tokens(self) -> int:
        """How many prompt tokens sampling has run through the model (a prompt shared by requests counts once)."""
        return self._prefilled_tokens

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        """Sample ``num_samples`` continuations; with ``params.seed`` the result is reproducible."""
        if not prompt_tokens:
            raise ValueError("prompt_tokens must not be empty")
        if num_samples < 1:
            raise ValueError("num_samples must be at least 1")
        if params.max_tokens <= 0:
            return [SampledSequence((), (), StopReason.LENGTH) for _ in range(num_samples)]
        base = params.seed if params.seed is not None else self._rng.getrandbits(62)
        rows = [make_row(params, base + i, self._eos) for i in range(num_samples)]
        future: asyncio.Future[list[SampledSequence]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(list(prompt_tokens), rows, future, remaining=num_samples))
        if self._driver is None or self._driver.done():
            self._driver = asyncio.create_task(self._drive())
        return await future

    async def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        """Logprob of each token given the ones before it (``None`` for the first), as Tinker's."""
        ids = list(tokens)
        return await self._worker.run(functools.partial(self._score, ids))

    def _score(self, ids: list[int]) -> list[float | None]:
        if not ids:
            return []
        with torch.inference_mode():
            inputs = torch.tensor([ids], dtype=torch.long)
            logits = cast(torch.Tensor, self._model(input_ids=inputs).logits)[0, :-1]
            self._forward_passes += 1
            lps = torch.log_softmax(logits.double() if logits.dtype == torch.float64 else logits.float(), -1)
            picked = lps.gather(1, inputs[0, 1:].unsqueeze(1)).squeeze(1).tolist()
        return [None, *(float(x) for x in picked)]

    def _decode(self, tokens: list[int]) -> str:
        return cast(str, self._tokenizer.decode(tokens))

    async def _drive(self) -> None:
        """Run steps until no request is pending or active; fails every waiter if a step fails."""
        try:
            while self._pending or self._active:
                admitted = self._take_pending()
                done = await self._worker.run(functools.partial(self._step, admitted))
                for request in done:
                    if not request.future.done():
                        request.future.set_result([_result(r) for r in request.rows])
        except BaseException as exc:
            failed = {id(a.request): a.request for a in self._active}
            failed |= {id(r): r for r in self._pending}
            self._active, self._pending, self._batch = [], [], None
            for request in failed.values():
                if not request.future.done():
                    request.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise

    def _take_pending(self) -> list[_Request]:
        room = self._max_rows - len(self._active)
        taken: list[_Request] = []
        while self._pending and (room >= len(self._pending[0].rows) or not (taken or self._active)):
            request = self._pending.pop(0)
            room -= len(request.rows)
            taken.append(request)
        return taken

    def _step(self, admitted: list[_Request]) -> list[_Request]:
        """One decoding step for active rows, then prefill of admitted ones; returns finished requests."""
        finished: list[_Request] = []
        with torch.inference_mode():
            if self._batch is not None and self._active:
                tokens = [a.row.tokens[-1] for a in self._active]
                logits, batch = kv_batch.decode(self._model, self._batch, tokens)
                self._forward_passes += 1
                self._active, self._batch = self._advance(self._active, logits, batch, finished)
            if admitted:
                # A group's rollouts send one prompt each: prefill each distinct prompt once, then copy its cache.
                distinct: dict[tuple[int, ...], int] = {}
                which = [distinct.setdefault(tuple(r.prompt), len(distinct)) for r in admitted]
                logits, batch = self._prefill([list(p) for p in distinct])
                expand = [which[i] for i, r in enumerate(admitted) for _ in r.rows]
                batch = kv_batch.select(batch, expand)
                joining = [_Active(r, row) for r in admitted for row in r.rows]
                survivors, new_batch = self._advance(joining, logits[expand], batch, finished)
                if new_batch is not None:
                    if self._batch is None or not self._active:
                        self._batch = new_batch
                    else:
                        self._batch = kv_batch.merge(self._batch, new_batch)
                    self._active = self._active + survivors
        if not self._active:
            self._batch = None
        return finished

    def _prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, kv_batch.KVBatch]:
        """Next-token logits and caches of ``prompts``, rows in their order. A prefix that prompts share (a system
        or tools prompt) runs once where that spares at least ``shared_prefix_min_work``; the rest together."""
        shared: list[PrefixGroup] = []
        plain: list[int] = []
        for group in prompt_groups(prompts):
            if len(group.members) > 1 and group.saved_tokens * self._parameter_count >= self._shared_prefix_min_work:
                shared.append(group)
            else:
                plain.extend(group.members)
        parts: list[tuple[list[int], torch.Tensor, kv_batch.KVBatch]] = []
        for group in shared:
            members = list(group.members)
            prefix = prompts[members[0]][: group.prefix]
            suffixes = [prompts[i][group.prefix :] for i in members]
            parts.append((members, *kv_batch.prefill_shared(self._model, prefix, suffixes, self._pad)))
            self._forward_passes += 2
            self._prefilled_tokens += group.prefix + sum(map(len, suffixes))
        if plain:
            plain.sort()
            parts.append((plain, *kv_batch.prefill(self._model, [prompts[i] for i in plain], self._pad)))
            self._forward_passes += 1
            self._prefilled_tokens += sum(len(prompts[i]) for i in plain)
        if len(parts) == 1 and parts[0][0] == list(range(len(prompts))):
            return parts[0][1], parts[0][2]
        order = [i for members, _, _ in parts for i in members]
        batch = parts[0][2]
        for _, _, more in parts[1:]:
            batch = kv_batch.merge(batch, more)
        rows = sorted(range(len(order)), key=lambda k: order[k])
        return torch.cat([logits for _, logits, _ in parts])[rows], kv_batch.select(batch, rows)

    def _advance(
        self, active: list[_Active], logits: torch.Tensor, batch: kv_batch.KVBatch, finished: list[_Request]
    ) -> tuple[list[_Active], kv_batch.KVBatch | None]:
        """Sample a token for each row, retire finished rows; returns the rest and their batch."""
        tokens, logprobs = choose_tokens(logits, [a.row for a in active])
        keep: list[int] = []
        for i, (entry, token, logprob) in enumerate(zip(active, tokens, logprobs, strict=True)):
            if self._checker.update(entry.row, token, logprob):
                entry.request.remaining -= 1
                if entry.request.remaining == 0:
                    finished.append(entry.request)
            else:
                keep.append(i)
        if not keep:
            return [], None
        survivors = [active[i] for i in keep]
        return survivors, batch if len(keep) == len(active) else kv_batch.select(batch, keep)


def _result(row: RowState) -> SampledSequence:
    assert row.stop_reason is not None
    return SampledSequence(tuple(row.tokens), tuple(row.logprobs), row.stop_reason)
