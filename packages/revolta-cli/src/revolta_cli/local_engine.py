"""Run chat turns and one-shot prompts on an in-process engine or against a server URL, streaming text."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

# What a local chat samples with where neither the user nor the model's generation config says (SmolLM2 has none;
# its answers at temperature 1.0 wander).
CLI_TEMPERATURE = 0.7


class LocalGenerator:
    """An ``LLMEngine`` in this process, stepped until the request finishes; yields text as it comes."""

    def __init__(self, engine_args: Any) -> None:
        from revolta_engine import LLMEngine

        self.engine = LLMEngine.from_engine_args(engine_args)
        self._ids = itertools.count()

    def stream(self, prompt: str | None, messages: list[dict] | None, options: dict) -> Iterator[str]:
        """Text deltas of one completion of ``prompt`` (or of the chat ``messages``)."""
        from revolta_engine import RequestOutputKind, SamplingParams
        from revolta_engine.engine.generation_defaults import apply_sampling_defaults

        if messages is not None:
            prompt = self.engine.apply_chat_template(messages, add_generation_prompt=True)
        if prompt is None:
            raise ValueError("give a prompt or chat messages")
        values = apply_sampling_defaults(options, {"temperature": CLI_TEMPERATURE, **self.engine.default_sampling})
        params = SamplingParams(output_kind=RequestOutputKind.DELTA, **values)
        request_id = f"cli-{next(self._ids)}"
        self.engine.add_request(request_id, prompt, params)
        finished = False
        try:
            while not finished:
                for out in self.engine.step():
                    if out.request_id == request_id:
                        finished = out.finished
                        for comp in out.outputs:
                            if comp.text:
                                yield comp.text
        finally:
            if not finished:
                self.engine.abort_request([request_id])


class RemoteGenerator:
    """An OpenAI-compatible server; streams ``/v1/chat/completions`` or ``/v1/completions``."""

    def __init__(self, url: str, model: str | None, api_key: str | None) -> None:
        import httpx

        self.base = url.rstrip("/")
        if not self.base.endswith("/v1"):
            self.base += "/v1"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(headers=headers, timeout=httpx.Timeout(600.0, connect=10.0))
        self.model = model or self._first_model()

    def _first_model(self) -> str:
        response = self.http.get(f"{self.base}/models")
        response.raise_for_status()
        return response.json()["data"][0]["id"]

    def stream(self, prompt: str | None, messages: list[dict] | None, options: dict) -> Iterator[str]:
        """Text deltas from the server."""
        body: dict[str, Any] = {"model": self.model, "stream": True, **options}
        if messages is not None:
            path, body["messages"] = "chat/completions", messages
        else:
            path, body["prompt"] = "completions", prompt
        with self.http.stream("POST", f"{self.base}/{path}", json=body) as response:
            if response.status_code != 200:
                response.read()
                raise RuntimeError(f"server answered {response.status_code}: {response.text}")
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(chunk["error"]["message"])
                for choice in chunk.get("choices", []):
                    text = choice.get("delta", {}).get("content") if messages is not None else choice.get("text")
                    if text:
                        yield text
