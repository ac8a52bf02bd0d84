"""When the registrations read with the previous view may be used again (pure)."""

from __future__ import annotations

from aiozkconsumer.plan import registrations_still_valid


def test_one_join_or_leave_accounts_for_the_version_change() -> None:
    assert registrations_still_valid(["a", "b"], 7, ["a", "b", "c"], 8)
    assert registrations_still_valid(["a", "b", "c"], 8, ["a", "c"], 9)
    assert registrations_still_valid(["a", "b"], 7, ["a", "b"], 7)  # nothing changed


def test_a_member_registered_again_is_caught() -> None:
    # b was deleted and created again: two changes, the same list.
    assert not registrations_still_valid(["a", "b"], 7, ["a", "b"], 9)
    # ... next to a join: three changes, one visible.
    assert not registrations_still_valid(["a", "b"], 7, ["a", "b", "c"], 10)


def test_a_member_that_came_and_went_between_the_views_is_caught() -> None:
    assert not registrations_still_valid(["a"], 3, ["a"], 5)


def test_changes_counted_but_not_listed_make_it_invalid_never_valid() -> None:
    # A join after the list (counted by the version read after it, not listed) can only make
    # the check fail: the registrations are read again, never wrongly reused.
    assert not registrations_still_valid(["a", "b"], 7, ["a", "b", "c"], 9)
