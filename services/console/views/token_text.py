"""Token ids to the text the model saw, with the tokenizer of the model that produced them.

The tokenizer is read from the model folder a run's config names (`tokenizer.json`, the
`tokenizers` format every Hugging Face model ships), when this machine can read it.
Without one the console shows ids. Each id is decoded on its own, so a token that is
half of a UTF-8 character shows as U+FFFD, as it would in any per-token view.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import structlog
from tokenizers import Tokenizer

log = structlog.get_logger(__name__)

TOKENIZER_FILE = "tokenizer.json"


class TokenTexts:
    def __init__(self, tokenizer: Tokenizer | None, source: str) -> None:
        self.tokenizer = tokenizer
        # Where the tokenizer came from, or why there is none: the page says it.
        self.source = source
        self._texts: dict[int, str] = {}
        self._lock = threading.Lock()

    @property
    def available(self) -> bool:
        return self.tokenizer is not None

    def texts(self, ids: Sequence[int]) -> list[str]:
        if self.tokenizer is None:
            return [f"[{i}]" for i in ids]
        with self._lock:
            unknown = sorted({i for i in ids if i not in self._texts})
            if unknown:
                decoded = self.tokenizer.decode_batch(
                    [[i] for i in unknown], skip_special_tokens=False
                )
                self._texts.update(zip(unknown, decoded, strict=True))
            return [self._texts[i] for i in ids]


@lru_cache(maxsize=8)
def _load(path: str) -> Tokenizer | None:
    file = Path(path) / TOKENIZER_FILE
    try:
        return Tokenizer.from_file(str(file))
    except Exception as error:  # noqa: BLE001 - any unreadable tokenizer means "show ids"
        log.info("tokenizer_unreadable", path=str(file), error=str(error))
        return None


@lru_cache(maxsize=8)
def _texts_for(path: str) -> TokenTexts:
    tokenizer = _load(path)
    return TokenTexts(tokenizer, path if tokenizer else f"no readable {TOKENIZER_FILE} in {path}")


def token_texts(*candidates: str) -> TokenTexts:
    """The first readable tokenizer among the model folders given (a run's model, the console's default)."""
    reasons = []
    for path in candidates:
        if not path:
            continue
        texts = _texts_for(path)
        if texts.available:
            return texts
        reasons.append(texts.source)
    return TokenTexts(None, "; ".join(reasons) or "no model folder known for this session")
