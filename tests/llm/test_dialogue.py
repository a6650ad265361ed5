"""Dialogue memory: a cut reply is kept as what the user heard of it."""

from voxrelay.llm.dialogue import Dialogue


def test_a_finished_reply_that_was_cut_while_playing_is_replaced_by_what_was_heard():
    dialogue = Dialogue()
    dialogue.add(0, "What is the capital of France?", "The capital of France is Paris.")
    dialogue.add(1, "And of Spain?", "Madrid is the capital of Spain, and it is big.")
    dialogue.heard(1, "Madrid is the…", user=None)
    assert dialogue.exchanges == [
        ("What is the capital of France?", "The capital of France is Paris."),
        ("And of Spain?", "Madrid is the…"),
    ]


def test_a_reply_aborted_while_generating_is_added_with_what_was_heard():
    dialogue = Dialogue()
    dialogue.heard(2, "…", user="Tell me a story.")
    assert dialogue.messages() == [
        {"role": "user", "content": "Tell me a story."},
        {"role": "assistant", "content": "…"},
    ]


def test_heard_for_an_unknown_turn_changes_nothing():
    dialogue = Dialogue()
    dialogue.add(0, "Hi.", "Hello!")
    dialogue.heard(7, "Hel…", user=None)
    assert dialogue.exchanges == [("Hi.", "Hello!")]
