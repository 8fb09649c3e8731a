"""Chart sets on disk: a manifest and one Parquet file per query, written atomically.

A chart set is a directory::

    manifest.json    format and version, creation time, catalog fingerprint and
                     content, engine, and per query: SQL, plans (id, explain
                     text), axes (statistic, range, k), fixed statistics,
                     model, weights, memory unit, data file and its sha256
    <query>.parquet  one row per cell in C order: cell (int64), plan
                     (uint16, into the query's plans sorted by id), cost
                     (float64, the winning utility)

It is written into a hidden temporary sibling directory and renamed into
place, so a failed or killed build never leaves half a chart set, and an
existing one is replaced only when asked (``force``), and only once the new
one is complete. Reading checks the format, its version and every checksum.
Nothing is pickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from catalog import Catalog
from catalog.errors import CqoptError

FORMAT = "cqopt-chart-set"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class ChartSetError(CqoptError):
    """A chart set cannot be written or read: missing, foreign, damaged or stale."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_writable(out: Path, force: bool) -> None:
    """Fail before any work if ``out`` exists and may not be replaced."""
    out = Path(out)
    if out.exists() and not force:
        raise ChartSetError(f"{out} already exists; pass --force to replace it")
    if out.exists() and not out.is_dir():
        raise ChartSetError(f"{out} exists and is not a directory; choose another --out")


def write_chart_set(out: Path, charts: list, catalog: Catalog, *, force: bool = False,
                    engine: str = "local", extra: dict[str, Any] | None = None) -> Path:
    """Write built charts as a chart set at ``out``; all or nothing."""
    out = Path(out)
    check_writable(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        queries = {}
        for chart in charts:
            data = f"{chart.spec.name}.parquet"
            table = pa.table({
                "cell": pa.array(np.arange(chart.spec.n_cells, dtype=np.int64)),
                "plan": pa.array(chart.plan_index.ravel().astype(np.uint16)),
                "cost": pa.array(chart.cost.ravel().astype(np.float64)),
            })
            pq.write_table(table, tmp / data)
            queries[chart.spec.name] = {
                **chart.spec.to_dict(),
                "plans": [{"id": i, "explain": e}
                          for i, e in zip(chart.plan_ids, chart.plan_explains)],
                "cells": chart.spec.n_cells,
                "plans_used": chart.plans_used,
                "data": data,
                "sha256": sha256_file(tmp / data),
            }
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "catalog_fingerprint": catalog.fingerprint(),
            "catalog": catalog.to_dict(),
            "engine": engine,
            **(extra or {}),
            "queries": queries,
        }
        with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        _swap_into_place(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _swap_into_place(tmp: Path, out: Path, force: bool) -> None:
    if not out.exists():
        os.rename(tmp, out)
        return
    check_writable(out, force)
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.rename(out, old / "set")  # the old set stays whole until the new one is in place
    try:
        os.rename(tmp, out)
    except BaseException:
        os.rename(old / "set", out)
        raise
    finally:
        if out.exists():
            shutil.rmtree(old, ignore_errors=True)


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the chart set at ``path``, with its format checked."""
    path = Path(path)
    if not path.exists():
        raise ChartSetError(f"{path}: no such chart set (build one with cqopt build)")
    if not path.is_dir():
        raise ChartSetError(f"{path}: not a chart set: a chart set is a directory")
    manifest_path = path / MANIFEST
    if not manifest_path.exists():
        raise ChartSetError(f"{path}: not a chart set: it has no {MANIFEST}")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ChartSetError(f"{manifest_path}: damaged: not readable JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ChartSetError(f"{manifest_path}: not a cqopt chart set manifest "
                            f"(format {manifest.get('format') if isinstance(manifest, dict) else None!r})")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ChartSetError(f"{path}: written in chart-set format version {version}; this "
                            f"cqopt reads version {FORMAT_VERSION}: rebuild it with cqopt build")
    for key in ("catalog", "catalog_fingerprint", "queries"):
        if key not in manifest:
            raise ChartSetError(f"{manifest_path}: damaged: the key {key!r} is missing")
    return manifest


def read_query_data(path: Path, name: str, entry: dict[str, Any]) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """The plan index and cost arrays of one query, checked against the manifest."""
    data = Path(path) / entry["data"]
    if Path(entry["data"]).name != entry["data"]:
        raise ChartSetError(f"{path}: damaged: query {name}'s data file {entry['data']!r} "
                            "is not a plain file name")
    if not data.exists():
        raise ChartSetError(f"{path}: damaged: query {name}'s data file {entry['data']} "
                            "is missing")
    actual = sha256_file(data)
    if actual != entry["sha256"]:
        raise ChartSetError(f"{data}: damaged: its sha256 is {actual[:12]}..., the manifest "
                            f"says {entry['sha256'][:12]}...; rebuild the chart set")
    try:
        table = pq.read_table(data, columns=["cell", "plan", "cost"])
    except (pa.ArrowException, OSError) as err:
        raise ChartSetError(f"{data}: damaged: not a readable chart Parquet file ({err})") \
            from None
    shape = tuple(a["k"] for a in entry["axes"])
    cells = table.column("cell").to_numpy()
    if len(cells) != int(np.prod(shape)) or not np.array_equal(cells, np.arange(len(cells))):
        raise ChartSetError(f"{data}: damaged: expected cells 0..{int(np.prod(shape)) - 1} "
                            "in order")
    plan = table.column("plan").to_numpy().astype(np.intp)
    if plan.size and plan.max() >= len(entry["plans"]):
        raise ChartSetError(f"{data}: damaged: a cell names plan {plan.max()}, but the query "
                            f"has {len(entry['plans'])} plans")
    return plan.reshape(shape), table.column("cost").to_numpy().reshape(shape)
