"""``POST /tokenize`` and ``POST /detokenize`` (vLLM's endpoints), with the server's own tokenizer."""

from __future__ import annotations

from fastapi import APIRouter, Request

from revolta_api.errors import bad_request
from revolta_api.openai.protocol import DetokenizeRequest, TokenizeChatRequest, TokenizeCompletionRequest
from revolta_api.state import get_state
from revolta_engine.engine.prompt_input import encode_prompt

router = APIRouter()


@router.post("/tokenize")
async def tokenize(body: TokenizeChatRequest | TokenizeCompletionRequest, request: Request) -> dict:
    """Token ids of a prompt, or of chat messages rendered with the chat template."""
    state = get_state(request)
    state.check_model(body.model)
    tokenizer = state.client.tokenizer
    if isinstance(body, TokenizeChatRequest):
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        text = state.renderer.render(
            messages, add_generation_prompt=body.add_generation_prompt and not body.continue_final_message,
            continue_final_message=body.continue_final_message, chat_template=body.chat_template,
            template_kwargs=body.chat_template_kwargs)
        ids = encode_prompt(tokenizer, text, param="messages")
    else:
        ids = encode_prompt(tokenizer, body.prompt, add_special_tokens=body.add_special_tokens)
    result = {"count": len(ids), "max_model_len": state.client.info.max_model_len, "tokens": ids}
    if body.return_token_strs:
        result["token_strs"] = tokenizer.convert_ids_to_tokens(ids)
    return result


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> dict:
    """The text of a list of token ids."""
    state = get_state(request)
    state.check_model(body.model)
    size = state.client.info.vocab_size
    bad = [t for t in body.tokens if t >= size]
    if bad:
        raise bad_request(f"Token id {bad[0]} is out of vocabulary (vocabulary size is {size}).", param="tokens")
    return {"prompt": state.client.tokenizer.decode(body.tokens)}
