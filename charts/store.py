"""Chart sets on disk: a manifest and one Parquet file per query, written atomically.

A chart set is a directory::

    manifest.json        format and version, creation time, catalog fingerprint
                         and content, engine, and per query: SQL, plans (id,
                         explain text), axes (statistic, range, k), fixed
                         statistics, model, weights, memory unit, data files
                         and their sha256
    <query>.parquet      one row per cell in C order: plan, into the query's
                         plans sorted by id, in the narrowest unsigned type
                         (uint8 up to 256 plans, else uint16)
    (no costs)           a grid's per-cell costs are not stored: a loaded chart
                         works them out from its plan index when asked
                         (:func:`cqopt.charts.kernel.winning_costs`), the
                         same floats the build had
    <query>.plans.json   the candidate plans themselves (plan trees as data,
                         :mod:`cqopt.optimizer.plans.codec`), so that loading
                         never parses or enumerates

A refined chart (``cqopt build --refine``, :mod:`cqopt.charts.refine`) stores
one row per leaf region instead: level (uint8), cell (int64, the flat index
in its level's grid), plan, cost; its manifest entry says ``"layout":
"refined"`` with the coarse k and the depth. Chart sets are written as format
version 4; a cqopt that reads only version 1 (grids as cell, plan and cost in
one file) refuses them with the advice to rebuild rather than misreading
them, and this one still reads versions 1 to 3 (3 kept a grid's costs in
``<query>.cost.parquet``, read only when asked for). A reduced chart
(``--reduce``) records its λ and the plans before the reduction under
``"reduce"``.

It is written through :func:`cqopt.output.staged_directory`: into a
hidden temporary sibling directory and switched into place atomically, so a
failed or killed build never leaves half a chart set, and an existing one is
replaced only when asked (``force``), only the files cqopt listed when it
wrote them, and only once the new one is complete. The manifest carries a
sha256 of its own content (``manifest_sha256``) as the data files do;
reading checks the format, its version and every checksum, and a chart set
from before the manifest checksum is refused with the advice to rebuild it.
Nothing is pickled.

Reading goes through one :class:`cqopt.output.DirectorySnapshot` of the
directory (:func:`open_chart_set`), and each file is read once: its bytes
are hashed and the same bytes parsed. A ``build --force`` that switches a new
set in meanwhile is never mixed into what is read; if it retires the files
being read, the reader sees the snapshot is no longer current and reads the
new set (:func:`cqopt.charts.lookup.load`). :func:`check_entry` then checks
that each query's values are in their domains (a layout, model, weights and
memory unit cqopt knows): a checksum proves a manifest is as written, not that
cqopt wrote it.

>>> manifest = {"format": FORMAT, "queries": {}}
>>> manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
>>> manifest_checksum(manifest) == manifest[MANIFEST_CHECKSUM]
True
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cqopt.catalog import Catalog
from cqopt.charts.workload import QUERY_NAME
from cqopt.costmodel import CostModelError, Utility, make_model, model_names
from cqopt.errors import MAX_TEXT_FILE, CqoptError, did_you_mean, parse_json, printable
from cqopt.optimizer.plans.codec import plans_from_json, plans_json
from cqopt.output import (
    DirectorySnapshot,
    OutputError,
    check_writable,  # noqa: F401  (the CLI checks --out through the store before any work)
    file_digest,
    recover,
    sha256_bytes,
    staged_directory,
    switching,
)

FORMAT = "cqopt-chart-set"
# Versions: 1, grids as (cell, plan uint16, cost) in one file; 2, version 1 or refined
# charts; 3 (written now), a grid's plan index alone in its file in the narrowest unsigned
# type and its costs in a file of their own, so a lookup reads a byte or two a cell;
# 4 (written now), version 3 without the costs file: costs follow from the plan index
# (kernel.winning_costs), so a build returns and stores a byte or two a cell.
FORMAT_VERSION = 4
READ_VERSIONS = (1, 2, 3, FORMAT_VERSION)
MANIFEST = "manifest.json"
MANIFEST_CHECKSUM = "manifest_sha256"
COLUMN_TYPES = {"cell": (np.int64,), "plan": (np.uint8, np.uint16), "cost": (np.float64,),
                "level": (np.uint8,)}
LAYOUTS = ("grid", "refined")
MAX_DATA_FILE = 16 << 30  # a sanity bound: a 2^30-cell chart is a few hundred MB
SWITCH_WAIT_S = 2.0  # how long a load waits for a replace between its two renames


class ChartSetError(CqoptError):
    """A chart set cannot be written or read: missing, foreign, damaged or stale."""


def sha256_file(path: Path) -> str:
    """The sha256 of the file at ``path``, in hex (as a manifest records it)."""
    return file_digest(path)[1]


def write_chart_set(out: Path, charts: list, catalog: Catalog, *, force: bool = False,
                    engine: str = "local", extra: dict[str, Any] | None = None) -> Path:
    """Write built charts as a chart set at ``out``; all or nothing."""
    out = Path(out)
    try:
        with staged_directory(out, force, kind="chart set") as tmp:
            _write_into(tmp, charts, catalog, engine, extra)
    except OutputError as err:
        raise ChartSetError(str(err)) from None
    return out


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's content without its own checksum, in a canonical JSON form.

    Whitespace and key order do not count; every value, key and number does.

    >>> manifest_checksum({"b": 1, "a": [0.5]}) == manifest_checksum({"a": [0.5], "b": 1})
    True
    """
    content = {k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _write_into(tmp: Path, charts: list, catalog: Catalog, engine: str,
                extra: dict[str, Any] | None) -> None:
    queries = {}
    for chart in charts:
        data = f"{chart.spec.name}.parquet"
        leaves = getattr(chart, "leaves", None)
        layout: dict[str, Any] = {}
        narrow = plan_dtype(len(chart.plan_ids))
        if leaves is None:  # cells in C order: the row is the cell
            table = pa.table({"plan": pa.array(chart.plan_index.ravel().astype(narrow))})
            layout = {"costs": "derived"}
        else:
            table = pa.table({
                "level": pa.array(leaves.level.astype(np.uint8)),
                "cell": pa.array(leaves.cell.astype(np.int64)),
                "plan": pa.array(leaves.plan.astype(narrow)),
                "cost": pa.array(leaves.cost.astype(np.float64)),
            })
            layout = {"layout": "refined",
                      "refine": {"k0": list(leaves.k0), "depth": leaves.depth}}
        if getattr(chart, "reduction", None):
            layout["reduce"] = dict(chart.reduction)
        if getattr(chart, "plans", ()):  # so that load never parses or enumerates
            plans = f"{chart.spec.name}.plans.json"
            (tmp / plans).write_text(plans_json(list(chart.plans)), encoding="utf-8")
            layout.update(plans_data=plans, plans_sha256=sha256_file(tmp / plans))
        pq.write_table(table, tmp / data)
        queries[chart.spec.name] = {
            **chart.spec.to_dict(),
            **layout,
            "plans": [{"id": i, "explain": e}
                      for i, e in zip(chart.plan_ids, chart.plan_explains)],
            "cells": table.num_rows,
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
    manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
    with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())


def open_chart_set(path: str | Path) -> DirectorySnapshot:
    """The chart set at ``path`` as a snapshot every read goes through (see
    :class:`cqopt.output.DirectorySnapshot`): what a rebuild switches in meanwhile is not
    mixed into it.

    Raises
    ------
    ChartSetError
        No such directory, or not a directory.
    """
    path = Path(path)
    if not path.exists():
        recover(path)  # a replace killed between its two renames leaves the previous set aside
        waited = 0.0
        while not path.exists() and waited < SWITCH_WAIT_S and switching(path):
            time.sleep(0.002)  # a live replace between its two renames: the new set is next
            waited += 0.002
    if not path.exists():
        raise ChartSetError(f"{path}: no such chart set (build one with cqopt build)")
    if not path.is_dir():
        raise ChartSetError(f"{path}: not a chart set: a chart set is a directory")
    try:
        return DirectorySnapshot(path)
    except OSError as err:
        raise ChartSetError(f"{path}: cannot be read ({err.strerror})") from None


@contextlib.contextmanager
def _snapshot(source: str | Path | DirectorySnapshot) -> Iterator[DirectorySnapshot]:
    """``source`` itself if it is a snapshot, else a snapshot of it for one read."""
    if isinstance(source, DirectorySnapshot):
        yield source
        return
    with open_chart_set(source) as snapshot:
        yield snapshot


def _read(snapshot: DirectorySnapshot, name: str, limit: int, where: str) -> bytes:
    """The bytes of one file of the chart set, from one open; a ChartSetError says what is
    wrong with it."""
    try:
        return snapshot.read_bytes(name, limit)
    except FileNotFoundError:
        raise ChartSetError(f"{snapshot.path}: damaged: {where} {name} is missing; rebuild "
                            "the chart set") from None
    except OSError as err:
        raise ChartSetError(f"{snapshot.path / name}: damaged: {err.strerror}; rebuild the "
                            "chart set") from None


def read_manifest(source: str | Path | DirectorySnapshot) -> dict[str, Any]:
    """The manifest of a chart set (a path, or a snapshot of one), with its format and
    checksum checked."""
    with _snapshot(source) as snapshot:
        path = snapshot.path
        manifest_path = path / MANIFEST
        if not snapshot.exists(MANIFEST):
            raise ChartSetError(f"{path}: not a chart set: it has no {MANIFEST}")
        try:
            manifest = parse_json(snapshot.read_bytes(MANIFEST, MAX_TEXT_FILE), nan=True)
        except (OSError, ValueError) as err:
            raise ChartSetError(f"{manifest_path}: damaged: not readable JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ChartSetError(f"{manifest_path}: not a cqopt chart set manifest "
                            f"(format {manifest.get('format') if isinstance(manifest, dict) else None!r})")
    version = manifest.get("format_version")
    if type(version) is not int or version not in READ_VERSIONS:
        raise ChartSetError(f"{path}: written in chart-set format version {version}; this "
                            f"cqopt reads versions {', '.join(map(str, READ_VERSIONS))}: "
                            "rebuild it with cqopt build")
    stored = manifest.get(MANIFEST_CHECKSUM)
    if stored is None:
        raise ChartSetError(f"{path}: written before chart-set manifests carried a checksum "
                            f"({MANIFEST_CHECKSUM}), or damaged: rebuild it with cqopt build")
    if stored != manifest_checksum(manifest):
        raise ChartSetError(f"{manifest_path}: damaged: its content does not match its "
                            f"{MANIFEST_CHECKSUM}; rebuild the chart set with cqopt build")
    for key in ("catalog", "catalog_fingerprint", "queries"):
        if key not in manifest:
            raise ChartSetError(f"{manifest_path}: damaged: the key {key!r} is missing")
    return manifest


def check_model_name(model: object) -> str:
    """``model`` if cqopt has a cost model of that name; the one check of a stored name.

    The registry (:mod:`cqopt.costmodel.registry`) says which models there are: a
    model registered by the program that built the set must be registered here too.

    >>> check_model_name("omm")
    Traceback (most recent call last):
    ...
    ValueError: names cost model 'omm', which this cqopt does not have (the registered models are om, pipes, ...); did you mean 'om'?
    """
    names = model_names()
    if not isinstance(model, str) or model not in names:
        text = printable(model)[:40]
        raise ValueError(f"names cost model {text!r}, which this cqopt does not have (the "
                         f"registered models are {', '.join(names)})"
                         + did_you_mean(text, names))
    return model


def check_entry(path: Path, name: str, entry: object, catalog: Catalog) -> dict[str, Any]:
    """One query's manifest entry with every value in its domain, before anything reads it.

    A checksum shows a manifest is as written, not that what is written makes
    sense: a crafted one names a layout, model or weights no build makes.

    Raises
    ------
    ChartSetError
        One line naming the query and the field: an unknown layout or model,
        weights that are NaN, infinite, negative or all zero, a memory unit the
        model lacks, a refined chart without its shape, malformed plans or data.

    Examples
    --------
    >>> from cqopt.catalog import load_catalog
    >>> from cqopt.examples import example
    >>> cat = load_catalog(example("dec-pkt.toml"))
    >>> check_entry(Path("cs"), "Q1", {"name": "Q1", "layout": "spiral"}, cat)
    Traceback (most recent call last):
    ...
    cqopt.charts.store.ChartSetError: cs: query Q1's manifest field 'layout' is 'spiral', ...
    """
    def bad(field: str, problem: str) -> ChartSetError:
        return ChartSetError(f"{path}: query {printable(name)[:80]}'s manifest field {field!r} "
                             f"{problem}; rebuild the chart set with cqopt build")

    if not isinstance(entry, dict):
        raise ChartSetError(f"{path}: damaged: the manifest entry of query "
                            f"{printable(name)[:80]} is not a table; rebuild the chart set")
    if not QUERY_NAME.fullmatch(name) or entry.get("name") != name:
        raise bad("name", f"is {printable(entry.get('name'))[:80]!r} under the key "
                          f"{printable(name)[:80]!r}: a query's name is its key, of letters, "
                          "digits, _ . -")
    layout = entry.get("layout", "grid")
    if layout not in LAYOUTS:
        raise bad("layout", f"is {printable(layout)[:40]!r}, which this cqopt does not read "
                            f"(it reads {', '.join(LAYOUTS)})")
    if layout == "refined":
        refine = entry.get("refine")
        if not (isinstance(refine, dict) and isinstance(refine.get("k0"), list)
                and all(type(k) is int and k >= 1 for k in refine["k0"])
                and type(refine.get("depth")) is int and refine["depth"] >= 0):
            raise bad("layout", "is 'refined' without a valid 'refine' field (a refined "
                                "chart's coarse k0, whole numbers >= 1, and depth, a whole "
                                "number >= 0)")
    try:
        model = check_model_name(entry.get("model"))
    except ValueError as err:
        raise bad("model", str(err)) from None
    try:
        Utility.from_weights(entry.get("weights"))  # the one place weights are judged
    except (CostModelError, TypeError) as err:
        raise bad("weights", f"is out of its domain: {err}") from None
    try:
        make_model(model, catalog, entry.get("memory_unit"))
    except CostModelError as err:
        raise bad("memory_unit", f"is out of its domain: {err}") from None
    plans = entry.get("plans")
    if not (isinstance(plans, list) and all(isinstance(p, dict) and isinstance(p.get("id"), str)
                                            for p in plans)
            and len({p["id"] for p in plans}) == len(plans)):
        raise bad("plans", "is not a list of plans with distinct ids")
    for field in ("data", "sha256"):
        if not isinstance(entry.get(field), str):
            raise bad(field, "is missing or not a string")
    return entry


def read_query_data(source: str | Path | DirectorySnapshot, name: str, entry: dict[str, Any],
                    shape: tuple[int, ...], costs: bool = True
                    ) -> tuple[np.ndarray, np.ndarray | None]:
    """The plan index and cost arrays of one query's grid, checked against the manifest.

    The plan index comes in the narrowest unsigned type that holds the
    query's plans (one byte a cell up to 256 plans), in memory of its own;
    ``costs=False`` leaves the costs unread (``None``): a lookup needs none,
    and since format version 3 they are a file of their own; since version 4
    they are not stored (``None``: :func:`cqopt.charts.kernel.winning_costs`).
    Every file is hashed from the bytes that are then parsed (one open).
    """
    with _snapshot(source) as snapshot:
        path = snapshot.path
        if entry.get("layout", "grid") != "grid":
            raise ChartSetError(f"{path}: query {name}'s chart is {entry.get('layout')}, not "
                                "a k-regular grid; read it with cqopt.charts.load, or rebuild "
                                "it without --refine")
        n = int(np.prod(shape))
        if "cost_data" in entry or entry.get("costs") == "derived":  # 3, 4: the row is the cell
            data, column = _read_columns(snapshot, name, entry, ["plan"])
            separate_costs = True  # in a file of their own: read_query_costs
        else:  # versions 1 and 2: cell, plan and cost in one file
            data, column = _read_columns(snapshot, name, entry,
                                         ["cell", "plan"] + ["cost"] * costs)
            cells = column("cell")
            if len(cells) != n or not np.array_equal(cells, np.arange(len(cells))):
                raise ChartSetError(f"{data}: damaged: expected cells 0..{n - 1} in order")
            del cells
            separate_costs = False
        plan = column("plan")
        if len(plan) != n:
            raise ChartSetError(f"{data}: damaged: {len(plan)} cells, the axes make {n}")
        if plan.size and plan.max() >= len(entry["plans"]):
            raise ChartSetError(f"{data}: damaged: a cell names plan {plan.max()}, but the "
                                f"query has {len(entry['plans'])} plans")
        plan = plan.astype(plan_dtype(len(entry["plans"]))).reshape(shape)  # a copy
        cost = None
        if costs and not separate_costs:
            cost = np.array(column("cost")).reshape(shape)
        del column
        if costs and separate_costs:
            cost = read_query_costs(snapshot, name, entry, shape)
    pa.default_memory_pool().release_unused()  # what Arrow read and freed goes back too
    return plan, cost


def read_query_costs(source: str | Path | DirectorySnapshot, name: str, entry: dict[str, Any],
                     shape: tuple[int, ...]) -> np.ndarray | None:
    """The per-cell costs of one query's grid alone, checked against the manifest;
    None if the chart set does not store them (version 4)."""
    if entry.get("costs") == "derived":
        return None
    if "cost_data" not in entry:  # versions 1 and 2 keep them beside the plan index
        return read_query_data(source, name, entry, shape)[1]
    with _snapshot(source) as snapshot:
        _, column = _read_columns(snapshot, name, entry, ["cost"], "cost_data", "cost_sha256")
        cost = np.array(column("cost"))
    if len(cost) != int(np.prod(shape)):
        raise ChartSetError(f"{snapshot.path}: damaged: query {name}'s costs hold {len(cost)} "
                            f"cells, the axes make {int(np.prod(shape))}")
    return cost.reshape(shape)


def read_plans(source: str | Path | DirectorySnapshot, name: str,
               entry: dict[str, Any]) -> list | None:
    """The candidate plans stored with a query's chart, checked; None if none are stored."""
    if "plans_data" not in entry:
        return None  # written before plans were stored: the caller enumerates them
    with _snapshot(source) as snapshot:
        data, raw = _checked_bytes(snapshot, name, entry, "plans_data", "plans_sha256")
    try:
        plans = plans_from_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, CqoptError) as err:
        raise ChartSetError(f"{data}: damaged: its plans do not read back ({err}); rebuild "
                            "the chart set with cqopt build") from None
    stored = [p["id"] for p in entry["plans"]]
    if [p.id for p in plans] != stored:
        raise ChartSetError(f"{data}: damaged: it holds plans {[p.id for p in plans]}, the "
                            f"manifest lists {stored}; rebuild the chart set")
    return plans


def plan_dtype(n_plans: int) -> np.dtype:
    """The narrowest unsigned type of a plan index among ``n_plans`` plans."""
    return np.dtype(np.uint8 if n_plans <= 256 else np.uint16)


def read_leaves(source: str | Path | DirectorySnapshot, name: str,
                entry: dict[str, Any]) -> dict[str, np.ndarray]:
    """The leaves of one query's refined chart: level, cell, plan, cost arrays."""
    with _snapshot(source) as snapshot:
        data, column = _read_columns(snapshot, name, entry, ["level", "cell", "plan", "cost"])
        out = {c: column(c) for c in ("level", "cell", "plan", "cost")}
    if len(out["plan"]) and int(out["plan"].max()) >= len(entry["plans"]):
        raise ChartSetError(f"{data}: damaged: a leaf names plan {out['plan'].max()}, but "
                            f"the query has {len(entry['plans'])} plans")
    return out


def _read_columns(snapshot: DirectorySnapshot, name: str, entry: dict[str, Any],
                  names: list[str], file_key: str = "data", sha_key: str = "sha256"):
    """A query's data file, checked (name, presence, sha256), and a reader of its columns.

    The bytes hashed are the bytes parsed: one open, no second look at the file.
    """
    data, raw = _checked_bytes(snapshot, name, entry, file_key, sha_key)
    try:
        # ParquetFile reads one file without pyarrow.dataset and pandas: loads stay fast.
        parquet = pq.ParquetFile(pa.BufferReader(raw))
        absent = [c for c in names if c not in parquet.schema_arrow.names]
        if absent:
            raise ChartSetError(f"{data}: damaged: it has no column {', '.join(absent)} (it "
                                f"has {', '.join(parquet.schema_arrow.names)}), which query "
                                f"{name}'s layout {entry.get('layout', 'grid')!r} needs; "
                                "rebuild the chart set")
        table = parquet.read(columns=names, use_threads=False)  # no pool left at exit
    except (pa.ArrowException, OSError) as err:
        raise ChartSetError(f"{data}: damaged: not a readable chart Parquet file ({err})") \
            from None
    del raw

    def column(name: str) -> np.ndarray:
        # The columns are fixed-width and null-free: read the data buffer directly, since
        # pyarrow's to_numpy imports pandas, which the run-time path must not pay for.
        array = table.column(name).combine_chunks()
        dtype = next((t for t in COLUMN_TYPES[name] if array.type == pa.from_numpy_dtype(t)),
                     None)
        if dtype is None or array.null_count:
            expected = " or ".join(np.dtype(t).name for t in COLUMN_TYPES[name])
            raise ChartSetError(f"{data}: damaged: column {name} is {array.type} with "
                                f"{array.null_count} nulls, expected {expected} without "
                                "nulls")
        return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array),
                             offset=array.offset * np.dtype(dtype).itemsize)

    return data, column


def _checked_bytes(snapshot: DirectorySnapshot, name: str, entry: dict[str, Any],
                   file_key: str, sha_key: str) -> tuple[Path, bytes]:
    """One of a query's files: a plain name, regular, and its bytes, whose sha256 matches."""
    path = snapshot.path
    try:
        file_name, expected = entry[file_key], entry[sha_key]
    except KeyError as err:
        raise ChartSetError(f"{path}: damaged: query {name}'s manifest entry has no "
                            f"{err.args[0]!r}; rebuild the chart set") from None
    data = Path(path) / str(file_name)
    if not isinstance(file_name, str) or Path(file_name).name != file_name \
            or file_name in ("", ".", ".."):
        raise ChartSetError(f"{path}: damaged: query {name}'s data file {file_name!r} "
                            "is not a plain file name")
    raw = _read(snapshot, file_name, MAX_DATA_FILE, f"query {name}'s data file")
    actual = sha256_bytes(raw)
    if actual != expected:
        raise ChartSetError(f"{data}: damaged: its sha256 is {actual[:12]}..., the manifest "
                            f"says {str(expected)[:12]}...; rebuild the chart set")
    return data, raw
