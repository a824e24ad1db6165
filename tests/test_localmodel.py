"""The local model server's settings and its absence (the server itself: test_local_llamacpp)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from chatrag.dev import localmodel
from chatrag.dev.localmodel import BACKEND, MODEL_NAME, LocalModel, LocalModelUnavailable


def test_the_settings_point_the_openai_backend_at_the_server() -> None:
    env = LocalModel("http://127.0.0.1:8123").environment({"CHATRAG_LLM_API_KEY": "sk-real"})
    assert env["CHATRAG_LLM_BACKEND"] == BACKEND == "retrieval.pipeline.llm.OpenAIChat"
    assert env["CHATRAG_LLM_URL"] == "http://127.0.0.1:8123/v1"
    assert env["CHATRAG_LLM_MODEL"] == MODEL_NAME
    assert env["CHATRAG_LLM_API_KEY"] == ""  # never sent to the local server


def test_the_timeouts_are_a_minute_unless_the_environment_sets_them() -> None:
    model = LocalModel("http://127.0.0.1:8123")
    assert model.environment({})["CHATRAG_REWRITE_TIMEOUT"] == "60"
    env = model.environment({"CHATRAG_REWRITE_TIMEOUT": "5", "PATH": "/bin"})
    assert (env["CHATRAG_REWRITE_TIMEOUT"], env["CHATRAG_LLM_TIMEOUT"]) == ("5", "60")
    assert env["PATH"] == "/bin"


def test_without_the_model_file_serving_says_how_to_install_it(monkeypatch: Any) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == localmodel.MODEL_PACKAGE else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(LocalModelUnavailable, match="make local-model"):
        localmodel.model_path()
    reason = localmodel.unavailable_reason()
    assert reason is not None and "make local-model" in reason
    with pytest.raises(LocalModelUnavailable), localmodel.serve():
        pass
