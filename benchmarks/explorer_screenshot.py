"""The README's picture of the explorer: `keras-attn serve` on an export, one sentence translated.

    python -m benchmarks.explorer_screenshot --translation saved_models/transformer/1 \
        --out docs/images/explorer.png

Copies the export into a fresh model root, starts `keras-attn serve` on it,
opens `/` in headless Chromium (Debian's `chromium`, driven by Playwright),
translates `--text` with beam 4, hovers one target token and saves the page.
"""

import argparse
import os
import shutil
import tempfile

from tests.serving.conftest import serving_process


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--translation", required=True, help="a translation export (saved_models/<name>/<version>)"
    )
    parser.add_argument("--text", default="Ein Hund rennt mit einem Stock im Maul über die Wiese.")
    parser.add_argument(
        "--hover", type=int, default=1, help="the target token to hover (0: the first)"
    )
    parser.add_argument("--out", default="docs/images/explorer.png")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    root = tempfile.mkdtemp(prefix="explorer-")
    shutil.copytree(args.translation, os.path.join(root, "transformer", "1"))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    try:
        with serving_process(root) as (_, url, _), sync_playwright() as driver:
            browser = driver.chromium.launch(
                executable_path=shutil.which("chromium"), headless=True
            )
            page = browser.new_page(viewport={"width": 1100, "height": 760})
            page.goto(url + "/")
            page.wait_for_selector("body[data-state=ready]")
            page.fill("#source", args.text)
            page.click("#translate")
            page.wait_for_selector("body[data-state=translated]")
            page.locator(".token.target").nth(args.hover).hover()
            page.screenshot(path=args.out, full_page=True)
            browser.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
