"""The catalog: loading, widths, validation messages, fingerprint."""

from __future__ import annotations

import pytest

from cqopt.catalog import Catalog, CatalogError, load_catalog


BASE = {"streams": {"TCP": {"rate": [100, 1000], "granularity": 1e-6,
                            "columns": {"ts": "timestamp", "src_host": "int",
                                        "name": "string(20)",
                                        "bytes": {"type": "long", "width": 4}}}}}


def test_examples_load(examples):
    dec = load_catalog(examples / "dec-pkt.toml")
    assert set(dec.streams) == {"TCP", "UDP", "SF"}
    assert [c.name for c in dec.streams["TCP"].columns] == [
        "ts", "src_host", "dest_host", "src_port", "dest_port", "bytes"]
    assert dec.operators.selection_equality == 400_000
    assert dec.operators.equi_join == 3_000
    epa = load_catalog(examples / "epa-http.toml")
    assert {c.name for c in epa.streams["HTTP"].columns} >= {"host", "method", "url",
                                                            "status", "bytes"}


def test_widths_and_overrides():
    cat = Catalog.from_dict(BASE)
    tcp = cat.stream("tcp")
    assert [c.width for c in tcp.columns] == [8, 4, 20, 4]
    assert tcp.width == 36
    cat = Catalog.from_dict({**BASE, "types": {"int": 2}})
    assert cat.stream("TCP").column("src_host").width == 2


def test_defaults():
    cat = Catalog.from_dict(BASE)
    assert (cat.operators.selection_range, cat.operators.projection,
            cat.operators.aggregate) == (200_000, 500_000, 100_000)
    assert cat.operators.rate("selection-equality") == 400_000
    assert cat.time_unit == "seconds" and cat.pipes.hash_buckets == 1024


def test_fingerprint_is_stable_and_sensitive():
    a = Catalog.from_dict(BASE, "a.toml")
    assert a.fingerprint() == Catalog.from_dict(BASE, "elsewhere.toml").fingerprint()
    changed = {**BASE, "operators": {"equi_join": 2000}}
    assert Catalog.from_dict(changed).fingerprint() != a.fingerprint()
    wider = {"streams": {"TCP": {**BASE["streams"]["TCP"], "rate": [100, 2000]}}}
    assert Catalog.from_dict(wider).fingerprint() != a.fingerprint()


def _with_stream(**changes):
    return {"streams": {"TCP": {**BASE["streams"]["TCP"], **changes}}}


BAD = [
    ({"streams": {}}, "streams", "no stream"),
    ({}, "streams", "no stream"),
    ({"strems": {}}, "strems", "did you mean 'streams'"),
    ({**BASE, "time_unit": "hours"}, "time_unit", "unknown time unit"),
    (_with_stream(rate=[10]), "streams.TCP.rate", "pair of numbers"),
    (_with_stream(rate=[10, 5]), "streams.TCP.rate", "0 < lo < hi"),
    (_with_stream(rate=["a", 5]), "streams.TCP.rate", "pair of numbers"),
    (_with_stream(granularity=-1), "streams.TCP.granularity", "positive"),
    (_with_stream(columns={"bytes": "integer"}), "streams.TCP.columns.bytes",
     "unknown column type"),
    (_with_stream(columns={"bytes": "string(0)"}), "streams.TCP.columns.bytes", "n > 0"),
    (_with_stream(columns={"bytes": {"type": "int", "width": 0}}),
     "streams.TCP.columns.bytes.width", "positive"),
    (_with_stream(columns={"bytes": 4}), "streams.TCP.columns.bytes", "must be a string"),
    (_with_stream(columns={"a": "int", "A": "int"}), "streams.TCP.columns", "differ only in case"),
    (_with_stream(columns={}), "streams.TCP.columns", "no column"),
    (_with_stream(extra=1), "streams.TCP.extra", "unknown key"),
    ({"streams": {"TCP": {"columns": {"a": "int"}}}}, "streams.TCP.rate", "missing"),
    ({**BASE, "operators": {"equi_join": 0}}, "operators.equi_join", "positive"),
    ({**BASE, "operators": {"join": 10}}, "operators.join", "unknown key"),
    ({**BASE, "pipes": {"hash_buckets": 1.5}}, "pipes.hash_buckets", "positive integer"),
    ({**BASE, "types": {"float": 4}}, "types.float", "unknown key"),
    ({"streams": {"bad name": BASE["streams"]["TCP"]}}, "streams.bad name", "identifier"),
]


@pytest.mark.parametrize("data, key, fragment", BAD)
def test_bad_catalogs_name_file_and_key(data, key, fragment):
    with pytest.raises(CatalogError) as info:
        Catalog.from_dict(data, "cat.toml")
    message = str(info.value)
    assert message.startswith(f"cat.toml: {key}")
    assert fragment in message


def test_file_errors(tmp_path):
    with pytest.raises(CatalogError, match="no such file"):
        load_catalog(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[streams\n")
    with pytest.raises(CatalogError, match="not valid TOML"):
        load_catalog(bad)
