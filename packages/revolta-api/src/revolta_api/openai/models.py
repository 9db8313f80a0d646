"""``GET /v1/models``: the served model names, with the context length."""

from __future__ import annotations

from fastapi import APIRouter, Request

from revolta_api.state import get_state

router = APIRouter()


def _card(state, name: str) -> dict:
    return {"id": name, "object": "model", "created": state.created, "owned_by": "revolta",
            "root": state.served_model_names[0], "parent": None,
            "max_model_len": state.client.info.max_model_len}


@router.get("/v1/models")
async def list_models(request: Request) -> dict:
    """OpenAI's model list."""
    state = get_state(request)
    return {"object": "list", "data": [_card(state, name) for name in state.served_model_names]}


@router.get("/v1/models/{model:path}")
async def retrieve_model(model: str, request: Request) -> dict:
    """One model card; 404 for a name this server does not serve."""
    state = get_state(request)
    state.check_model(model)
    return _card(state, model)
