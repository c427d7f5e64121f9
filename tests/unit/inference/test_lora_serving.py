"""`--lora-rank`: vLLM starts with LoRA enabled, at a --max-lora-rank it accepts, and loads adapters while it runs."""

from pathlib import Path

import pytest

from parity.services.inference.vllm_launcher import VllmLaunchConfig, max_lora_rank


def test_a_lora_rank_enables_runtime_adapters_at_the_smallest_max_rank_that_holds_it(
    tmp_path: Path,
) -> None:
    config = VllmLaunchConfig(model_path=tmp_path, port=1, python=tmp_path / "python", lora_rank=12)
    command = config.command()
    assert "--enable-lora" in command and command[command.index("--max-lora-rank") + 1] == "16"
    assert config.environment()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    plain = VllmLaunchConfig(model_path=tmp_path, port=1, python=tmp_path / "python")
    assert "--enable-lora" not in plain.command()
    assert [max_lora_rank(rank) for rank in (1, 2, 8, 9, 512)] == [1, 8, 8, 16, 512]
    with pytest.raises(ValueError, match="between 1 and 512"):
        VllmLaunchConfig(model_path=tmp_path, port=1, python=tmp_path / "python", lora_rank=513)
