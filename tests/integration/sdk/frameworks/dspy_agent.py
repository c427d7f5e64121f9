"""DSPy: a Predict module on dspy.LM (LiteLLM underneath), its cache off so every call is made."""

import json
import os
import sys

import dspy

import parity


def main(session_id: str) -> None:
    with parity.session(session_id):  # Parity
        lm = dspy.LM(f"openai/{os.environ['AGENT_MODEL']}", api_base=parity.session_url(), api_key="unused",  # Parity
                     max_tokens=16, cache=False)  # fmt: skip
        dspy.configure(lm=lm)
        try:
            answer, stopped = dspy.Predict("question -> answer")(question="Say hello.").answer, None
        except Exception as error:  # noqa: BLE001 - the test judges which stops are the model's doing
            answer, stopped = None, f"{type(error).__name__}: {error}"
    print(json.dumps({"answer": answer, "stopped": stopped}))


main(sys.argv[1])
