"""A real report in a real headless Chromium (Debian's `chromium`, driven by Playwright with that executable): no
console error, no request beyond the file itself, every chart drawn, workflows open. `make test-browser` installs
what it needs; the screenshots are kept in tests/artifacts/ (the paths are printed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.evaluation.conftest import evaluate

CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} missing: `make test-browser` installs it"
    ),
]
ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHARTS = """[...document.querySelectorAll('.chart svg')].map(s => {
  const r = s.getBoundingClientRect();
  return {w: r.width, h: r.height, marks: s.querySelectorAll('path, use').length};
})"""


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
async def report(services: dict[str, str], tmp_path: Path) -> Path:
    await evaluate(
        tmp_path / "out",
        "--benchmark",
        "sim,gpqa-diamond,livecodebench,humaneval,rlpr",
        "--strategy",
        "conductor,single:*,moa,refine:5,consensus:5",
        "--limit",
        "3",
        "--repeats",
        "2",
        "--pool",
        services["CONDUCTOR_POOL"],
        "--concurrency",
        "16",
    )
    return tmp_path / "out" / "report.html"


async def test_the_report_renders_clean_in_chromium(report: Path, artifacts: Path) -> None:
    playwright = pytest.importorskip("playwright.async_api")
    url = report.as_uri()
    problems: list[str] = []
    async with playwright.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        page.on(
            "console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None
        )
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: problems.append(f"failed load: {r.url}"))
        page.on("request", lambda r: problems.append(f"external load: {r.url}") if r.url != url else None)
        await page.goto(url, wait_until="load")
        charts = await page.evaluate(CHARTS)
        await page.screenshot(path=str(artifacts / "report.png"), full_page=True)
        await page.locator("details.group").first.click()
        await page.locator("details.item").first.click()
        graph = await page.locator("details.item svg.wf").first.bounding_box()
        await page.locator("details.item").first.scroll_into_view_if_needed()
        await page.screenshot(path=str(artifacts / "report-workflows.png"))
        await browser.close()
    print(f"\nscreenshots: {artifacts / 'report.png'}, {artifacts / 'report-workflows.png'}")
    assert problems == []
    assert len(charts) == 3, charts
    for chart in charts:
        assert chart["w"] > 200 and chart["h"] > 100 and chart["marks"] > 10, charts  # not an empty chart
    assert graph is not None and graph["width"] > 100 and graph["height"] > 30
