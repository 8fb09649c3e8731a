"""What a run writes: each round's result as Parquet, and its JSON files, through cqopt.output.

A round's result is written under a scratch name in the run folder, then
switched into place by :func:`cqopt.output.adopt_directory` (the one
write-then-rename, with its marker and inventory: a rerun of a round replaces
only what cqopt wrote). JSON files (the state, the round log, the report) are
written by :func:`cqopt.output.write_atomic`. A small frame is brought to the
driver (:func:`collect`) and written from there; a large one is written by Spark.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> write_json(root / "log" / "round-000000.json", {"round": 0}).name
'round-000000.json'
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cqopt.output import adopt_directory, recover, write_atomic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

# A plan's result of at most this many rows is written from the driver (Arrow); a larger
# one by Spark. Smaller than staging.LOCAL_TUPLES: finding a result too large costs its
# plan twice.
LOCAL_RESULT_ROWS = 100_000
SCRATCH = ".tmp-"  # the prefix of a run's own scratch names, removed when it resumes
# The scratch folders a run makes: a result (.tmp-round-000007.parquet), a grouped job's
# (.tmp-group-000007-0), a stage (.tmp-batch-000003, negative for tuples read late).
# What output.adopt_directory leaves beside a result when killed mid-switch.
_SWITCHED = re.compile(r"\.(round-\d{6}\.parquet)\.(?:tmp|old)-\d+-\w+")
SCRATCH_NAMES = re.compile(r"\.tmp-(round-\d{6}\.parquet|group-\d{6}-\d+|batch--?\d{5,6})")
# What a killed atomic_file of a stage written from the driver leaves in pending/.
_STAGE_SCRATCH = re.compile(r"\.batch--?\d{5,6}\.\w+\.tmp")
_KIND = "round result"


def write_json(path: Path, value: Any, *, indent: int | None = 1) -> Path:
    """Write ``value`` as JSON at ``path``, atomically (its folder made if missing);
    ``indent=None`` writes it on one line, with Python's C encoder (indented JSON is
    written by its pure-Python one, about four times slower)."""
    return write_atomic(path, json.dumps(value, indent=indent, allow_nan=True))


def remove(path: Path) -> None:
    """Remove a scratch file or folder of the run's own (a half-written one, a spent stage)."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def clear_scratch(out: Path, folders: tuple[str, ...] = ("pending", "results", "log")) -> None:
    """Remove what a killed run left half-written under its scratch names: the folders
    the run itself names (:data:`SCRATCH_NAMES`) and a stage's scratch file, nothing else
    (a user's ``.tmp-note.txt`` stays), and what a killed switch into place left beside a
    result (``cqopt.output``'s recovery, which touches only what a marker proves is
    cqopt's)."""
    for folder in folders:
        for scratch in (out / folder).glob(f"{SCRATCH}*"):
            if SCRATCH_NAMES.fullmatch(scratch.name) and scratch.is_dir() \
                    and not scratch.is_symlink():
                remove(scratch)
    for scratch in (out / "pending").glob(".batch-*.tmp"):
        if _STAGE_SCRATCH.fullmatch(scratch.name) and scratch.is_file() \
                and not scratch.is_symlink():
            scratch.unlink()
    finals = {m.group(1) for p in (out / "results").glob(".round-*")
              if (m := _SWITCHED.fullmatch(p.name))}
    for name in sorted(finals):
        recover(out / "results" / name, say=lambda _: None)


def adopt(finished: Path, final: Path, kind: str = _KIND) -> Path:
    """Switch a folder the run finished writing into place at ``final``, replacing an older
    copy that cqopt wrote (a round run again after a kill): :func:`cqopt.output.adopt_directory`.
    A round's result needs no look for what a killed switch left beside it: the run
    recovered its results folder when it started (:func:`clear_scratch`), and listing the
    folder for each round would cost a long run time in the square of its rounds."""
    return adopt_directory(finished, final, force=True, kind=kind,
                           recovered=kind == _KIND)


def collect(frame: DataFrame, limit: int):
    """The frame as an Arrow table on the driver if it holds at most ``limit`` rows
    (one Spark job, reading at most ``limit + 1``), else None."""
    table = frame.limit(limit + 1).toArrow()
    return table if table.num_rows <= limit else None


def write_result(frame: DataFrame, final: Path) -> int:
    """Write a round's result as Parquet at ``final``, atomically; its row count.

    One Spark job: a result of at most :data:`LOCAL_RESULT_ROWS` rows comes to the
    driver as Arrow and is written from there (no job of Spark's file commit
    protocol); a larger one is written by Spark, its rows counted on the way
    (``DataFrame.observe``), not read back. Then :func:`adopt`, so ``final``
    is whole or absent and a rerun replaces it.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    scratch = final.with_name(f"{SCRATCH}{final.name}")
    remove(scratch)
    table = collect(frame, LOCAL_RESULT_ROWS)
    if table is not None:
        import pyarrow.parquet as pq

        scratch.mkdir(parents=True)
        pq.write_table(table, scratch / "part-00000.parquet")
        adopt(scratch, final)
        return table.num_rows
    rows = Observation(f"rows-{final.stem}")
    frame.observe(rows, F.count(F.lit(1)).alias("rows")).write.parquet(str(scratch))
    adopt(scratch, final)
    return int(rows.get.get("rows", 0))


def write_by_round(frame: DataFrame, scratch: Path) -> None:
    """Write a result of many rounds (its first column ``_round``) as ``scratch/_round=R``
    folders of Parquet, one per round with rows, as ``partitionBy("_round")`` does.

    At most :data:`LOCAL_RESULT_ROWS` rows are split on the driver (one Spark job, no
    file per round and task); more are written by Spark.
    """
    table = collect(frame, LOCAL_RESULT_ROWS)
    if table is None:
        frame.write.partitionBy("_round").parquet(str(scratch))
        return
    split_by_round(table, scratch)


def split_by_round(table, scratch: Path) -> None:
    """Write a result of many rounds held on the driver (an Arrow table, its column
    ``_round``) as ``scratch/_round=R`` folders of Parquet, one per round with rows."""
    import pyarrow.parquet as pq

    for value, rows in slices(table, "_round").items():
        folder = scratch / f"_round={value}"
        folder.mkdir(parents=True)
        pq.write_table(rows.drop_columns(["_round"]), folder / "part-00000.parquet")


def slices(table, column: str) -> dict[int, Any]:
    """An Arrow table's rows by their value of an integer ``column``: one slice each (of one
    stable sort), in ascending order of value.

    >>> import pyarrow as pa
    >>> {k: v["x"].to_pylist() for k, v in slices(pa.table({"k": [2, 1, 2], "x": [7, 8, 9]}),
    ...                                              "k").items()}
    {1: [8], 2: [7, 9]}
    """
    keys = table[column].to_numpy()
    order = np.argsort(keys, kind="stable")
    table = table.take(order)
    values, starts, counts = np.unique(keys[order], return_index=True, return_counts=True)
    return {int(v): table.slice(int(o), int(n)) for v, o, n in zip(values, starts, counts)}


def adopt_round(part: Path | None, final: Path, schema: StructType | None) -> int:
    """Switch one round's partition of a grouped write into place at ``final``; its rows.

    The count is read from the Parquet footers (no Spark job). A round the
    plan gave no row has no partition (``part`` None): it gets one empty Parquet file of
    the result's ``schema``, as a round run alone does.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    if part is None:
        part = final.with_name(f"{SCRATCH}{final.name}")
        remove(part)
        part.mkdir(parents=True)
        pq.write_table(pa.Table.from_batches([], schema=to_arrow_schema(schema)),
                       part / "part-00000-empty.parquet")
        rows = 0
    else:
        rows = sum(pq.read_metadata(f).num_rows for f in part.glob("*.parquet"))
    adopt(part, final)
    return int(rows)
