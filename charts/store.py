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

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cqopt.catalog import Catalog
from cqopt.errors import CqoptError

FORMAT = "cqopt-chart-set"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
COLUMN_TYPES = {"cell": np.int64, "plan": np.uint16, "cost": np.float64}


class ChartSetError(CqoptError):
    """A chart set cannot be written or read: missing, foreign, damaged or stale."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_writable(out: Path, force: bool) -> None:
    """Fail before any work if ``out`` exists and may not be replaced, or cannot be made."""
    out = Path(out)
    if out.exists() and not force:
        raise ChartSetError(f"{out} already exists; pass --force to replace it")
    if out.exists() and not out.is_dir():
        raise ChartSetError(f"{out} exists and is not a directory; choose another --out")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ChartSetError(f"cannot write {out}: {parent} is a file, not a directory")
            break


@contextlib.contextmanager
def staged_directory(out: Path, force: bool = False) -> Iterator[Path]:
    """A hidden temporary sibling of ``out`` to write into, renamed into place at the end.

    If the block fails, or the process dies, ``out`` is untouched: an existing
    directory is replaced (only with ``force``) once the new one is complete.
    """
    out = Path(out)
    check_writable(out, force)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as err:
        raise ChartSetError(f"cannot write {out}: {err}") from None
    try:
        yield tmp
        _swap_into_place(tmp, out, force)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ChartSetError(f"cannot write {out}: {err}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_chart_set(out: Path, charts: list, catalog: Catalog, *, force: bool = False,
                    engine: str = "local", extra: dict[str, Any] | None = None) -> Path:
    """Write built charts as a chart set at ``out``; all or nothing."""
    out = Path(out)
    with staged_directory(out, force) as tmp:
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
    return out


def _swap_into_place(tmp: Path, out: Path, force: bool) -> None:
    if not out.exists():
        os.rename(tmp, out)
        return
    check_writable(out, force)
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    previous = old / "previous"
    try:
        os.rename(out, previous)  # the old set stays whole until the new one is in place
        try:
            os.rename(tmp, out)
        except BaseException:
            os.rename(previous, out)
            raise
    finally:
        if not previous.exists():  # never delete the previous set if it could not go back
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


def read_query_data(path: Path, name: str, entry: dict[str, Any],
                    shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
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
        # ParquetFile reads one file without pyarrow.dataset and pandas: loads stay fast.
        table = pq.ParquetFile(data).read(columns=["cell", "plan", "cost"])
    except (pa.ArrowException, OSError) as err:
        raise ChartSetError(f"{data}: damaged: not a readable chart Parquet file ({err})") \
            from None
    def column(name: str) -> np.ndarray:
        # The columns are fixed-width and null-free: read the data buffer directly, since
        # pyarrow's to_numpy imports pandas, which the run-time path must not pay for.
        dtype = COLUMN_TYPES[name]
        array = table.column(name).combine_chunks()
        if array.type != pa.from_numpy_dtype(dtype) or array.null_count:
            raise ChartSetError(f"{data}: damaged: column {name} is {array.type} with "
                                f"{array.null_count} nulls, expected {dtype} without nulls")
        return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array),
                             offset=array.offset * np.dtype(dtype).itemsize)

    cells = column("cell")
    if len(cells) != int(np.prod(shape)) or not np.array_equal(cells, np.arange(len(cells))):
        raise ChartSetError(f"{data}: damaged: expected cells 0..{int(np.prod(shape)) - 1} "
                            "in order")
    plan = column("plan").astype(np.intp)
    if plan.size and plan.max() >= len(entry["plans"]):
        raise ChartSetError(f"{data}: damaged: a cell names plan {plan.max()}, but the query "
                            f"has {len(entry['plans'])} plans")
    return plan.reshape(shape), column("cost").reshape(shape)
