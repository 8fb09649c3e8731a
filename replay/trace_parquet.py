"""The Parquet trace format: a Parquet file, or a directory of them (Spark's output).

>>> import pandas as pd, tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "S.parquet"
>>> FORMAT.write(pd.DataFrame({"ts": [0.5, 1.0], "a": [1, 2]}), path)
>>> FORMAT.matches(path), FORMAT.read(path).to_dict("list")
(True, {'ts': [0.5, 1.0], 'a': [1, 2]})
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cqopt.replay.trace_format import StreamSource, TraceFormat


def read_parquet(path: Path) -> pd.DataFrame:
    """The table of a Parquet file or directory of parts."""
    return pd.read_parquet(path)


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """Write ``frame`` as one Parquet file, no index, each page with its CRC checksum
    (which :func:`~cqopt.replay.trace_format.check_trace_files` verifies)."""
    frame.to_parquet(path, index=False, write_page_checksum=True)


def parquet_columns(path: Path) -> list[str]:
    """A Parquet file's column names, from its footer."""
    import pyarrow.parquet as pq

    return pq.read_schema(path).names


FORMAT = TraceFormat("parquet", (".parquet", ".pq"), read_parquet, write_parquet,
                     description="Parquet, a file or a directory of parts",
                     columns=parquet_columns, stream=StreamSource("parquet", typed=True))
