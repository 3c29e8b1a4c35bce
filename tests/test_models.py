"""The Anthropic adapter through the real SDK over httpx2.MockTransport, and the offline model."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import httpx2
import pytest
from conftest import run

from ctxstore.agents.anthropic import anthropic_model
from ctxstore.agents.models import GenerateResult, Model, Usage
from ctxstore.agents.offline import OfflineModel, offline_model, tool_call
from ctxstore.errors import CtxStoreError, InvalidInput, ModelError
from ctxstore.history.budget import cost_of


def reply(content: list[dict[str, Any]], stop_reason: str = "end_turn", **usage: Any) -> dict[str, Any]:
    return {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
        "content": content, "stop_reason": stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, **usage},
    }


class Recorder:
    """An httpx2 handler that answers with canned responses and keeps the requests it saw."""

    def __init__(self, *responses: httpx2.Response) -> None:
        self.responses = list(responses)
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append((request.url.path, json.loads(request.content)))
        return self.responses.pop(0)


def sdk_client(handler: Any) -> anthropic.AsyncAnthropic:
    transport = httpx2.MockTransport(handler)
    return anthropic.AsyncAnthropic(api_key="test", max_retries=0,
                                    http_client=httpx2.AsyncClient(transport=transport))


def test_request_carries_model_messages_system_tools_and_max_tokens() -> None:
    handler = Recorder(httpx2.Response(200, json=reply([{"type": "text", "text": "hi"}])))
    model = anthropic_model("claude-haiku-4-5", client=sdk_client(handler), max_tokens=321)
    tools = [{"name": "f", "description": "d", "input_schema": {"type": "object", "properties": {}}}]
    messages = [{"role": "user", "content": "hello"}]
    result = run(model.generate(messages=messages, system="be brief", tools=tools))
    path, body = handler.requests[0]
    assert path == "/v1/messages"
    assert body == {"model": "claude-haiku-4-5", "messages": messages, "system": "be brief",
                    "tools": tools, "max_tokens": 321}
    assert result.text == "hi"
    assert result.message == {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}
    assert result.stop_reason == "end_turn"


def test_request_omits_system_and_tools_when_absent_and_max_tokens_overrides() -> None:
    handler = Recorder(httpx2.Response(200, json=reply([{"type": "text", "text": "x"}])))
    model = anthropic_model(client=sdk_client(handler))
    run(model.generate(messages=[{"role": "user", "content": "q"}], max_tokens=7))
    body = handler.requests[0][1]
    assert body["model"] == "claude-sonnet-4-6"
    assert body["max_tokens"] == 7
    assert "system" not in body and "tools" not in body


def test_tool_use_response_becomes_plain_blocks_with_input_intact() -> None:
    content = [{"type": "text", "text": "Let me check."},
               {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x", "n": None}}]
    handler = Recorder(httpx2.Response(200, json=reply(content, "tool_use")))
    model = anthropic_model(client=sdk_client(handler))
    result = run(model.generate(messages=[{"role": "user", "content": "look it up"}]))
    assert result.stop_reason == "tool_use"
    assert result.message["content"] == content
    assert result.tool_uses == [content[1]]
    assert all(type(block) is dict for block in result.message["content"])
    json.dumps(result.message)  # plain data, ready to append to a history


def test_usage_including_cache_figures_is_carried_through_and_priced() -> None:
    body = reply([{"type": "text", "text": "ok"}], input_tokens=1_000_000, output_tokens=100_000,
                 cache_read_input_tokens=200_000, cache_creation_input_tokens=40_000)
    model = anthropic_model(client=sdk_client(Recorder(httpx2.Response(200, json=body))))
    result = run(model.generate(messages=[{"role": "user", "content": "q"}]))
    assert result.usage == Usage(1_000_000, 100_000, 200_000, 40_000)
    assert cost_of(result.usage, model.name) == pytest.approx(3 + 1.5 + 0.06 + 0.15)


@pytest.mark.parametrize("status,kind", [(400, "invalid_request_error"), (529, "overloaded_error")])
def test_api_error_surfaces_as_model_error_with_sdk_cause(status: int, kind: str) -> None:
    error = {"type": "error", "error": {"type": kind, "message": "nope"}}
    model = anthropic_model(client=sdk_client(Recorder(httpx2.Response(status, json=error))))
    with pytest.raises(ModelError) as caught:
        run(model.generate(messages=[{"role": "user", "content": "q"}]))
    assert isinstance(caught.value, CtxStoreError)
    assert isinstance(caught.value.__cause__, anthropic.APIStatusError)
    assert caught.value.__cause__.status_code == status
    assert str(status) in str(caught.value) and "retry" in str(caught.value)


def test_connection_failure_surfaces_as_model_error() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    model = anthropic_model(client=sdk_client(handler))
    with pytest.raises(ModelError) as caught:
        run(model.generate(messages=[{"role": "user", "content": "q"}]))
    assert isinstance(caught.value.__cause__, anthropic.APIConnectionError)


def hanging_client() -> tuple[anthropic.AsyncAnthropic, dict[str, Any]]:
    """A client whose requests never get an answer; records whether the request was cancelled."""
    seen: dict[str, Any] = {"started": asyncio.Event(), "cancelled": False}

    async def handler(request: httpx2.Request) -> httpx2.Response:
        seen["started"].set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen["cancelled"] = True
            raise
        raise AssertionError("unreachable")

    return sdk_client(handler), seen


def test_cancelling_the_awaiting_task_cancels_the_request() -> None:
    async def scenario() -> dict[str, Any]:
        client, seen = hanging_client()
        model = anthropic_model(client=client)
        task = asyncio.create_task(model.generate(messages=[{"role": "user", "content": "q"}]))
        await seen["started"].wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    assert run(scenario())["cancelled"]


def test_setting_the_signal_aborts_the_request_in_flight() -> None:
    async def scenario() -> dict[str, Any]:
        client, seen = hanging_client()
        model = anthropic_model(client=client)
        signal = asyncio.Event()
        task = asyncio.create_task(model.generate(messages=[{"role": "user", "content": "q"}], signal=signal))
        await seen["started"].wait()
        signal.set()
        with pytest.raises(ModelError, match="abort"):
            await task
        return seen

    assert run(scenario())["cancelled"]


def test_a_signal_set_beforehand_sends_no_request() -> None:
    handler = Recorder()
    model = anthropic_model(client=sdk_client(handler))
    signal = asyncio.Event()
    signal.set()
    with pytest.raises(ModelError, match="abort"):
        run(model.generate(messages=[{"role": "user", "content": "q"}], signal=signal))
    assert handler.requests == []


def test_count_tokens_asks_the_api() -> None:
    handler = Recorder(httpx2.Response(200, json={"input_tokens": 42}))
    model = anthropic_model(client=sdk_client(handler))
    assert run(model.count_tokens([{"role": "user", "content": "q"}], system="s")) == 42
    path, body = handler.requests[0]
    assert path == "/v1/messages/count_tokens"
    messages = [{"role": "user", "content": "q"}]
    assert body == {"model": "claude-sonnet-4-6", "messages": messages, "system": "s"}


def test_anthropic_model_makes_no_client_until_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """Constructing the model works without an API key (the seed builds one at module level)."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    model = anthropic_model("claude-sonnet-4-6")
    assert isinstance(model, Model) and model.name == "claude-sonnet-4-6"
    with pytest.raises(InvalidInput):
        anthropic_model(max_tokens=0)


def test_importing_ctxstore_does_not_import_anthropic() -> None:
    """Not the package, the agents layer, the adapter module or the CLI: only calling anthropic_model does."""
    import subprocess
    import sys

    code = ("import sys, ctxstore, ctxstore.agents.loop, ctxstore.agents.strategies, ctxstore.agents.anthropic, "
            "ctxstore.cli; print('anthropic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# The offline model --------------------------------------------------------------------------------


def test_offline_model_plays_its_script_then_answers_by_default() -> None:
    model = offline_model(["first", {"role": "assistant", "content": "second"}, lambda req: "third"])
    texts = [run(model.generate(messages=[{"role": "user", "content": "q"}])).text for _ in range(4)]
    assert texts == ["first", "second", "third", "Offline answer to: q"]
    assert len(model.requests) == 4


def test_offline_scripted_tool_call_gets_a_deterministic_id_and_stop_reason() -> None:
    messages = [{"role": "user", "content": "go"}]
    results = [run(offline_model([tool_call("f", {"x": 1})]).generate(messages=messages)) for _ in range(2)]
    block = results[0].tool_uses[0]
    assert results[0].stop_reason == "tool_use"
    assert block["name"] == "f" and block["input"] == {"x": 1} and block["id"].startswith("toolu_")
    assert results[0].message == results[1].message


def test_offline_default_calls_a_named_tool_with_numbers_from_the_prompt() -> None:
    tools = [{"name": "multiply", "description": "", "input_schema": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"]}}]
    result = run(OfflineModel().generate(messages=[{"role": "user", "content": "Use multiply on 6 and 7"}],
                                         tools=tools))
    assert result.stop_reason == "tool_use"
    assert result.tool_uses[0]["input"] == {"a": 6, "b": 7}


def test_offline_default_reports_tool_results_and_ends_its_turn() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "multiply", "input": {}}
    messages = [{"role": "user", "content": "multiply"}, {"role": "assistant", "content": [use]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]}]
    result = run(OfflineModel().generate(messages=messages))
    assert result.stop_reason == "end_turn" and result.text == "multiply returned 42."


def test_offline_default_summarizes_when_asked() -> None:
    prompt = "Summarize these:\n\nuser: the deploy window is Friday\nassistant: noted"
    result = run(OfflineModel().generate(messages=[{"role": "user", "content": prompt}]))
    assert "deploy window is Friday" in result.text and "noted" in result.text
    assert not result.text.startswith("Offline answer")


def test_offline_usage_is_the_token_estimate() -> None:
    from ctxstore.history.budget import estimate_tokens

    messages = [{"role": "user", "content": "x" * 40}]
    result = run(OfflineModel().generate(messages=messages))
    assert isinstance(result, GenerateResult)
    assert result.usage.input_tokens == estimate_tokens(messages) == 10
    assert result.usage.output_tokens == estimate_tokens([result.message])


def test_offline_rejects_a_malformed_script_item() -> None:
    with pytest.raises(InvalidInput):
        run(offline_model([42]).generate(messages=[{"role": "user", "content": "q"}]))  # type: ignore[list-item]


def test_offline_latency_can_be_aborted_by_a_signal() -> None:
    async def scenario() -> None:
        model = OfflineModel(latency=30)
        signal = asyncio.Event()
        task = asyncio.create_task(model.generate(messages=[{"role": "user", "content": "q"}], signal=signal))
        await asyncio.sleep(0)
        signal.set()
        with pytest.raises(ModelError, match="abort"):
            await task
        assert model.requests == []

    run(scenario())


def test_usage_adds_and_keeps_unreported_cache_figures_none() -> None:
    total = Usage(1, 2) + Usage(3, 4, cache_read_input_tokens=5)
    assert total == Usage(4, 6, 5, None)
    assert total.total_tokens == 10


# Bad input: every refusal is InvalidInput (a CtxStoreError), raised before anything is sent --------


def test_the_anthropic_adapter_refuses_malformed_requests_without_sending_one() -> None:
    handler = Recorder()
    model = anthropic_model(client=sdk_client(handler))
    bad_requests: list[dict[str, Any]] = [
        {"messages": "hello"},
        {"messages": ["hello"]},
        {"messages": [{"role": "user", "content": object()}]},
        {"messages": [{"role": "user", "content": "q"}], "tools": [42]},
        {"messages": [{"role": "user", "content": "q"}], "system": 7},
        {"messages": [{"role": "user", "content": "q"}], "max_tokens": 0},
        {"messages": [{"role": "user", "content": "q"}], "max_tokens": "many"},
    ]
    for request in bad_requests:
        with pytest.raises(InvalidInput):
            run(model.generate(**request))
    with pytest.raises(InvalidInput):
        run(model.count_tokens(42))  # type: ignore[arg-type]
    assert handler.requests == []


def test_anthropic_model_refuses_a_bad_model_id_or_token_limit() -> None:
    for options in ({"model": ""}, {"model": 3}, {"max_tokens": 2.5}, {"max_tokens": True}):
        with pytest.raises(InvalidInput):
            anthropic_model(**options)


def test_a_request_may_carry_sdk_objects_which_are_sent_as_plain_data() -> None:
    handler = Recorder(httpx2.Response(200, json=reply([{"type": "text", "text": "ok"}])))
    model = anthropic_model(client=sdk_client(handler))
    block = anthropic.types.TextBlock(type="text", text="earlier answer")
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": [block]},
                {"role": "user", "content": "and?"}]
    run(model.generate(messages=messages))
    assert handler.requests[0][1]["messages"][1] == {
        "role": "assistant", "content": [{"type": "text", "text": "earlier answer"}]}


def test_usage_of_refuses_figures_that_are_not_whole_numbers() -> None:
    assert Usage.of({"input_tokens": 3.0, "output_tokens": 2}) == Usage(3, 2)
    for figure in ("12", 1.5, True, [1], float("inf"), float("nan")):
        with pytest.raises(InvalidInput):
            Usage.of({"input_tokens": figure})


def test_the_offline_model_refuses_bad_settings_when_made() -> None:
    with pytest.raises(InvalidInput):
        OfflineModel(script="hello")  # a str is not a list of replies
    with pytest.raises(InvalidInput):
        OfflineModel(script=[None])  # type: ignore[list-item]
    for latency in (-1, float("nan"), float("inf"), "1"):
        with pytest.raises(InvalidInput):
            OfflineModel(latency=latency)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        OfflineModel(name="")


def test_the_offline_model_refuses_malformed_requests_and_replies() -> None:
    model = OfflineModel()
    for messages in ("q", [42], [{"role": "user", "content": {1, 2}}]):
        with pytest.raises(InvalidInput):
            run(model.generate(messages=messages))  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            run(model.count_tokens(messages))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        run(model.generate(messages=[{"role": "user", "content": "q"}], tools=["t"]))  # type: ignore[list-item]
    with pytest.raises(InvalidInput):
        run(model.generate(messages=[{"role": "user", "content": "q"}], system=["s"]))  # type: ignore[arg-type]
    scripted = OfflineModel([{"role": "assistant", "content": ["not a block"]}, lambda request: 42])
    with pytest.raises(InvalidInput):
        run(scripted.generate(messages=[{"role": "user", "content": "q"}]))
    with pytest.raises(InvalidInput):
        run(scripted.generate(messages=[{"role": "user", "content": "q"}]))
    for name, arguments in (("", {}), (3, {}), ("t", ["x"])):
        with pytest.raises(InvalidInput):
            tool_call(name, arguments)  # type: ignore[arg-type]


def test_the_offline_model_answers_odd_but_json_shaped_messages() -> None:
    """Content blocks it cannot read and schemas without properties do not break the default behaviour."""
    model = OfflineModel()
    odd = [{"role": "assistant", "content": ["stray", {"type": "tool_use", "id": ["x"], "name": "t"}]},
           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": {"a": 1}, "content": 5}]}]
    assert run(model.generate(messages=odd)).text.startswith("tool returned")
    tools = [{"name": "lookup", "input_schema": "loose"}, {"name": "find", "input_schema": {"properties": 3}}]
    for name in ("lookup", "find"):
        result = run(model.generate(messages=[{"role": "user", "content": f"{name} it"}], tools=tools))
        assert result.tool_uses[0]["name"] == name and result.tool_uses[0]["input"] == {}
