"""Browser tests: real headless Chromium (Debian's), driven by Playwright."""

import os

import pytest

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

# Playwright's sync API runs an event loop in this thread; Django's ORM calls from the test body
# are still synchronous and safe here.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(15_000)
    page = context.new_page()
    # Confirmation dialogs (cancel, reject, withdraw, hold) are accepted, and kept so a test
    # can check what was asked.
    page.dialogs = []

    def accept(dialog):
        page.dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    yield page
    context.close()


@pytest.fixture
def login(page):
    """login(username, password) through the real login form."""

    def do(username, password):
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url("**/")

    return do


@pytest.fixture
def sim_jobs_tx(world):
    """A running kubesim registered, synced, with tiers and quotas reconciled (the browser
    tests' live server sees it: no test transaction)."""
    from tests.fixtures_cluster import make_sim_cluster
    from tests.queues.builders import sim_jobs_setup

    with make_sim_cluster() as sim:
        sim.sync()
        yield sim_jobs_setup(world, sim)


def fill_job_form(page, *, name, workers, gpus, command="torchrun train.py", pool="a100",
                  expected=None, image="ghcr.io/acme/train:1.0"):  # fmt: skip
    """Fill the job form's basic fields (pool by value, or {"label": ...})."""
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Image").fill(image)
    page.get_by_label("Command").fill(command)
    page.get_by_label("Workers", exact=True).fill(str(workers))
    page.get_by_label("GPUs per worker").fill(str(gpus))
    if isinstance(pool, dict):
        page.get_by_label("Pool").select_option(**pool)
    else:
        page.get_by_label("Pool").select_option(pool)
    page.get_by_label("Maximum runtime (seconds)").fill("600")
    if expected is not None:
        page.get_by_label("Expected runtime (seconds)").fill(str(expected))


def open_section(page, title):
    """Unfold a section of the job form by its summary, as a person would (the advanced
    fields are folded until opened, or until they hold an error or a value of their own)."""
    section = page.locator("#job-form details", has=page.locator("summary", has_text=title))
    if section.get_attribute("open") is None:
        section.locator("summary").click()
