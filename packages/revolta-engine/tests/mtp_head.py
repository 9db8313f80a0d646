"""A random MTP head added to a tiny hybrid checkpoint, and a float32 reference of its greedy drafts.

The head's decoder layer is transformers' own full-attention layer of the family (a Qwen3.5 or Qwen3-Next
decoder layer, random weights); its tensors go into the checkpoint under ``mtp.layers.0.`` beside ``mtp.fc`` and
the three zero-centred norms, as real Qwen3-Next / Qwen3.5 checkpoints store them. The reference recomputes the
whole head (embedding and target hidden state normed, concatenated, ``fc``, the layer with a causal mask, the
final norm, the target's LM head) for every draft, so it shares no code with the engine's incremental path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig

FULL_LAYER = 1  # hybrid_checkpoints.HYBRID_LAYERS[1] is the full-attention layer


@dataclass
class ReferenceHead:
    layer: torch.nn.Module
    norm_embedding: torch.nn.Module
    norm_hidden: torch.nn.Module
    norm: torch.nn.Module
    fc: torch.Tensor


def _modules(family: str):
    if family == "qwen3_next":
        from transformers.models.qwen3_next import modeling_qwen3_next as m

        return m.Qwen3NextDecoderLayer, m.Qwen3NextRMSNorm
    if family == "qwen3_5":
        from transformers.models.qwen3_5 import modeling_qwen3_5 as m

        return m.Qwen3_5DecoderLayer, m.Qwen3_5RMSNorm
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m

    return m.Qwen3_5MoeDecoderLayer, m.Qwen3_5MoeRMSNorm


def _per_expert(name: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
    """transformers' fused expert parameters -> the per-expert tensors checkpoints hold."""
    prefix = name.removesuffix("gate_up_proj").removesuffix("down_proj")
    out = {}
    for e in range(tensor.shape[0]):
        if name.endswith("gate_up_proj"):
            gate, up = tensor[e].chunk(2, dim=0)
            out[f"{prefix}{e}.gate_proj.weight"], out[f"{prefix}{e}.up_proj.weight"] = gate, up
        else:
            out[f"{prefix}{e}.down_proj.weight"] = tensor[e]
    return out


def add_mtp_head(root: Path, family: str, seed: int = 1) -> ReferenceHead:
    """Write a random MTP head into ``root``'s ``model.safetensors`` and return its reference modules."""
    config = AutoConfig.from_pretrained(root)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    text._attn_implementation = "eager"
    layer_cls, norm_cls = _modules(family)
    torch.manual_seed(seed)
    layer = layer_cls(text, FULL_LAYER).float().eval()
    h = text.hidden_size
    norms = [norm_cls(h, eps=text.rms_norm_eps).float().eval() for _ in range(3)]
    with torch.no_grad():
        for p in list(layer.parameters()) + [n.weight for n in norms]:
            p.copy_(0.2 * torch.randn(p.shape))
    fc = 0.2 * torch.randn(h, 2 * h)
    tensors = {}
    for name, t in layer.state_dict().items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            tensors.update({f"mtp.layers.0.{k}": v for k, v in _per_expert(name, t).items()})
        else:
            tensors[f"mtp.layers.0.{name}"] = t
    tensors.update({"mtp.fc.weight": fc, "mtp.pre_fc_norm_embedding.weight": norms[0].weight.data,
                    "mtp.pre_fc_norm_hidden.weight": norms[1].weight.data, "mtp.norm.weight": norms[2].weight.data})
    path = root / "model.safetensors"
    weights = load_file(path)
    weights.update({k: v.contiguous().clone() for k, v in tensors.items()})
    save_file(weights, path, metadata={"format": "pt"})
    return ReferenceHead(layer, norms[0], norms[1], norms[2], fc)


@torch.no_grad()
def reference_drafts(model, head: ReferenceHead, tokens: list[int], k: int) -> list[int]:
    """The head's ``k`` greedy drafts after ``tokens`` (the target's hidden states from transformers)."""
    text = getattr(model.model, "language_model", model.model)  # multimodal checkpoints nest the text model
    hidden = text(torch.tensor([tokens[:-1]])).last_hidden_state[0]  # positions 0 .. N-2, normed
    embeds = text.embed_tokens(torch.tensor(tokens[1:]))  # the token after each position
    drafts: list[int] = []
    for _ in range(k):
        n = embeds.shape[0]
        x = torch.cat([head.norm_embedding(embeds), head.norm_hidden(hidden)], dim=-1) @ head.fc.T
        positions = torch.arange(n)[None]
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        rotary = text.rotary_emb
        # Qwen3.5's rotary takes the three rows of multimodal positions (some transformers versions only that)
        cos_sin = rotary(x[None], positions[None].expand(3, -1, -1) if hasattr(rotary, "mrope_section") else positions)
        out = head.layer(x[None], position_embeddings=cos_sin, attention_mask=mask, position_ids=positions)
        out = head.norm(out[0] if isinstance(out, tuple) else out)[0]
        token = int(model.lm_head(out[-1]).argmax())
        drafts.append(token)
        embeds = torch.cat([embeds, text.embed_tokens(torch.tensor([token]))])
        hidden = torch.cat([hidden, out[-1:]])
    return drafts


def assert_drafts_match_reference(seen: list[tuple[list[int], list[int]]], model, head: ReferenceHead) -> None:
    """Every (known tokens, drafts) proposal the engine recorded equals the float32 reference head's drafts."""
    mismatched = [(tokens, drafts) for tokens, drafts in seen
                  if drafts != reference_drafts(model, head, tokens, len(drafts))]
    assert not mismatched, f"{len(mismatched)} of {len(seen)} proposals differ, first: {mismatched[0]}"
