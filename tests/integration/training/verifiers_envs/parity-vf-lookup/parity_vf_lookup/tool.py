"""The lookup tool, an MCP server verifiers starts per rollout (a local subprocess: `python -m` this module)."""

import verifiers.v1 as vf

from parity_vf_lookup.codes import CODES


class LookupToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = "codes"

    @vf.tool
    def lookup(self, word: str) -> str:
        """The code of a word."""
        return CODES.get(word.strip().lower(), f"no code for {word!r}")


if __name__ == "__main__":
    LookupToolset.run()
