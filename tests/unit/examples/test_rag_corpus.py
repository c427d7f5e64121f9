"""The RAG example's corpus, its full-text search and its reward: what the policy may ask and what it gets back."""

from __future__ import annotations

import json

import pytest

from examples.rag.agent import answer_reward
from examples.rag.corpus import Library, library, towns
from examples.rag.graph import SEARCH_COMMAND
from tests.conftest import REPO_ROOT

RAG = REPO_ROOT / "examples" / "rag"


def test_the_corpus_is_the_same_on_every_machine_and_every_town_is_found_by_name() -> None:
    entries = towns()
    assert entries == towns() and len({t.name for t in entries}) == len(entries)
    for town in entries[:50]:
        assert library().search(town.name) == town.text
        assert library().search(f"when was {town.name} founded?") == town.text


@pytest.mark.parametrize("query", ['"', "NEAR(", "a OR", "*", "name:x", ")", "AND NOT"])
def test_any_text_is_a_query_fts5_syntax_never_reaches_the_index(query: str) -> None:
    assert isinstance(Library(towns()[:5]).search(query), str)


def test_nothing_to_search_for_says_so() -> None:
    assert library().search("!?") == "No results: search for a town's name."
    assert library().search("Atlantis") == "No results."


def test_tasks_ask_facts_of_towns_in_the_corpus_and_validation_towns_are_held_out() -> None:
    by_name = {t.name: t for t in towns()}
    rows = {name: [json.loads(line) for line in (RAG / name).read_text().splitlines()] for name in ("tasks.jsonl", "val_tasks.jsonl")}
    asked = {}
    for name, tasks in rows.items():
        asked[name] = set()
        for task in tasks:
            (town,) = [t for word, t in by_name.items() if word in task["question"].replace("?", " ").split()]
            assert task["answer"] in (str(town.founded), str(town.population))
            asked[name].add(town.name)
    assert not asked["tasks.jsonl"] & asked["val_tasks.jsonl"]


def test_a_search_command_is_read_from_a_reply_and_the_answer_is_its_last_number() -> None:
    assert SEARCH_COMMAND.search("SEARCH: Velmora").group(1).strip() == "Velmora"
    assert SEARCH_COMMAND.search("ok. search Korford please").group(1).strip() == "Korford please"
    assert SEARCH_COMMAND.search("1666") is None
    assert answer_reward("It was founded in 1666.", "1666") == 1.0
    assert answer_reward("1666, with 55,956 people", "1666") == 0.0
    assert answer_reward("no number", "1666") == 0.0
