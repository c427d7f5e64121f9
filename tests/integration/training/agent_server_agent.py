"""An agent server as a user writes one: a plain loop over stdin, one chat call per request through the rollout's
session, its reward on stdout with the request's id. It imports what it needs once.

It logs each request it takes to LOG_DIR (its pid and the session), and the first request any of its processes takes
(HANG_MARK does not exist yet) hangs, for the run's timeout to end.
"""

import json
import os
import sys
import time
from pathlib import Path

from openai import OpenAI

for line in sys.stdin:
    request = json.loads(line)
    task = request["task"]
    log = Path(os.environ["LOG_DIR"]) / f"{time.time_ns()}-{os.getpid()}.json"
    log.write_text(
        json.dumps({"pid": os.getpid(), "session": request["session"], "task": task["id"]})
    )
    mark = Path(os.environ["HANG_MARK"])
    if not mark.exists():
        mark.write_text(str(os.getpid()))
        time.sleep(3600)
    with OpenAI(
        base_url=request["openai_base_url"], api_key=os.environ["OPENAI_API_KEY"]
    ) as client:
        reply = client.chat.completions.create(
            model=task["model"], max_tokens=task["max_tokens"], temperature=task["temperature"],
            messages=[{"role": "user", "content": task["prompt"]}],
        )  # fmt: skip
    text = reply.choices[0].message.content or ""
    print(f"said {len(text)} characters")  # a print of its own, which Parity passes over
    # Varied text scores higher: a reward that differs between two replies of 8 tokens.
    reward = len(set(text)) / len(text) if text else 0.0
    print(json.dumps({"id": request["id"], "reward": reward}), flush=True)
