"""The status page of `mirror serve` (`/`), in a real headless chromium driven by selenium through Debian's
chromedriver, against a real service running real jobs between real registries; and its login and cookie
over plain HTTP."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from mirror.demo.localregistry import LocalRegistry
from mirror.demo.ports import free_port
from mirror.demo.sample import push_single
from mirror.demo.samplechart import chart_repository, hami_chart
from mirror.oci import Manifest
from mirror.service import page
from mirror.service.page import COOKIE, SESSION_SECONDS, new_session
from tests.faultproxy import Fault, fault_proxy
from tests.support import manifest_bytes, manifest_digest, with_client
from tests.test_chart import CHART_VERSION, seed_chart_images
from tests.test_service import API_TOKEN, AUTH, Service, service_config
from tests.test_sync import VERSION, seed_release

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
WAIT = 30  # seconds a browser step may take on a busy machine
DRIFTED = "v2.11.0"  # at the source, and something else under that tag at the target
ABSENT = "v2.12.0"  # not at the source at all
BUDGET = {"ratelimit-remaining": "76;w=21600", "ratelimit-limit": "100;w=21600"}  # as Docker Hub says it


# -- the browser ---------------------------------------------------------------------------------------


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    """Debian's chromium, headless, through Debian's chromedriver; scripts/bootstrap.sh installs both, so a
    missing one fails the test rather than skipping it."""
    for program in (CHROMIUM, CHROMEDRIVER):
        assert os.access(program, os.X_OK), f"{program} is missing: scripts/bootstrap.sh installs chromium"
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    options.add_argument("--headless=new")
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")  # chromium refuses to run as root inside its sandbox
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    options.add_argument("--disable-dev-shm-usage")
    options.add_argument("--window-size=412,915")  # a phone's viewport
    options.add_experimental_option(
        "prefs", {"download.default_directory": str(downloads), "download.prompt_for_download": False}
    )
    driver = webdriver.Chrome(
        options=options,
        service=ChromeService(executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log")),
    )
    driver.set_page_load_timeout(WAIT)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    try:
        yield driver
    finally:
        driver.quit()


def wait_for_url(driver: WebDriver, url: str) -> None:
    WebDriverWait(driver, WAIT).until(expected_conditions.url_to_be(url))


def log_in(driver: WebDriver, token: str) -> None:
    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    driver.find_element(By.ID, "login").click()


def card(driver: WebDriver, job_id: str) -> WebElement:
    return driver.find_element(By.ID, f"job-{job_id}")


def target_states(element: WebElement) -> dict[tuple[str, str], tuple[str, str]]:
    """(image, target) -> (state, reason) of a job's card, as the browser shows them."""
    states = {}
    for row in element.find_elements(By.CSS_SELECTOR, "tr.target-row"):
        image, target, state, _reference, reason = (cell.text for cell in row.find_elements(By.TAG_NAME, "td"))
        states[image, target] = (state, reason)
    return states


def wait_for_download(directory: Path) -> Path:
    """The one file chromium finished saving into `directory` (no `.crdownload` left)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        done = [p for p in directory.iterdir() if not p.name.endswith(".crdownload")]
        if done and not any(p.name.endswith(".crdownload") for p in directory.iterdir()):
            assert len(done) == 1, done
            return done[0]
        time.sleep(0.2)
    raise AssertionError(f"no download finished in {WAIT} s: {list(directory.iterdir())}")


def test_the_status_page_in_a_real_browser(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry, browser: WebDriver
) -> None:
    seed_release(source)
    index = Manifest.parse(manifest_bytes(source, "projecthami/hami", VERSION))
    with_client(source, lambda c: c.put_manifest("projecthami/hami", DRIFTED, index))
    other = with_client(target, lambda c: push_single(c, "mirrored/hami", DRIFTED, seed=9))  # someone else's
    drift = f"drift: {target.host}/mirrored/hami:{DRIFTED} points at {other.digest}, the source at {index.digest}"
    with fault_proxy(source.port) as proxy:  # the source answers with Docker Hub's pull budget
        proxy.add(Fault("headers", path=r"/manifests/", headers=BUDGET, count=10_000))
        config = service_config(tmp_path, proxy, target, schedule="0 0 1 1 *")  # next: a 1st of January
        running = Service(config, free_port())
        running.start()
        try:
            copied = running.wait_done(running.signed({"version": VERSION}).json()["id"])
            written = Path(copied["values"][0]["path"]).read_text()  # before a later job could write it again
            drifted = running.wait_done(running.signed({"version": DRIFTED}).json()["id"])
            absent = running.wait_done(running.signed({"version": ABSENT}).json()["id"])
            browse(browser, running, tmp_path, (copied, drifted, absent), written, drift)
        finally:
            assert running.stopped_cleanly()


def browse(
    driver: WebDriver,
    running: Service,
    tmp_path: Path,
    jobs: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
    written: str,
    drift: str,
) -> None:
    """What the browser sees of the three jobs: copied, drifted (one image) and absent at the source."""
    copied, drifted, absent = jobs
    assert copied["state"] == "succeeded", copied["error"]
    assert drifted["state"] == "failed" and "drift" in drifted["error"], drifted
    assert absent["state"] == "failed" and "tag not found" in absent["error"], absent
    home, login = f"{running.url}/", f"{running.url}/login"

    # no session: the page sends the browser to the login form
    driver.get(home)
    wait_for_url(driver, login)
    assert driver.find_element(By.ID, "token").get_attribute("type") == "password"
    assert driver.find_element(By.CSS_SELECTOR, 'meta[name="viewport"]').get_attribute("content") is not None

    # a wrong token: the form again, no session, no hint
    log_in(driver, "wrong-token-0123456789")
    WebDriverWait(driver, WAIT).until(expected_conditions.presence_of_element_located((By.ID, "refused")))
    assert driver.current_url == login and driver.get_cookie(COOKIE) is None
    assert driver.find_element(By.ID, "refused").text == "Not accepted."
    driver.get(home)
    wait_for_url(driver, login)

    # the right one: the page, and a session cookie that is not the token
    log_in(driver, API_TOKEN)
    wait_for_url(driver, home)
    cookie = driver.get_cookie(COOKIE)
    assert cookie is not None and API_TOKEN not in cookie["value"]
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["secure"] is False
    assert cookie["path"] == "/" and time.time() < cookie["expiry"] <= time.time() + SESSION_SECONDS + 60

    # the jobs, newest first, each with its state and what it did at each target
    shown = [element.get_attribute("id") for element in driver.find_elements(By.CSS_SELECTOR, "section.job")]
    assert shown == [f"job-{absent['id']}", f"job-{drifted['id']}", f"job-{copied['id']}"]
    good = card(driver, copied["id"])
    assert good.find_element(By.CSS_SELECTOR, ".badge").text == "succeeded"
    assert good.find_element(By.CSS_SELECTOR, ".versions").text == VERSION
    assert re.search(r"Took\n?\s*[0-9.]+ (s|min)", good.text), good.text
    assert target_states(good) == {("hami", "t0"): ("copied", ""), ("kube-webhook-certgen", "t0"): ("copied", "")}
    moved = card(driver, drifted["id"])
    assert moved.find_element(By.CSS_SELECTOR, ".badge").text == "failed"
    states = target_states(moved)
    assert states["kube-webhook-certgen", "t0"] == ("verified", "")  # copied by the first job
    state, reason = states["hami", "t0"]
    assert state == "drift" and reason.startswith(drift), reason
    missing = card(driver, absent["id"])
    assert missing.find_element(By.CSS_SELECTOR, ".badge").text == "failed"
    assert "tag not found" in missing.find_element(By.CSS_SELECTOR, ".job-error").text
    assert missing.find_elements(By.CSS_SELECTOR, ".values-link") == []

    # the schedule, and Docker Hub's budget as the newest job recorded it (each read the source)
    assert re.fullmatch(r"\d{4}-01-01 00:00:00Z \(0 0 1 1 \* UTC\)", driver.find_element(By.ID, "schedule").text)
    budget = driver.find_element(By.ID, "budget").text
    assert budget.startswith("76 of 100 left per 21600 s") and absent["id"][:12] in budget, budget

    # the values link: downloaded by the browser's own session, it is the file the job wrote
    (link,) = good.find_elements(By.CSS_SELECTOR, ".values-link")
    href = link.get_attribute("href")
    assert href == f"{running.url}/jobs/{copied['id']}/values/t0/hami?version={VERSION}"
    path = tmp_path / "status-page.png"
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(412, min(max(int(height), 915), 8000))
    assert driver.save_screenshot(str(path)) and path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    link.click()
    downloaded = wait_for_download(tmp_path / "downloads")
    assert downloaded.name == f"{copied['id'][:12]}-{VERSION}-t0-hami-values.yaml"
    assert downloaded.read_text() == written
    assert yaml.safe_load(written)["devicePlugin"]["image"]["repository"] == "mirrored/hami"
    # and the browser's cookie opens the job API without the bearer token
    session = {COOKIE: cookie["value"]}
    assert httpx.get(href, cookies=session, timeout=10).text == written
    assert httpx.get(f"{running.url}/jobs", cookies=session, timeout=10).json()["jobs"][0]["id"] == absent["id"]

    # logging out ends the session in the browser
    driver.find_element(By.ID, "logout").click()
    wait_for_url(driver, login)
    assert driver.get_cookie(COOKIE) is None
    driver.get(home)
    wait_for_url(driver, login)

    # a notification's link to a job, followed without a session: the login form, then that job's card alone
    # (found however many jobs came after it); the `#job-<id>` of older messages still leads to the card
    one = f"{running.url}{page.job_url(copied['id'])}"
    assert one == f"{home}?job={copied['id']}"
    driver.get(one)
    wait_for_url(driver, f"{login}?job={copied['id']}")
    log_in(driver, API_TOKEN)
    wait_for_url(driver, one)
    shown = [element.get_attribute("id") for element in driver.find_elements(By.CSS_SELECTOR, "section.job")]
    assert shown == [f"job-{copied['id']}"]
    assert card(driver, copied["id"]).find_element(By.CSS_SELECTOR, ".badge").text == "succeeded"
    assert driver.find_element(By.ID, "newest").get_attribute("href") == home
    driver.get(f"{home}?job={'0' * 32}")
    assert "is kept here: finished jobs are kept" in driver.find_element(By.ID, "no-such-job").text
    driver.find_element(By.ID, "logout").click()
    wait_for_url(driver, login)
    anchor = f"#job-{copied['id']}"
    driver.get(home + anchor)
    wait_for_url(driver, login + anchor)
    log_in(driver, API_TOKEN)
    wait_for_url(driver, home + anchor)
    assert card(driver, copied["id"]).find_element(By.CSS_SELECTOR, ".badge").text == "succeeded"


# -- the login and the cookie over plain HTTP -----------------------------------------------------------


def set_cookie(answer: httpx.Response) -> dict[str, str]:
    """The session's Set-Cookie attributes, names lowercased ("" for a flag)."""
    (header,) = answer.headers.get_list("set-cookie")
    parsed = SimpleCookie()
    parsed.load(header)
    morsel = parsed[COOKIE]
    attributes = {"value": morsel.value}
    for part in header.split(";")[1:]:
        name, _, value = part.strip().partition("=")
        attributes[name.lower()] = value
    return attributes


def log_in_over_http(service: Service, token: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{service.url}/login", data={"token": token}, headers=headers or {}, timeout=10)


def test_no_cookie_and_a_wrong_token_are_sent_to_the_form(service: Service) -> None:
    answer = httpx.get(f"{service.url}/", timeout=10)
    assert answer.status_code == 303 and answer.headers["location"] == "/login"
    assert httpx.get(f"{service.url}/", headers=AUTH, timeout=10).status_code == 303  # the page wants the cookie
    form = httpx.get(f"{service.url}/login", timeout=10)
    assert form.status_code == 200 and 'name="token"' in form.text and 'name="viewport"' in form.text
    assert form.headers["cache-control"] == "no-store"
    assert "script-src" not in form.headers["content-security-policy"]  # default-src 'none': no script at all
    for token in ("wrong-token-0123456789", "", API_TOKEN[:-1], API_TOKEN + "x"):
        refused = log_in_over_http(service, token)
        assert refused.status_code == 401 and "set-cookie" not in refused.headers, token
        assert 'name="token"' in refused.text and "Not accepted." in refused.text
        assert API_TOKEN not in refused.text
    missing = httpx.post(f"{service.url}/login", content=b"", timeout=10)
    assert missing.status_code == 401
    oversized = httpx.post(f"{service.url}/login", data={"token": "x" * (page.LOGIN_MAX_BODY + 1)}, timeout=10)
    assert oversized.status_code == 413 and "set-cookie" not in oversized.headers
    crowded = httpx.post(f"{service.url}/login", content=b"a&b&c&d&e&f&token=x", timeout=10)  # was a 500
    assert crowded.status_code == 400 and "set-cookie" not in crowded.headers


def test_a_links_job_goes_through_the_login_and_nothing_else_does(service: Service) -> None:
    """`/?job=<id>` keeps its job through the login form and back; what is not a job id is dropped on the way
    (the login redirects to this service's page and nowhere else)."""
    asked = httpx.get(f"{service.url}/?job=Ab3_x-9", timeout=10)
    assert asked.status_code == 303 and asked.headers["location"] == "/login?job=Ab3_x-9"
    landed = httpx.post(f"{service.url}/login?job=Ab3_x-9", data={"token": API_TOKEN}, timeout=10)
    assert landed.status_code == 303 and landed.headers["location"] == "/?job=Ab3_x-9"
    session = {COOKIE: landed.cookies[COOKIE]}
    unknown = httpx.get(f"{service.url}/?job=Ab3_x-9", cookies=session, timeout=10)
    assert unknown.status_code == 404 and 'id="no-such-job"' in unknown.text
    for hostile in ("//evil.example/x", "https://evil.example", "a b", "x" * 33):
        asked = httpx.get(f"{service.url}/", params={"job": hostile}, timeout=10)
        assert asked.headers["location"] == "/login", hostile
        landed = httpx.post(f"{service.url}/login", params={"job": hostile}, data={"token": API_TOKEN}, timeout=10)
        assert landed.headers["location"] == "/", hostile
        shown = httpx.get(f"{service.url}/", params={"job": hostile}, cookies=session, timeout=10)
        assert shown.status_code == 200 and 'id="no-such-job"' not in shown.text, hostile


def test_the_session_cookie(service: Service) -> None:
    answer = log_in_over_http(service, API_TOKEN)
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    cookie = set_cookie(answer)
    assert "httponly" in cookie and cookie["samesite"].lower() == "strict" and cookie["path"] == "/"
    assert cookie["max-age"] == str(SESSION_SECONDS) and "secure" not in cookie
    assert API_TOKEN not in cookie["value"] and re.fullmatch(r"1\.\d+\.[0-9a-f]{16}\.[0-9a-f]{64}", cookie["value"])
    session = {COOKIE: cookie["value"]}
    shown = httpx.get(f"{service.url}/", cookies=session, timeout=10)
    assert shown.status_code == 200 and "No jobs yet." in shown.text and "no schedule configured" in shown.text
    assert httpx.get(f"{service.url}/jobs", cookies=session, timeout=10).status_code == 200

    # through a TLS-terminating proxy on loopback (whose X-Forwarded-Proto uvicorn believes): Secure
    secure = set_cookie(log_in_over_http(service, API_TOKEN, {"X-Forwarded-Proto": "https"}))
    assert "secure" in secure and "httponly" in secure and secure["samesite"].lower() == "strict"

    # what the service did not sign, or signed too long ago, is no session: to the form, and 401 at the API
    now = time.time()
    expires, nonce, mac = cookie["value"].split(".")[1:]
    refused = {
        "the token itself": API_TOKEN,
        "signed with another token": new_session(b"another-token-0123456789", now),
        "expired": new_session(API_TOKEN.encode(), now - SESSION_SECONDS - 5),
        "its expiry moved": f"1.{int(expires) + 3600}.{nonce}.{mac}",
        "its nonce changed": f"1.{expires}.{'0' * 16}.{mac}",
        "garbage": "1.2.3.4",
    }
    for why, value in refused.items():
        page_answer = httpx.get(f"{service.url}/", cookies={COOKIE: value}, timeout=10)
        assert page_answer.status_code == 303 and page_answer.headers["location"] == "/login", why
        api = httpx.get(f"{service.url}/jobs", cookies={COOKIE: value}, timeout=10)
        assert api.status_code == 401 and api.headers["www-authenticate"] == "Bearer", why
    # the same minting with the service's token is accepted: the refusals above are the cookies' own
    fresh = {COOKIE: new_session(API_TOKEN.encode(), now)}
    assert httpx.get(f"{service.url}/", cookies=fresh, timeout=10).status_code == 200

    # the bearer token still opens the job API, with no cookie
    assert httpx.get(f"{service.url}/jobs", headers=AUTH, timeout=10).json() == {"jobs": [], "next": None}
    assert httpx.get(f"{service.url}/jobs", timeout=10).status_code == 401

    # logging out deletes the cookie
    out = httpx.post(f"{service.url}/logout", cookies=session, timeout=10)
    assert out.status_code == 303 and out.headers["location"] == "/login"
    deleted = set_cookie(out)
    assert deleted["value"] == "" and deleted["max-age"] == "0"


def test_a_job_api_that_has_no_token_has_no_page(tmp_path: Path, source: LocalRegistry, target: LocalRegistry) -> None:
    config = service_config(tmp_path, source, target)
    data = yaml.safe_load(config.read_text())
    del data["service"]["api_token"]
    config.write_text(yaml.safe_dump(data))
    running = Service(config, free_port())
    running.start()
    try:
        form = httpx.get(f"{running.url}/login", timeout=10)
        assert form.status_code == 200 and "no service.api_token is configured" in form.text
        assert log_in_over_http(running, API_TOKEN).status_code == 401
        assert log_in_over_http(running, "").status_code == 401
        assert httpx.get(f"{running.url}/", timeout=10).status_code == 303
    finally:
        running.stop()


# -- the render proof -----------------------------------------------------------------------------------


def test_the_page_shows_each_values_files_render_proof(
    tmp_path: Path, source: LocalRegistry, target: LocalRegistry
) -> None:
    """A chart-driven release: the values are proven by rendering the chart with real Helm, and the page shows
    every image of the rendering with its verdict."""
    seed_chart_images(source)
    with chart_repository() as repository:
        repository.add("hami", CHART_VERSION, hami_chart(source.host, CHART_VERSION))
        config = service_config(tmp_path, source, target, chart={"repository": repository.url})
        data = yaml.safe_load(config.read_text())
        del data["images"]  # the chart names them
        config.write_text(yaml.safe_dump(data))
        running = Service(config, free_port())
        running.start()
        try:
            job = running.wait_done(running.signed({"version": VERSION}).json()["id"])
            assert job["state"] == "succeeded", job["error"]
            session = {COOKIE: set_cookie(log_in_over_http(running, API_TOKEN))["value"]}
            html = httpx.get(f"{running.url}/", cookies=session, timeout=10).text
        finally:
            assert running.stopped_cleanly()
    (proof,) = [v["proof"] for r in job["releases"] for v in r["values"]]
    assert proof["ok"] is True and proof["images"]
    assert "Render proof:" in html and "every image mirrored or allowed" in html
    for image in proof["images"]:
        assert f'<td class="mono">{image["image"]}' in html, image
        assert f">{image['verdict']}</span>" in html, image
    assert {image["verdict"] for image in proof["images"]} >= {"mirrored", "allowed registry"}
    assert manifest_digest(target, "mirrored/projecthami_hami", VERSION) is not None


def test_the_page_links_the_files_written_beside_the_values_and_the_browser_downloads_them(
    tmp_path: Path, source: LocalRegistry, acr_like: LocalRegistry, browser: WebDriver
) -> None:
    """A target that refuses the chart (ACR's personal edition): the job's .tgz and RBAC file, kept in the store,
    are links on the page, and chromium, logged in, saves the chart's very bytes."""
    seed_chart_images(source)
    with chart_repository() as repository:
        repository.add("hami", CHART_VERSION, hami_chart(source.host, CHART_VERSION))
        config = service_config(tmp_path, source, acr_like, chart={"repository": repository.url})
        data = yaml.safe_load(config.read_text())
        del data["images"]  # the chart names them
        config.write_text(yaml.safe_dump(data))
        running = Service(config, free_port())
        running.start()
        try:
            job = running.wait_done(running.signed({"version": VERSION}).json()["id"])
            assert job["state"] == "succeeded", job["error"]
            browser.get(f"{running.url}/")
            wait_for_url(browser, f"{running.url}/login")
            log_in(browser, API_TOKEN)
            wait_for_url(browser, f"{running.url}/")
            links = {link.text: link for link in card(browser, job["id"]).find_elements(By.CSS_SELECTOR, ".file-link")}
            assert sorted(links) == ["hami-2.10.0.tgz", "hami-scheduler-dra-rbac.yaml"]
            links["hami-2.10.0.tgz"].click()
            downloaded = wait_for_download(tmp_path / "downloads")
        finally:
            assert running.stopped_cleanly()
    assert downloaded.name == "hami-2.10.0.tgz"
    assert downloaded.read_bytes() == repository.charts["hami-2.10.0.tgz"]


# -- what comes from outside is escaped and clipped -----------------------------------------------------


def test_text_from_outside_is_escaped_and_clipped() -> None:
    hostile = '<script>alert("x")</script>'
    job = {
        "id": "0123456789abcdef",
        "kind": "ci",
        "state": "failed",
        "versions": ["v2.10.0"],
        "created_at": 1.0,
        "started_at": 2.0,
        "finished_at": 64.5,
        "attempts": 1,
        "error": hostile + "e" * 5000,
        "result": [
            {
                "version": "v2.10.0",
                "ok": False,
                "images": [
                    {
                        "name": f"<img src=x onerror=alert(1)>{'n' * 1000}",
                        "source": hostile,
                        "targets": [{"target": "t0", "reference": hostile, "verified": False, "error": hostile}],
                    }
                ],
                "values": [
                    {
                        "target": "t0",
                        "chart_name": "hami",
                        "content": "x: 1",
                        "proof": {"renderer": hostile, "ok": False, "images": [{"image": hostile, "verdict": "x"}]},
                    }
                ],
                "errors": [hostile],
                "source_rate_limit": None,
            }
        ],
    }
    view = page.job_view(job, now=100.0)
    html = page.templates.get_template("status.html").render(
        now="now",
        jobs=[view],
        one=None,
        older=None,
        newest=False,
        schedule={"expression": None, "next": None},
        budget=None,
    )
    assert "<script" not in html and "<img" not in html and "&lt;script&gt;" in html
    assert view["duration"] == "1 min 2 s" and view["releases"][0]["rows"][0]["state"] == "failed"
    assert len(view["error"]) < 600 and "characters cut" in view["error"]
    assert len(view["releases"][0]["rows"][0]["image"]) < 250
