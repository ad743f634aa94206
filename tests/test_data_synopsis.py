"""Synopses of structured tool output (middlewares/_data_synopsis.py): each kind by its shape, others refused."""

from __future__ import annotations

from middlewares._data_synopsis import json_synopsis, table_synopsis, xml_synopsis, yaml_synopsis


def test_json_by_its_keys_paths_and_scalars() -> None:
    synopsis = json_synopsis('{"a": 1, "b": [1, 2]}')
    assert synopsis is not None and synopsis.kind == "json"
    assert synopsis.summary == ["JSON object with 2 top-level keys.", "Top-level keys: a, b"]
    assert "$.b: array length 2; first item number" in synopsis.structure
    assert "$.a: 1" in synopsis.notable


def test_xml_by_its_root_and_child_tags() -> None:
    synopsis = xml_synopsis("<root><a/><a/></root>")
    assert synopsis is not None and synopsis.kind == "xml"
    assert synopsis.structure == ["root tag: root", "root attributes: 0", "a: 2"]


def test_a_table_by_its_columns_and_first_row() -> None:
    rows = "name,age\n" + "\n".join(f"n{i},{i}" for i in range(8))
    synopsis = table_synopsis(rows, ",", "csv")
    assert synopsis is not None and synopsis.kind == "csv"
    assert synopsis.summary == ["CSV table with 8 data rows and 2 columns."]
    assert synopsis.structure == ["columns: name, age", "first data row: name=n0 | age=0"]


def test_other_text_is_not_of_these_kinds() -> None:
    prose = "Just a sentence, with a comma."
    assert json_synopsis(prose) is None
    assert xml_synopsis(prose) is None
    assert table_synopsis(prose, ",", "csv") is None
    assert yaml_synopsis(prose) is None
