"""bench/trainer.py's JSON lines (the last line of each log given) as one Markdown table, card named."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def last_json(path: Path) -> dict | None:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def main() -> None:
    runs = [(Path(arg), last_json(Path(arg))) for arg in sys.argv[1:]]
    cards = {run["card"] for _, run in runs if run}
    print(f"Card: {', '.join(sorted(cards)) or 'none'}\n")
    print(
        "| model | tokens/step | dtype | backend | step s | vs plain | CPU vs plain | tokens/s | MFU | peak GB | aten ops | save s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path, run in runs:
        if run is None:
            print(f"| {path.stem} | no result (see {path.name}) ||||||||||")
            continue
        for row in run["rows"]:
            mfu = f"{row['mfu']:.1%}" if row.get("mfu") is not None else "-"
            ratio = f"{row['vs_plain']:.2f}x" if row.get("vs_plain") is not None else "-"
            cpu_ratio = (
                f"{row['cpu_vs_plain']:.2f}x" if row.get("cpu_vs_plain") is not None else "-"
            )
            print(
                f"| {run['parameters'] / 1e6:.0f}M | {run['tokens']:,} | {row['dtype']} | {row['backend']} | "
                f"{row['step_ms'] / 1000:.2f} | {ratio} | {cpu_ratio} | {row['tokens_per_s']:,} | {mfu} | {row['peak_gpu_gb']} | "
                f"{row.get('aten_ops', '-')} | {row['save_weights_s']:.2f} |"
            )


if __name__ == "__main__":
    main()
