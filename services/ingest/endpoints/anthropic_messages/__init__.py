"""The Anthropic Messages API: protocol.py (the request as a chat request), answers.py (the chat answer as a
message or as Anthropic's events), serving.py (the endpoints), template_facts.py (what the policy's chat
template needs of the translation)."""
