"""The LangGraph Agent Server API over hartflow runs (hartflow serve)."""
