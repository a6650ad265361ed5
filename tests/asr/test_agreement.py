from voxrelay.asr.agreement import LocalAgreement


def test_stable_needs_two_agreeing_decodes() -> None:
    agreement = LocalAgreement()
    agreement.update("go forward")
    assert (agreement.stable_text, agreement.unstable_text) == ("", "go forward")
    agreement.update("Go forward ten")
    assert (agreement.stable_text, agreement.unstable_text) == ("Go forward", "ten")
    agreement.update("Go forward 10 meters.")
    assert (agreement.stable_text, agreement.unstable_text) == ("Go forward", "10 meters.")
    agreement.update("Go forward 10 meters.")
    # Stable words are spelled as in the decode that confirmed them.
    assert agreement.stable_text == "Go forward 10 meters."
    assert agreement.unstable_text == ""


def test_stable_is_never_retracted() -> None:
    agreement = LocalAgreement()
    agreement.update("the cat sat")
    agreement.update("the cat sat on")
    assert agreement.stable_text == "the cat sat"
    agreement.update("a cat sat on the mat")
    # "the" stays; "on" is confirmed by this decode even though it rewrote the start.
    assert agreement.stable_text == "the cat sat on"
    assert agreement.unstable_text == "the mat"


def test_dropped_leading_word_does_not_duplicate_the_tail() -> None:
    agreement = LocalAgreement()
    agreement.update("Mr. John Dashwood had")
    agreement.update("Mr. John Dashwood had then")
    assert agreement.stable_text == "Mr. John Dashwood had"
    agreement.update("And Mr. John Dashwood had then leisure")
    assert agreement.stable_text == "Mr. John Dashwood had then"
    assert agreement.unstable_text == "leisure"


def test_update_reports_changes_only() -> None:
    agreement = LocalAgreement()
    assert agreement.update("hello")
    assert agreement.update("hello there")  # "hello" becomes stable
    assert agreement.update("hello there")  # "there" becomes stable
    assert not agreement.update("Hello there.")


def test_agree_with_keeps_a_stable_prefix_that_holds() -> None:
    agreement = LocalAgreement()
    agreement.update("Go forward ten")
    agreement.update("Go forward ten meters")
    assert agreement.agree_with("go forward, ten meters.") is None  # same words
    assert agreement.stable_text == "Go forward ten"


def test_agree_with_rolls_back_revised_stable_words() -> None:
    agreement = LocalAgreement()
    agreement.update("Mr. John Dashwood had")
    agreement.update("Mr. John Dashwood had then")
    # The final decode heard a leading "And": no stable word is at its place any more.
    assert agreement.agree_with("And Mr. John Dashwood had then leisure") == 0
    assert agreement.stable_text == ""
    assert agreement.unstable_text == "And Mr. John Dashwood had then leisure"
    agreement = LocalAgreement()
    agreement.update("the cat sat on")
    agreement.update("the cat sat on")
    assert agreement.agree_with("the cat sang on the mat") == 2
    assert agreement.stable_text == "the cat"
