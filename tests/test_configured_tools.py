"""``tools:`` and ``tool_groups:`` in DeerFlow's shape: DeerFlow's own sections load unchanged, bad entries are
config errors naming the key, ``$VAR`` settings are resolved only where the worker builds the tool, a custom
agent's ``tool_groups`` select tools, and ``durable_tool``/``activity_as_tool`` schemas come from Python types."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from activities.configured_tools import activity_as_tool, durable_tool
from activities.configured_tools.activities import build_tools
from activities.configured_tools.build import ToolBuildError
from activities.configured_tools.entries import in_groups
from tests.support.deerflow_tools import DEERFLOW_TOOLS
from tests.support.own_tools import CustomerQuery
from vocabulary.web_tools import DDG_WEB_SEARCH, IMAGE_SEARCH, WEB_FETCH
from workers.config import ConfigError, load_config
from workflows.run.configured_tools import configured_names, unlisted_sandbox_tools


def test_deerflows_tools_sections_load_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(DEERFLOW_TOOLS, encoding="utf-8")
    config = load_config(path, environ={})
    assert config.run.tools == [
        *("web_search", "web_fetch", "image_search", "ls", "read_file", "glob", "grep", "write_file"),
        *("str_replace", "bash"),
    ]
    assert configured_names(config.run) == ["web_search", "web_fetch", "image_search"]
    assert unlisted_sandbox_tools(config.run) == frozenset()
    built = build_tools(config.tools, {})
    assert {name: tool.info.source for name, tool in built.items()} == {
        "web_search": "web:ddg",
        "web_fetch": "web:fetch",
        "image_search": "web:ddg",
    }
    for spec in (DDG_WEB_SEARCH, WEB_FETCH, IMAGE_SEARCH):
        info = built[spec.name].info
        assert (info.description, info.parameters) == (spec.description, spec.parameters)


def test_a_tools_list_without_a_sandbox_tool_leaves_it_out(tmp_path: Path) -> None:
    config = load_config(
        overrides={
            "tool_groups": [{"name": "file:read"}],
            "tools": [{"name": "ls", "group": "file:read", "use": "deerflow.sandbox.tools:ls_tool"}],
        },
        environ={},
    )
    assert unlisted_sandbox_tools(config.run) == {"bash", "read_file", "write_file", "str_replace", "glob", "grep"}


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        (
            [{"name": "w", "group": "webb", "use": "m:x"}],
            r"tools\.0\.group: unknown group 'webb' \(tool_groups has 'web'\)",
        ),
        ([{"name": "w", "group": "web", "use": "not a path"}], r"tools\.0\.use.*not 'package\.module:attribute'"),
        (
            [{"name": "w", "group": "web", "use": "m:x"}, {"name": "w", "group": "web", "use": "m:y"}],
            r"tools\.1\.name: tool 'w' is listed twice",
        ),
        ([{"name": "bash", "group": "web", "use": "m:x"}], r"tools\.0\.name: 'bash' is the name of a built-in tool"),
        ([{"name": "x", "group": "web", "use": "deerflow.sandbox.tools:rm_tool"}], r"tools\.0\.use: .* not one of"),
        ([{"name": "w", "group": "web", "use": "deerflow.community.tavily.tools:web_search_tool"}], "tavily"),
        ([{"name": "w", "group": "web", "use": "m:x", "timeout_seconds": -1}], r"tools\.0\.timeout_seconds"),
    ],
)
def test_bad_entries_are_config_errors_naming_the_key(tools: list[dict[str, object]], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides={"tool_groups": [{"name": "web"}], "tools": tools}, environ={})


def test_var_settings_stay_names_in_the_config_and_are_resolved_where_the_tool_is_built() -> None:
    entry = {"name": "crm", "group": "g", "use": "activities.configured_tools:activity_as_tool"}
    settings = {"activity": "crm_lookup", "task_queue": "$CRM_QUEUE", "description": "Look a customer up."}
    config = load_config(overrides={"tool_groups": [{"name": "g"}], "tools": [{**entry, **settings}]}, environ={})
    assert config.tools[0].settings["task_queue"] == "$CRM_QUEUE"
    assert "crm-prod" not in config.model_dump_json()
    built = build_tools(config.tools, {"CRM_QUEUE": "crm-prod"})
    assert built["crm"].info.execution.task_queue == "crm-prod"
    assert built["crm"].info.source == "activity:crm_lookup@crm-prod"
    with pytest.raises(ToolBuildError, match=r"tools\.0\.task_queue: environment variable CRM_QUEUE is not set"):
        build_tools(config.tools, {})


def test_an_entry_that_cannot_be_imported_or_is_no_tool_is_named() -> None:
    config = load_config(
        overrides={
            "tool_groups": [{"name": "g"}],
            "tools": [{"name": "nope", "group": "g", "use": "no_such_module:tool"}],
        },
        environ={},
    )
    with pytest.raises(ToolBuildError, match=r"tools\.0\.use: cannot import 'no_such_module:tool'"):
        build_tools(config.tools, {})


def test_custom_agent_tool_groups_select_the_configured_tools(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(DEERFLOW_TOOLS, encoding="utf-8")
    config = load_config(path, environ={})
    assert in_groups(config.tools, ["web"]) == ["web_search", "web_fetch", "image_search"]
    assert in_groups(config.tools, ["file:read", "bash"]) == ["ls", "read_file", "glob", "grep", "bash"]


class Refund(BaseModel):
    order_id: str
    cents: int


def test_durable_tool_schemas_come_from_the_signature_or_the_model() -> None:
    @durable_tool(timeout_seconds=9, max_attempts=2)
    def lookup(order_id: str, include_items: bool = False) -> str:
        """Look an order up.

        More text the model does not need."""
        return order_id

    assert lookup.description == "Look an order up."
    assert lookup.parameters == {
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "include_items": {"default": False, "type": "boolean"}},
        "required": ["order_id"],
    }
    assert (lookup.policy.timeout_seconds, lookup.policy.max_attempts) == (9, 2)

    @durable_tool
    def refund(request: Refund) -> str:
        """Refund an order."""
        return request.order_id

    assert refund.parameters["properties"] == {"order_id": {"type": "string"}, "cents": {"type": "integer"}}
    tool = activity_as_tool("crm_lookup", task_queue="crm", description="Look up.", parameters=CustomerQuery)
    assert tool.parameters["required"] == ["customer_id", "fields"]
