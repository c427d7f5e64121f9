"""The agent `agent_server.py` runs both ways: it imports what a real agent imports before its first call, then makes
one chat call per rollout through the rollout's session and scores the reply.

    python startup_agent.py --imports openai,transformers:AutoTokenizer          one rollout (agent_command): the
                                                                                  task on stdin, {"reward": ...} out
    python startup_agent.py --imports openai,transformers:AutoTokenizer --serve  an agent server (agent_server): a
                                                                                  JSON line in, one out, per rollout

`module:name` imports the module and takes `name` from it, which is what loads a library that imports lazily
(transformers' AutoTokenizer brings torch with it). With `--serve` and an empty stdin it imports and exits: the
benchmark times that as the import cost.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any


def load(imports: str) -> None:
    for spec in filter(None, imports.split(",")):
        module, _, name = spec.partition(":")
        loaded = importlib.import_module(module)
        if name:
            getattr(loaded, name)


def rollout(task: dict[str, Any], base_url: str) -> float:
    from openai import OpenAI

    with OpenAI(base_url=base_url, api_key=os.environ["OPENAI_API_KEY"]) as client:
        reply = client.chat.completions.create(
            model=task["model"], max_tokens=task["max_tokens"], temperature=task["temperature"],
            messages=[{"role": "user", "content": task["prompt"]}],
        )  # fmt: skip
    words = (reply.choices[0].message.content or "").split()
    return len(set(words)) / len(words) if words else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imports", default="openai", help="comma-separated module or module:name")
    parser.add_argument("--serve", action="store_true", help="serve rollout after rollout on stdin")
    args = parser.parse_args()
    load(args.imports)
    if not args.serve:
        task = json.load(sys.stdin)
        print(json.dumps({"reward": rollout(task, os.environ["OPENAI_BASE_URL"])}))
        return
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = {
                "id": request["id"],
                "reward": rollout(request["task"], request["openai_base_url"]),
            }
        except Exception as error:  # noqa: BLE001 - the rollout fails with its reason; the process serves on
            reply = {"id": request["id"], "error": f"{type(error).__name__}: {error}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
