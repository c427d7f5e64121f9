"""A GGUF file into a Hugging Face model folder that vLLM serves and the trainer trains.

transformers reads GGUF and dequantises it to full-precision weights; this module checks
the file first, so a corrupt file, an architecture or a quantisation nothing here can read
fails with what to do instead of a traceback from deep inside the loader. The folder is
written beside its destination and renamed into place: a failed import leaves nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Causal language models that transformers dequantises from GGUF and vLLM serves.
CAUSAL_ARCHITECTURES = frozenset(
    {
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "qwen2_moe",
        "qwen3_moe",
        "phi3",
        "gemma2",
        "gemma3",
        "stablelm",
        "starcoder2",
    }
)
FULL_PRECISION_TYPES = frozenset({"F32", "F16", "BF16"})


class ModelPreparationError(ValueError):
    """A model that cannot be prepared; the message says why and what to do instead."""


@dataclass(frozen=True)
class GgufSummary:
    architecture: str
    tensor_types: frozenset[str]
    eos_token_id: int | None
    bos_token_id: int | None
    pad_token_id: int | None
    has_chat_template: bool


def read_summary(path: Path) -> GgufSummary:
    """The header facts an import depends on; raises ModelPreparationError for what cannot be imported."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except (
        ValueError,
        OSError,
        IndexError,
        KeyError,
    ) as error:  # gguf's reader signals a bad file with these
        raise ModelPreparationError(
            f"{path} is not a readable GGUF file ({error}); reinstall the package that ships it"
        ) from error

    def field(name: str) -> object:
        found = reader.fields.get(name)
        return found.contents() if found is not None else None

    architecture = str(field("general.architecture") or "")
    summary = GgufSummary(
        architecture=architecture,
        tensor_types=frozenset(tensor.tensor_type.name for tensor in reader.tensors),
        eos_token_id=_int_or_none(field("tokenizer.ggml.eos_token_id")),
        bos_token_id=_int_or_none(field("tokenizer.ggml.bos_token_id")),
        pad_token_id=_int_or_none(field("tokenizer.ggml.padding_token_id")),
        has_chat_template=bool(field("tokenizer.chat_template")),
    )
    if architecture not in CAUSAL_ARCHITECTURES:
        raise ModelPreparationError(
            f"{path}: architecture {architecture or '(none)'!r} is not one Parity can import from GGUF; "
            f"supported: {', '.join(sorted(CAUSAL_ARCHITECTURES))}. Use a Hugging Face model folder instead (--model DIR)"
        )
    unreadable = sorted(summary.tensor_types - FULL_PRECISION_TYPES - _dequantisable_types())
    if unreadable:
        raise ModelPreparationError(
            f"{path}: quantisation {', '.join(unreadable)} cannot be dequantised by the installed gguf package; "
            "use a file in F32, F16, BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 or a K-quant, or a Hugging Face model folder"
        )
    if not summary.has_chat_template:
        raise ModelPreparationError(
            f"{path} carries no chat template; agents' chat calls need one. Use an instruct model's GGUF"
        )
    return summary


def import_gguf(path: Path, destination: Path) -> Path:
    """Write `destination` (safetensors in float32, tokenizer, chat template) from the GGUF file at `path`."""
    summary = read_summary(path)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}-", dir=destination.parent))
    try:
        # The loader's per-tensor progress bars (plain tqdm, on stderr) would be all a preparation prints;
        # the caller says in one line what happens, and a failure is raised, not printed.
        with contextlib.redirect_stderr(io.StringIO()):
            tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
            _set_special_tokens(tokenizer, summary)
            model = AutoModelForCausalLM.from_pretrained(
                path.parent, gguf_file=path.name, dtype=torch.float32
            )
            model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        check_model_folder(staging)
        if destination.exists():
            shutil.rmtree(destination)
        staging.rename(destination)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return destination


def check_model_folder(folder: Path) -> None:
    """A folder `parity up` can serve and agents can chat with: a config and a chat template."""
    if not (folder / "config.json").is_file():
        raise ModelPreparationError(f"{folder} is not a Hugging Face model folder (no config.json)")
    if not has_chat_template(folder):
        raise ModelPreparationError(
            f"{folder} has no chat template, which agents' chat calls need: add chat_template.jinja to the folder "
            "(or a chat_template key in tokenizer_config.json), e.g. copied from the model's instruct release"
        )


def has_chat_template(folder: Path) -> bool:
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    config = folder / "tokenizer_config.json"
    try:
        return bool(config.is_file() and json.loads(config.read_text()).get("chat_template"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False


def _set_special_tokens(tokenizer: object, summary: GgufSummary) -> None:
    """The GGUF header's end-of-turn and padding ids, which transformers' GGUF reader does not always carry over."""
    vocabulary = tokenizer.convert_ids_to_tokens  # type: ignore[attr-defined]
    if summary.eos_token_id is not None:
        tokenizer.eos_token = vocabulary(summary.eos_token_id)  # type: ignore[attr-defined]
    if summary.bos_token_id is not None:
        tokenizer.bos_token = vocabulary(summary.bos_token_id)  # type: ignore[attr-defined]
    pad_id = summary.pad_token_id if summary.pad_token_id is not None else summary.eos_token_id
    if pad_id is not None:
        tokenizer.pad_token = vocabulary(pad_id)  # type: ignore[attr-defined]


def _dequantisable_types() -> frozenset[str]:
    import gguf.quants

    return frozenset(kind.name for kind in gguf.quants._type_traits)


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
