import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_researcher_logs_in_sees_own_team_not_others_and_logs_out(page, login, world):
    login("alice", PASSWORD)
    expect(page.get_by_role("heading", name="My teams")).to_be_visible()
    page.get_by_role("link", name="Teams", exact=True).click()
    table = page.locator("table")
    expect(table.get_by_role("link", name="Vision")).to_be_visible()
    expect(table).not_to_contain_text("Language")
    expect(table).not_to_contain_text("Recommendations")

    page.goto("/teams/nlp/")
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()

    page.goto("/")
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    page.goto("/teams/")
    expect(page).to_have_url(re.compile(r".*/accounts/login/\?next=/teams/$"))


def test_user_creates_and_revokes_an_api_token_in_the_browser(page, login, world):
    login("bob", PASSWORD)
    page.get_by_role("link", name="bob").click()
    page.get_by_label("Token name").fill("notebook")
    page.get_by_role("button", name="Create token").click()
    token = page.get_by_test_id("new-token").inner_text()
    assert token.startswith("qm_")
    row = page.locator("tr", has_text="notebook")
    expect(row).to_contain_text("active")
    row.get_by_role("button", name="Revoke").click()
    expect(page.locator("tr", has_text="notebook")).to_contain_text("revoked")


def test_password_guessing_locks_the_account_out_of_this_address(page, world, settings):
    settings.AXES_FAILURE_LIMIT = 3
    for attempt in range(3):
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill("alice")
        page.get_by_label("Password").fill(f"guess-{attempt}")
        page.get_by_role("button", name="Log in").click()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("Too many failed sign-ins")
    expect(page.get_by_role("alert")).to_contain_text("ask a platform admin to unlock it")
    assert "/accounts/login/" in page.url
    page.goto("/")
    assert "/accounts/login/" in page.url  # still not signed in
