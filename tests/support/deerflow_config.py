"""DeerFlow's own models block, as a DeerFlow user's config.yaml has it, for the tests that read it unchanged."""

from __future__ import annotations

# bytedance/deer-flow: config.example.yaml, the "OpenAI model" and "OpenAI Responses API model" examples,
# uncommented as a DeerFlow user would (only base_url added, to reach a fake provider or nothing).
_MODELS = """
models:
  - name: gpt-4
    display_name: GPT-4
    use: langchain_openai:ChatOpenAI
    model: gpt-4
    api_key: $OPENAI_API_KEY # Use environment variable
    base_url: {base_url}
    request_timeout: 600.0
    max_retries: 2
    max_tokens: 4096          # Per-call output cap
    context_window: 128000    # Total prompt + completion capacity
    temperature: 0.7
    supports_vision: true # Enable vision support for view_image tool

  - name: gpt-5-responses
    display_name: GPT-5 (Responses API)
    use: langchain_openai:ChatOpenAI
    model: gpt-5
    api_key: $OPENAI_API_KEY
    request_timeout: 600.0
    max_retries: 2
    use_responses_api: true
    output_version: responses/v1
    context_window: 400000
    supports_vision: true
"""


def deerflow_models(base_url: str) -> str:
    """The block as YAML text, its first model pointed at ``base_url``."""
    return _MODELS.format(base_url=base_url)
