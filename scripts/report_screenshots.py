"""Screenshots of the fidelity report and the run report at 1400 and 800 px, in headless
Chromium, to look at what a reader sees (tables that fit, readable figures).

The fidelity report's ``report.html`` is shown as it is. The run report is
Markdown (``report.md`` and its ``timeline.png``): it is turned into a plain
HTML page here (headings, lists, tables, images, bold and code; nothing else of
Markdown), written to ``--out`` with the images by absolute path, and shown.
Nothing is written into the report folders.

Make the reports with the help examples (from any folder), then::

    cqopt build --catalog examples/dec-pkt.toml --workload examples/workload.toml \\
        --out out/charts --engine local
    cqopt generate --catalog examples/dec-pkt.toml --out out/traces --duration 60 \\
        --steady TCP.src_host --steady UDP.dest_host --steady SF.dest_host
    cqopt fidelity --catalog examples/dec-pkt.toml --workload examples/workload.toml \\
        --charts out/charts --traces out/traces --out out/report
    cqopt generate --catalog examples/dec-pkt.toml --streams TCP --duration 20 \\
        --file-per-round 1 --out out/rounds
    cqopt run --catalog examples/dec-pkt.toml --workload examples/workload.toml \\
        --charts out/charts --query Q1 --source TCP=out/rounds/TCP --out out/run --shadow
    python scripts/report_screenshots.py --fidelity out/report --run out/run \\
        --out out/screenshots

Chromium: ``apt-get install -y chromium`` (Debian), or ``--chromium PATH``.
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTHS = (1400, 800)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--hide-scrollbars")
STYLE = """body { font: 16px/1.5 system-ui, sans-serif; margin: 0; color: #1d1d1f; }
main { max-width: 70rem; margin: 0 auto; padding: 1rem 1.5rem 3rem; }
img { display: block; max-width: 100%; height: auto; }
table { border-collapse: collapse; } th, td { padding: .3rem .7rem; border-bottom: 1px solid #ddd; }
code { background: #eee; padding: 0 .3em; border-radius: 3px; }
@media (max-width: 900px) { main { padding: .75rem; } }"""


def inline(text: str, folder: Path) -> str:
    """One line of Markdown's inline markup as HTML: images, links, bold, italics, code."""
    text = html.escape(text, quote=False)
    text = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)",
                  lambda m: f'<img alt="{m[1]}" src="{(folder / m[2]).resolve().as_uri()}">',
                  text)
    text = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r'<a href="\2">\1</a>', text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return re.sub(r"(?<![\w])_([^_]+)_(?![\w])", r"<i>\1</i>", text)


def markdown_page(path: Path) -> str:
    """``report.md`` as a plain HTML page (the subset of Markdown cqopt's reports use)."""
    out, listing, table = [], False, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if listing and not line.startswith(("- ", "  ")):
            out.append("</ul>")
            listing = False
        if table and not line.startswith("|"):
            out.append("</table>")
            table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{inline(line[level:].strip(), path.parent)}</h{level}>")
        elif line.startswith("- "):
            out.append(("" if listing else "<ul>") + f"<li>{inline(line[2:], path.parent)}")
            listing = True
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if all(set(c) <= set("-:") for c in cells):
                continue
            tag = "th" if not table else "td"
            out.append(("" if table else "<table>") + "<tr>" + "".join(
                f"<{tag}>{inline(c, path.parent)}</{tag}>" for c in cells) + "</tr>")
            table = True
        elif line.strip():
            out.append(f"<p>{inline(line.strip(), path.parent)}</p>")
    out += ["</ul>"] * listing + ["</table>"] * table
    return ("<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' "
            f"content='width=device-width'><style>{STYLE}</style></head><body><main>"
            + "\n".join(out) + "</main></body></html>")


def screenshot(chromium: str, page: Path, image: Path, width: int, height: int) -> None:
    """One screenshot of ``page`` at ``width`` x ``height`` px."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}",
                        f"--screenshot={image}", f"--window-size={width},{height}",
                        page.resolve().as_uri()], check=True, capture_output=True, timeout=120)
    if not image.is_file():
        raise SystemExit(f"chromium wrote no {image}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fidelity", type=Path, help="a cqopt fidelity report folder")
    parser.add_argument("--run", type=Path, help="a cqopt run folder")
    parser.add_argument("--out", type=Path, required=True, help="folder for the screenshots")
    parser.add_argument("--height", type=int, default=2400, help="window height in px")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    if not Path(args.chromium).is_file():
        parser.error(f"no Chromium at {args.chromium}: apt-get install -y chromium, or "
                     "pass --chromium PATH")
    pages = []
    if args.fidelity is not None:
        pages.append(("fidelity", args.fidelity / "report.html"))
    if args.run is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        view = args.out / "run-report.html"
        view.write_text(markdown_page(args.run / "report.md"), encoding="utf-8")
        pages.append(("run", view))
    if not pages:
        parser.error("give --fidelity REPORT, --run RUN, or both")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, page in pages:
        if not page.is_file():
            parser.error(f"{page}: no such file")
        for width in WIDTHS:
            image = args.out / f"{name}-{width}.png"
            screenshot(args.chromium, page, image, width, args.height)
            print(f"wrote {image}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
