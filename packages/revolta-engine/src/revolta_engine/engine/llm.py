"""The offline API: ``LLM(model=...).generate(prompts, sampling_params)`` as in vLLM."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from revolta_engine.config import EngineArgs
from revolta_engine.engine.llm_engine import LLMEngine
from revolta_engine.outputs import RequestOutput
from revolta_engine.sampling_params import RequestOutputKind, SamplingParams

PromptType = str | list[int] | dict


class LLM:
    """Runs prompts to completion in this process (continuous batching across the prompts given)."""

    def __init__(self, model: str | None = None, **engine_args: Any) -> None:
        if model is not None:
            engine_args["model"] = model
        self.llm_engine = LLMEngine.from_engine_args(EngineArgs.from_kwargs(**engine_args))
        self._ids = itertools.count()

    def shutdown(self) -> None:
        """Release what the engine holds outside this process (tensor-parallel workers, KV offload writes)."""
        self.llm_engine.shutdown()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def get_tokenizer(self):
        """The model's tokenizer (None with skip_tokenizer_init)."""
        return self.llm_engine.tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """The sampling parameters a call without its own gets: the model's recommended values from its generation
        config (``generation_config="auto"``, the default) over ``SamplingParams``' defaults, as in vLLM."""
        return SamplingParams(**self.llm_engine.default_sampling)

    def generate(self, prompts: PromptType | Sequence[PromptType],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool | Callable[..., Any] = True, lora_request: Any = None,
                 priority: Sequence[int] | None = None) -> list[RequestOutput]:
        """Generate completions for one or many prompts; outputs come back in the prompts' order. ``priority``: one
        value per prompt (the priority scheduling policy runs lower values first). ``use_tqdm``: a progress bar of
        finished prompts on stderr (or the tqdm-like class to draw it with), as in vLLM. ``lora_request`` must be
        None: adapters are not supported."""
        _refuse_lora(lora_request)
        if isinstance(prompts, str | dict) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        prompts = list(prompts)  # type: ignore[arg-type]
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        params_list = (list(sampling_params) if isinstance(sampling_params, Sequence)
                       else [sampling_params] * len(prompts))
        if len(params_list) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(params_list)} sampling params")
        priorities = list(priority) if priority is not None else [0] * len(prompts)
        if len(priorities) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(priorities)} priorities")
        ids = []
        try:
            for prompt, params, prio in zip(prompts, params_list, priorities, strict=True):
                rid = f"offline-{next(self._ids)}"
                final = SamplingParams(**{**params.__dict__, "output_kind": RequestOutputKind.FINAL_ONLY})
                self.llm_engine.add_request(rid, prompt, final, priority=prio)
                ids.append(rid)
        except Exception:
            self.llm_engine.abort_request(ids)
            raise
        return self._run(ids, use_tqdm)

    def chat(self, messages: list[dict] | list[list[dict]],
             sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
             use_tqdm: bool | Callable[..., Any] = True, lora_request: Any = None, *,
             chat_template: str | None = None, add_generation_prompt: bool = True,
             continue_final_message: bool = False, chat_template_kwargs: dict | None = None,
             tools: list[dict] | None = None) -> list[RequestOutput]:
        """Render each conversation with the chat template and generate its reply. ``continue_final_message``:
        the reply continues the conversation's final (assistant) message instead of starting a new turn."""
        _refuse_lora(lora_request)
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message needs add_generation_prompt=False (the reply continues the "
                             "final message rather than opening a new turn)")
        conversations: list[Any] = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        prompts: list[PromptType] = []
        for conv in conversations:
            kwargs = dict(chat_template_kwargs or {})
            if continue_final_message:
                kwargs["continue_final_message"] = True
            text = self.llm_engine.apply_chat_template(
                conv, add_generation_prompt=add_generation_prompt, tools=tools, chat_template=chat_template, **kwargs)
            prompts.append({"prompt": text, "prompt_token_ids": self.llm_engine.tokenize_prompt(text)})
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    def _run(self, ids: list[str], use_tqdm: bool | Callable[..., Any] = False) -> list[RequestOutput]:
        done: dict[str, RequestOutput] = {}
        engine = self.llm_engine
        progress = _progress_bar(use_tqdm, len(ids))
        try:
            while len(done) < len(ids):
                for out in engine.step():
                    if out.finished:
                        done[out.request_id] = out
                        if progress is not None:
                            progress.update(1)
        finally:
            if progress is not None:
                progress.close()
        return [done[i] for i in ids]


def _progress_bar(use_tqdm: bool | Callable[..., Any], total: int) -> Any:
    """vLLM's "Processed prompts" bar: tqdm when ``use_tqdm`` is True, the given tqdm-like class when callable."""
    if not use_tqdm:
        return None
    if callable(use_tqdm):
        return use_tqdm(total=total, desc="Processed prompts", dynamic_ncols=True)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="Processed prompts", dynamic_ncols=True)


def _refuse_lora(lora_request: Any) -> None:
    if lora_request is not None:
        raise ValueError("LoRA adapters are not supported: merge the adapter into the model's weights first")
