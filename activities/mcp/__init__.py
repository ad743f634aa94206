"""MCP servers as tools: their settings, the per-worker session pool, and the ``mcp.*`` activities."""
