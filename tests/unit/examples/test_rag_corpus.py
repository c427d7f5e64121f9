"""The RAG example's corpus, its full-text search and its reward: what the policy may ask and what it gets back."""

from __future__ import annotations

import json

import pytest

from examples.rag.agent import answer_reward
from examples.rag.corpus import Library, library, towns
from examples.rag.graph import SEARCH_COMMAND
from tests.conftest import REPO_ROOT

RAG = REPO_ROOT / "examples" / "rag"
NO_TERMS = "No results: search for a town's name."
NO_MATCH = "No results."


def test_the_corpus_is_the_same_on_every_machine_and_every_town_is_found_by_name() -> None:
    entries = towns()
    assert entries == towns() and len({t.name for t in entries}) == len(entries)
    for town in entries[:50]:
        assert library().search(town.name) == town.text
        assert library().search(f"when was {town.name} founded?") == town.text


# FTS5 query syntax around a town's name. Passed to MATCH as it is, all but two are FTS5 syntax errors
# (apsw.SQLError); `{}*` and `name:{}` would be a prefix query and a column filter.
@pytest.mark.parametrize("template", ['"{}', "NEAR({}", "{} OR", "{}*", "name:{}", "{})", "AND NOT {}", "-{}", "{}:",
                                      "NEAR({} founded"])  # fmt: skip
def test_any_text_is_a_query_fts5_syntax_never_reaches_the_index(template: str) -> None:
    for town in towns()[:20]:
        assert library().search(template.format(town.name)) == town.text


@pytest.mark.parametrize(("query", "answer"), [('"', NO_TERMS), ("*", NO_TERMS), (")", NO_TERMS), ("NEAR(", NO_MATCH),
                                               ("name:x", NO_MATCH)])  # fmt: skip
def test_syntax_alone_finds_no_town(query: str, answer: str) -> None:
    assert Library(towns()[:5]).search(query) == answer


def test_nothing_to_search_for_says_so() -> None:
    assert library().search("!?") == NO_TERMS
    assert library().search("Atlantis") == NO_MATCH


def test_tasks_ask_facts_of_towns_in_the_corpus_and_validation_towns_are_held_out() -> None:
    by_name = {t.name: t for t in towns()}
    rows = {
        name: [json.loads(line) for line in (RAG / name).read_text().splitlines()]
        for name in ("tasks.jsonl", "val_tasks.jsonl")
    }
    asked: dict[str, set[str]] = {}
    for name, tasks in rows.items():
        asked[name] = set()
        for task in tasks:
            (town,) = [
                t
                for word, t in by_name.items()
                if word in task["question"].replace("?", " ").split()
            ]
            assert task["answer"] in (str(town.founded), str(town.population))
            asked[name].add(town.name)
    assert not asked["tasks.jsonl"] & asked["val_tasks.jsonl"]


def searched_for(reply: str) -> str | None:
    command = SEARCH_COMMAND.search(reply)
    return command.group(1).strip() if command else None


def test_a_search_command_is_read_from_a_reply_and_the_answer_is_its_last_number() -> None:
    assert searched_for("SEARCH: Velmora") == "Velmora"
    assert searched_for("ok. search Korford please") == "Korford please"
    assert searched_for("1666") is None
    assert answer_reward("It was founded in 1666.", "1666") == 1.0
    assert answer_reward("1666, with 55,956 people", "1666") == 0.0
    assert answer_reward("no number", "1666") == 0.0
