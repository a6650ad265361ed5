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


def test_a_turn_the_user_went_on_with_opens_the_next_one_and_its_cut_reply_goes():
    """The end of turn came too soon ("And so my fellow Americans." | the reply starts |
    the user goes on): the LLM answers the whole sentence, and what it had begun to say
    over the user leaves the history."""
    dialogue = Dialogue()
    dialogue.add(0, "Hi.", "Hello!")
    dialogue.add(1, "And so my fellow Americans.", "I'm sorry for your loss.")
    dialogue.heard(1, "I'm…", user=None, continued=True)
    assert dialogue.exchanges == [("Hi.", "Hello!")]
    assert dialogue.user_text("ask not.") == "And so my fellow Americans ask not."
    # Cut again while that reply was still generating: the carried words grow.
    dialogue.heard(2, "…", user="ask not.", continued=True)
    assert dialogue.messages()[-1] == {"role": "assistant", "content": "Hello!"}
    dialogue.add(3, "what your country can do for you.", "Great words.")
    assert dialogue.exchanges[-1] == (
        "And so my fellow Americans ask not what your country can do for you.",
        "Great words.",
    )
    assert dialogue.user_text("Thanks.") == "Thanks."  # used up by the answered turn


def test_the_prompt_carries_the_words_of_the_turn_the_user_went_on_with(model_path):
    from voxrelay.llm.dialogue import llm_config
    from voxrelay.llm.native_backend import NativeBackend

    config = llm_config({"model_path": str(model_path)})
    backend = NativeBackend(config)
    dialogue = Dialogue()
    dialogue.heard(0, "…", user="I'd like to book a table.", continued=True)
    prompt = dialogue.prompt_text(backend, config, "For two, at seven")
    assert "<|im_start|>user\nI'd like to book a table For two, at seven<|im_end|>" in prompt
    assert "<|im_start|>assistant\n…" not in prompt
