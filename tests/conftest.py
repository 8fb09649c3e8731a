"""Shared test fixtures and paths."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SHARED_DATA = ROOT.parent / "shared" / "data"
