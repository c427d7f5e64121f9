"""A run's picture: mean reward per step with its spread, validation reward, and policy loss."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def plot_rewards(
    steps: Sequence[int],
    values: Sequence[dict[str, float]],
    path: Path,
    title: str,
    validation: Sequence[tuple[int, float]] = (),
) -> Path:
    """A PNG: training reward (mean ± std) and, when given, validation reward (step, mean) above;
    policy loss below."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers; must precede pyplot
    import matplotlib.pyplot as plt

    reward = [v.get("reward_mean", float("nan")) for v in values]
    spread = [v.get("reward_std", 0.0) for v in values]
    loss = [v.get("policy_loss", float("nan")) for v in values]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(steps, reward, marker="o", color="tab:green", label="training reward")
    top.fill_between(steps, [m - s for m, s in zip(reward, spread, strict=True)], [m + s for m, s in zip(reward, spread, strict=True)],
                     color="tab:green", alpha=0.15)  # fmt: skip
    if validation:
        top.plot([s for s, _ in validation], [r for _, r in validation], marker="s", color="tab:blue",
                 label="validation reward")  # fmt: skip
        top.legend(loc="best")
    top.set_ylabel("reward (mean ± std)")
    top.set_title(title)
    top.grid(alpha=0.3)
    bottom.plot(steps, loss, marker="o", color="tab:red")
    bottom.set_ylabel("policy loss")
    bottom.set_xlabel("step")
    bottom.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
