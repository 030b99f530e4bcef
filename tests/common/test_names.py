"""The closest allowed name to a typo (issue 58, 7b): ``common.names``."""

from pspo_repro.common.names import closest, did_you_mean, did_you_mean_after, did_you_mean_each

METHODS = ["clip", "pspo", "sapo", "noclip"]


def test_a_typo_gets_the_closest_name():
    assert closest("pspp", METHODS) == "pspo"
    assert did_you_mean("pspp", METHODS) == "did you mean pspo? "
    assert did_you_mean_after("clp", METHODS) == "; did you mean clip?"


def test_nothing_close_or_not_text_gives_no_hint():
    assert closest("zzzzzz", METHODS) is None
    assert closest("nope", METHODS) is None  # not a typo of noclip (ratio 0.6)
    assert did_you_mean("zzzzzz", METHODS) == "" and did_you_mean_after("zzzzzz", METHODS) == ""
    assert did_you_mean(3, ["3", "4"]) == ""  # a number is not a misspelt name


def test_several_unknown_names_each_get_theirs():
    assert did_you_mean_each(["pspp"], METHODS) == "did you mean pspo? "
    assert (
        did_you_mean_each(["pspp", "zzzzzz", "clp"], METHODS) == "did you mean pspo for pspp, clip for clp? "
    )
    assert did_you_mean_each(["zzzzzz", "yyyyyy"], METHODS) == ""
