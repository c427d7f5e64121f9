"""docs/training.md's settings table is the one TrainSettings generates."""

from parity.training.reference import DOC, rendered_doc


def test_the_docs_list_every_setting_as_the_settings_define_it() -> None:
    text = DOC.read_text()
    assert rendered_doc(text) == text, (
        "run `python -m parity.training.reference --write` and commit docs/training.md"
    )
