"""Tools from the config's ``tools:`` list (DeerFlow's shape): your own functions and activities, LangChain tools
and hartflow's web tools. ``durable_tool`` and ``activity_as_tool`` are the public API
(``activities/configured_tools/kinds.py``)."""

from activities.configured_tools.kinds import ActivityTool, DurableTool, activity_as_tool, durable_tool

__all__ = ["ActivityTool", "DurableTool", "activity_as_tool", "durable_tool"]
