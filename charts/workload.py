"""The workload file: named continuous queries and the defaults for their charts.

A workload is a TOML file::

    [defaults]
    k = 10                      # regions per chart axis
    weights = [0.4, 0.6]        # OM utility weights w_r, w_m (optionally w_c)
    model = "om"                # a registered cost model: "om", "pipes", ...
    memory_unit = "bytes"       # or "tuples": the OM paper's literal formulas

    [[query]]
    name = "Q1"
    sql = "SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"
    k = 20                      # optional overrides of the defaults, and of the chart:
    axes = ["sel.TCP", "rate.TCP"]
    ranges = { "rate.TCP" = [100, 800] }
    fixed = { "sel.TCP" = 0.1 }
    deadline = 0.5              # optional bounds under overload: a round's seconds,
    min_kept = 0.2              # the least share of its input kept,
    quality = [[0, 1.0], [0.5, 0.6]]  # [share dropped, quality] rows, monotone
    # error_bound = 0.05        # an aggregate query's relative error (aggregates only)

Without ``axes``, a statistic that ``ranges`` names becomes an axis beside
the default ones (a join's ``jsel.A.B`` that varies, for instance).
Loading checks the shape and the types of every key; the statistics named in
``axes``, ``ranges`` and ``fixed`` are checked against each query when its
chart is built.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cqopt.charts.overload_settings import OverloadSettings
from cqopt.charts.settings import ChartSettings, JudgedSettings, SettingsError, \
    judge_settings, setting_label
from cqopt.errors import did_you_mean, read_text_file
from cqopt.optimizer.query.errors import WorkloadError

DEFAULT_KEYS = ("k", "weights", "model", "memory_unit")
# A query's bounds under overload (cqopt fidelity --deadline reads them when not given):
# seconds a round may take, the least share of its input kept, the relative error an
# aggregate's answer may have, and an input/quality table of [share dropped, quality] rows.
QOS_KEYS = ("deadline", "min_kept", "error_bound", "quality")
QUERY_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # a query's name: a file name in a chart set
QUERY_KEYS = ("name", "sql", *DEFAULT_KEYS, "axes", "ranges", "fixed", *QOS_KEYS)


@dataclass(frozen=True)
class WorkloadQuery:
    name: str
    sql: str
    options: dict[str, Any] = field(default_factory=dict)  # k, axes, ranges, fixed, ...


@dataclass(frozen=True)
class Workload:
    queries: tuple[WorkloadQuery, ...]
    defaults: dict[str, Any] = field(default_factory=dict)
    source: str = "<workload>"

    def query(self, name: str) -> WorkloadQuery:
        for q in self.queries:
            if q.name == name:
                return q
        names = [q.name for q in self.queries]
        raise WorkloadError(f"{self.source}: no query named '{name}'"
                            f"{did_you_mean(name, names)}; it has {', '.join(names)}")

    def setting(self, query: WorkloadQuery, key: str, fallback: Any = None) -> Any:
        """A query's own setting, else the workload default, else ``fallback``."""
        return query.options.get(key, self.defaults.get(key, fallback))

    def settings(self, query: WorkloadQuery,
                 overrides: dict[str, Any] | None = None) -> ChartSettings:
        """The query's chart settings: ``overrides`` (judged already, e.g. the command
        line's) beat the query's own, which beat the workload's defaults.

        Raises
        ------
        WorkloadError
            The merged settings do not go together (a model and a memory unit it
            does not count in).
        """
        chart_options = {k: v for k, v in query.options.items() if k not in QOS_KEYS}
        layers = (self.defaults, chart_options, overrides or {})
        merged = {k: v for layer in layers for k, v in layer.items()}
        # Values judged where they were given (the file, the command line) are taken as
        # they are; a layer made elsewhere (a plain dict) has all of them judged again.
        judged = all(isinstance(layer, JudgedSettings) or not layer
                     for layer in (self.defaults, query.options, overrides or {}))
        try:
            return ChartSettings.from_values(JudgedSettings(merged) if judged else merged)
        except SettingsError as err:
            raise WorkloadError(f"{self.source}: query {query.name}: {err}") from None


def qos(query: WorkloadQuery) -> dict[str, Any]:
    """The query's bounds under overload (:data:`QOS_KEYS`), as its file gives them."""
    return {k: v for k, v in query.options.items() if k in QOS_KEYS}


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload TOML file."""
    path = Path(path)
    try:
        data = tomllib.loads(read_text_file(path))
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such file (expected a workload TOML file)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise WorkloadError(f"{path}: cannot read the file: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise WorkloadError(f"{path}: not valid TOML: {err}") from None
    return workload_from_dict(data, str(path))


def workload_from_dict(data: dict[str, Any], source: str = "<workload>") -> Workload:
    def fail(key: str, problem: str) -> WorkloadError:
        return WorkloadError(f"{source}: {key}: {problem}")

    for key in data:
        if key not in ("defaults", "query"):
            raise fail(key, f"unknown key{did_you_mean(key, ['defaults', 'query'])} (expected "
                            "[defaults] and [[query]] tables)")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise fail("defaults", "must be a table")
    defaults = _check_settings(defaults, "defaults", DEFAULT_KEYS, source)
    entries = data.get("query", [])
    if not isinstance(entries, list) or not entries:
        raise fail("query", "the workload has no [[query]] entry (expected at least one, "
                            "with name and sql)")
    queries, seen = [], set()
    for i, entry in enumerate(entries):
        key = f"query[{i}]"
        if not isinstance(entry, dict):
            raise fail(key, "must be a table with name and sql")
        name = entry.get("name")
        if not isinstance(name, str) or not QUERY_NAME.fullmatch(name):
            raise fail(f"{key}.name", f"must be a name of letters, digits, _ . -, got {name!r}")
        if name in seen:
            raise fail(f"{key}.name", f"duplicate query name '{name}'")
        seen.add(name)
        sql = entry.get("sql")
        if not isinstance(sql, str) or not sql.strip():
            raise fail(f"{key}.sql", "missing or empty (expected the query's CQL text)")
        options = _check_settings({k: v for k, v in entry.items() if k not in QOS_KEYS},
                                  key, QUERY_KEYS, source)
        options.update(_check_qos(entry, key, source))
        queries.append(WorkloadQuery(name, sql, options))
    return Workload(tuple(queries), defaults, source)


def _check_qos(entry: dict[str, Any], where: str, source: str) -> dict[str, Any]:
    """A query's QoS keys, judged by :class:`OverloadSettings`: one line naming the key."""
    given = {k: entry[k] for k in QOS_KEYS if k in entry}
    judged = OverloadSettings.judged(
        given, lambda key, value: f"{source}: {where}.{key} = {value!r}", WorkloadError)
    return {k: getattr(judged, k) for k in given}


def _check_settings(table: dict[str, Any], where: str, allowed: tuple[str, ...],
                    source: str) -> dict[str, Any]:
    """A table's settings judged by the chart settings' one judge, named by their place."""
    for key in table:
        if key not in allowed:
            raise WorkloadError(f"{source}: {where}.{key}: unknown key"
                                f"{did_you_mean(key, allowed)} (expected one of "
                                f"{', '.join(allowed)})")
    return judge_settings({k: v for k, v in table.items() if k not in ("name", "sql")},
                          lambda path, value: f"{source}: {setting_label(f'{where}.{path}', value)}",
                          WorkloadError)
