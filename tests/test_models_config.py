"""The ``models:`` list in DeerFlow's shape: parsing, building on the worker, choosing a run's model, the
``/api/models`` listing, and the refusals (``hartflow run`` / ``hartflow worker`` exit 2 naming the setting)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.model import ModelActivities
from activities.models import tool_args
from activities.models.catalog import ModelCatalog, ModelConfigError, ModelEntry, build_model
from tests.support.deerflow_config import deerflow_models
from vocabulary.contracts import ModelCallInput
from workers.cli import run_command
from workers.config import ConfigError, load_config
from workers.models import ModelSelectionError, api_models, check_worker_models, select_model

DEERFLOW_MODELS = deerflow_models("http://127.0.0.1:9/v1")

# bytedance/deer-flow: config.example.yaml, the "DeepSeek V4 model" example: its class ships with DeerFlow.
DEERFLOW_DEEPSEEK = {
    "name": "deepseek-v4",
    "display_name": "DeepSeek V4 (Thinking)",
    "use": "deerflow.models.patched_deepseek:PatchedChatDeepSeek",
    "model": "deepseek-v4-pro",
    "api_key": "$DEEPSEEK_API_KEY",
    "timeout": 600.0,
    "max_retries": 2,
    "max_tokens": 8192,
    "supports_thinking": True,
    "supports_vision": False,
    "when_thinking_enabled": {"extra_body": {"thinking": {"type": "enabled"}}},
    "when_thinking_disabled": {"extra_body": {"thinking": {"type": "disabled"}}},
}

SECRET = "sk-test-secret-0123456789"


def deerflow_config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "hartflow.yaml"
    path.write_text(DEERFLOW_MODELS + extra, encoding="utf-8")
    return path


def entry(**fields: Any) -> ModelEntry:
    return ModelEntry.model_validate({"name": "m", "use": "langchain_openai:ChatOpenAI", "model": "x", **fields})


def test_deerflow_models_block_builds_chat_openai_with_the_key_from_the_environment(tmp_path: Path) -> None:
    config = load_config(deerflow_config(tmp_path), environ={})
    gpt4, responses = config.models

    built = build_model(gpt4, {"OPENAI_API_KEY": SECRET})

    model = built.model
    assert isinstance(model, ChatOpenAI)
    assert (model.model_name, model.max_tokens, model.temperature, model.request_timeout) == ("gpt-4", 4096, 0.7, 600)
    assert model.openai_api_base == "http://127.0.0.1:9/v1"
    assert model.openai_api_key is not None and model.openai_api_key.get_secret_value() == SECRET
    assert model.max_retries == 0, "Temporal owns retries: DeerFlow's max_retries: 2 is overridden"
    assert model.model_kwargs == {}, "descriptive keys (context_window, supports_vision) never reach the provider"
    assert built.secrets == (SECRET,)
    assert gpt4.api_key == "$OPENAI_API_KEY", "the configured entry keeps the reference, never the value"
    assert SECRET not in repr(model)

    other = build_model(responses, {"OPENAI_API_KEY": SECRET}).model
    assert isinstance(other, ChatOpenAI) and other.use_responses_api is True


def test_thinking_settings_apply_as_in_deerflow() -> None:
    environ = {"KEY": "k"}
    thinking = entry(api_key="$KEY", supports_thinking=True, **{"when_thinking_enabled": {"extra_body": {"t": 1}}})
    plain = entry(api_key="${KEY}", when_thinking_disabled={"extra_body": {"t": 0}}, reasoning_effort="high")

    assert build_model(thinking, environ).model.extra_body == {"t": 1}  # type: ignore[attr-defined]
    built = build_model(plain, environ).model
    assert built.extra_body == {"t": 0}  # type: ignore[attr-defined]
    assert built.reasoning_effort is None, "reasoning_effort only with supports_reasoning_effort"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"use": "langchain_openai:ChatOpenAIX"}, "model 'm': use: module langchain_openai has no 'ChatOpenAIX'"),
        (
            {"use": "langchain_nowhere.chat:Chat"},
            "model 'm': use: cannot import langchain_nowhere.chat: no module named 'langchain_nowhere' "
            "(is the package that provides 'langchain_nowhere' installed?)",
        ),
        ({"use": "pathlib:Path"}, "model 'm': use: pathlib:Path is not a BaseChatModel subclass"),
        (
            {"api_key": "$HARTFLOW_NO_SUCH_KEY"},
            "model 'm': api_key is $HARTFLOW_NO_SUCH_KEY, which is not set in the environment",
        ),
        (
            {"extra_body": {"auth": ["$HARTFLOW_NO_SUCH_KEY"]}},
            "model 'm': extra_body.auth[0] is $HARTFLOW_NO_SUCH_KEY, which is not set in the environment",
        ),
    ],
)
def test_an_entry_that_cannot_be_built_names_the_model_and_the_setting(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        build_model(entry(**fields), {})
    assert str(caught.value) == message


def test_a_build_error_never_shows_a_resolved_secret() -> None:
    bad = entry(api_key="$KEY", top_p="$TIMEOUT")

    with pytest.raises(ModelConfigError) as caught:
        build_model(bad, {"KEY": SECRET, "TIMEOUT": f"slow-{SECRET}"})

    assert str(caught.value).startswith("model 'm': top_p")
    assert SECRET not in str(caught.value)


def test_select_model_defaults_to_the_first_and_copies_its_capabilities(tmp_path: Path) -> None:
    config = load_config(deerflow_config(tmp_path), environ={})
    environ = {"OPENAI_API_KEY": SECRET}

    first = select_model(config, environ=environ)
    picked = select_model(config.model_copy(update={"model": "gpt-5-responses"}), environ=environ)
    requested = select_model(config, "gpt-5-responses", environ=environ)

    assert first.spec == "gpt-4"
    assert (first.settings.model_capabilities.vision, first.settings.model_capabilities.max_input_tokens) == (
        True,
        128000,
    )
    assert picked.spec == requested.spec == "gpt-5-responses"
    assert requested.settings.model_capabilities.max_input_tokens == 400000
    assert config.run.model_capabilities.vision is False, "the config itself is not changed"
    assert select_model(config, "openai:gpt-4o-mini", environ=environ).spec == "openai:gpt-4o-mini"

    with pytest.raises(ModelSelectionError, match=r"^unknown model 'gpt-3': models has 'gpt-4', 'gpt-5-responses'"):
        select_model(config, "gpt-3", environ=environ)
    with pytest.raises(ModelSelectionError, match=r"^model 'gpt-4': api_key is \$OPENAI_API_KEY, which is not set"):
        select_model(config, environ={})


def test_an_api_server_checks_a_model_without_the_workers_keys(tmp_path: Path) -> None:
    """The API server holds no provider key: a ``$VAR`` it does not have is the worker's to resolve, while what it
    can check (the entry exists, its class builds from its settings) is still refused up front."""
    config = load_config(deerflow_config(tmp_path), environ={})
    assert select_model(config, "gpt-4", environ={}, keys_here=False).spec == "gpt-4"
    with pytest.raises(ModelSelectionError, match=r"^unknown model 'gpt-3'"):
        select_model(config, "gpt-3", environ={}, keys_here=False)
    broken = config.models[0].model_copy(update={"use": "langchain_openai:NoSuchChatModel"})
    with pytest.raises(ModelSelectionError, match=r"^model 'gpt-4': use: "):
        select_model(config.model_copy(update={"models": [broken]}), environ={}, keys_here=False)


def test_api_models_is_deerflows_public_listing(tmp_path: Path) -> None:
    config = load_config(deerflow_config(tmp_path), environ={})

    listing = api_models(config)

    assert listing == {
        "models": [
            {
                "name": "gpt-4",
                "model": "gpt-4",
                "display_name": "GPT-4",
                "description": None,
                "supports_thinking": False,
                "supports_reasoning_effort": False,
                "supports_vision": True,
            },
            {
                "name": "gpt-5-responses",
                "model": "gpt-5",
                "display_name": "GPT-5 (Responses API)",
                "description": None,
                "supports_thinking": False,
                "supports_reasoning_effort": False,
                "supports_vision": True,
            },
        ],
        "token_usage": {"enabled": True},
    }
    shorthand = load_config(overrides={"model": "openai:gpt-4o-mini"}, environ={})
    assert [m["name"] for m in api_models(shorthand)["models"]] == ["openai:gpt-4o-mini"]


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ([{"name": "a", "use": "nocolon", "model": "x"}], "'models.0.use (model 'a')': Value error, 'nocolon' must"),
        ([{"name": "a", "model": "x"}], "'models.0.use (model 'a')': Field required"),
        (
            [{"name": "a", "use": "m:C", "model": "x"}, {"name": "a", "use": "m:C", "model": "y"}],
            "two models are named 'a'",
        ),
        ([{"name": "openai:x", "use": "m:C", "model": "x"}], "cannot be a model name"),
        ([{"name": "a", "use": "m:C", "model": "x", "max_tokens": 0}], "'models.0.max_tokens (model 'a')'"),
    ],
)
def test_a_malformed_list_is_a_config_error_naming_the_key(models: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides={"models": models}, environ={})
    assert message in str(caught.value)


def test_the_worker_check_builds_every_entry(tmp_path: Path) -> None:
    config = load_config(deerflow_config(tmp_path), environ={})
    check_worker_models(config, {"OPENAI_API_KEY": SECRET})

    broken = config.model_copy(update={"models": [*config.models, ModelEntry.model_validate(DEERFLOW_DEEPSEEK)]})
    with pytest.raises(ConfigError, match=r"^invalid models list: model 'deepseek-v4': use: cannot import "):
        check_worker_models(broken, {"OPENAI_API_KEY": SECRET})


def test_the_catalog_builds_each_model_once() -> None:
    catalog = ModelCatalog([entry(api_key="$KEY")], {"KEY": SECRET})

    assert "m" in catalog and "n" not in catalog
    assert catalog.build("m") is catalog.build("m")


@pytest.mark.parametrize(
    ("command", "setting"),
    [
        (["run", "hi"], "model 'deepseek-v4': use: cannot import deerflow.models.patched_deepseek"),
        (["worker"], "invalid models list: model 'deepseek-v4': use: cannot import"),
    ],
)
def test_run_and_worker_exit_2_on_a_model_they_cannot_build(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    setting: str,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    path = tmp_path / "hartflow.yaml"
    models = [DEERFLOW_DEEPSEEK, *yaml.safe_load(DEERFLOW_MODELS)["models"]]
    home = tmp_path / "home"
    path.write_text(yaml.safe_dump({"models": models, "storage": {"home": str(home)}}), encoding="utf-8")

    code = run_command([*command, "--config", str(path)])

    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("hartflow: error: ") and err.count("\n") == 1
    assert setting in err
    assert not home.exists(), "refused before anything was written"


def test_run_exits_2_when_the_key_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code = run_command(["run", "hi", "--config", str(deerflow_config(tmp_path)), "--model", "gpt-5-responses"])

    assert code == 2
    assert "model 'gpt-5-responses': api_key is $OPENAI_API_KEY, which is not set" in capsys.readouterr().err


class KeyQuotingModel(BaseChatModel):
    """A provider whose SDK error chain quotes the key it was given (in the cause, not the top message)."""

    token: str = ""

    @property
    def _llm_type(self) -> str:
        return "key-quoting"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any) -> ChatResult:
        try:
            raise ValueError(f"server rejected token {self.token}")
        except ValueError as exc:
            raise PermissionError("Unauthorized: the provider refused the token") from exc


async def test_activity_errors_never_carry_a_resolved_secret() -> None:
    quoting = entry(name="quoting", use=f"{__name__}:KeyQuotingModel", token="$TOKEN")
    activities = ModelActivities(models=[quoting], environ={"TOKEN": SECRET})

    call = ModelCallInput(model="quoting", messages=[HumanMessage("hi")])
    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(activities.invoke, call)

    error = caught.value
    assert (error.type, error.non_retryable, error.details[0]["reason"]) == ("PermissionError", True, "auth")
    assert error.__cause__ is None, "the cause chain would carry the secret into history"
    assert SECRET not in error.message


@pytest.mark.parametrize(
    ("arguments", "kind"), [('"ls"', "a string"), ("[1]", "a list"), ("5", "a number"), ("true", "a boolean")]
)
def test_non_object_arguments_become_invalid_tool_calls_in_langchain_openai(arguments: str, kind: str) -> None:
    from langchain_openai.chat_models.base import _convert_dict_to_message

    tool_args.install()
    raw = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": arguments}}
    message = _convert_dict_to_message({"role": "assistant", "content": "x", "tool_calls": [raw]})

    assert isinstance(message, AIMessage) and message.tool_calls == []
    [invalid] = message.invalid_tool_calls
    assert (invalid["id"], invalid["args"]) == ("c1", arguments)
    assert invalid["error"] == f"Function bash: the arguments must be a JSON object, not {kind}"

    valid = {**raw, "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    message = _convert_dict_to_message({"role": "assistant", "content": "", "tool_calls": [valid]})
    assert isinstance(message, AIMessage) and message.tool_calls[0]["args"] == {"command": "ls"}
