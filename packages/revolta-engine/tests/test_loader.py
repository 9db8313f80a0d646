"""Loader tests on tiny random HF checkpoints: every layout loads transformers' tensors; errors name the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from checkpoints import make_tiny_checkpoint
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from revolta_engine.errors import ModelLoadError, UnsupportedModelError
from revolta_engine.loader import Checkpoint, load_checkpoint


def _reference_state(path: Path) -> dict[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight")
    return state


def _assert_same_tensors(checkpoint: Checkpoint, reference: dict[str, torch.Tensor]) -> None:
    loaded = dict(checkpoint.iter_weights())
    checkpoint.check_all_shards_read()
    assert sorted(loaded) == sorted(reference)
    for name, tensor in reference.items():
        assert loaded[name].shape == tensor.shape, name
        assert torch.equal(loaded[name].float(), tensor), name


@pytest.mark.parametrize(
    ("arch", "shards", "subfolder", "tied"),
    [
        ("llama", 1, None, False),
        ("qwen2", 1, None, True),
        ("qwen3", 1, None, False),
        ("llama", 3, None, True),
        ("qwen2", 2, "shards", False),
        ("qwen3", 4, "weights/part", True),
    ],
)
def test_layouts_load_transformers_tensors(
    tmp_path: Path, arch: str, shards: int, subfolder: str | None, tied: bool
):
    path = make_tiny_checkpoint(tmp_path, arch, shards=shards, subfolder=subfolder, tie_word_embeddings=tied)
    checkpoint = load_checkpoint(path)
    assert checkpoint.format == "safetensors"
    assert checkpoint.hf_config.model_type == arch
    assert checkpoint.hf_config.architectures == [
        AutoModelForCausalLM.from_config(checkpoint.hf_config).__class__.__name__
    ]
    assert checkpoint.hf_config.tie_word_embeddings is tied
    _assert_same_tensors(checkpoint, _reference_state(path))


def test_transformers_own_sharded_save_loads(tmp_path: Path):
    source = make_tiny_checkpoint(tmp_path, "llama")
    model = AutoModelForCausalLM.from_pretrained(source)
    target = tmp_path / "resaved"
    model.save_pretrained(target, max_shard_size="60KB")
    assert (target / "model.safetensors.index.json").is_file()
    assert len(list(target.glob("*.safetensors"))) > 1
    checkpoint = load_checkpoint(target, tokenizer=str(source))
    _assert_same_tensors(checkpoint, _reference_state(target))


def test_tokenizer_chat_template_and_eos(tmp_path: Path):
    path = make_tiny_checkpoint(tmp_path, "qwen3")
    checkpoint = load_checkpoint(path)
    reference = AutoTokenizer.from_pretrained(path)
    assert checkpoint.tokenizer is not None
    for text in ["Hello world!", "café 東京 🚀 12345", "<|im_start|>user\nhi<|im_end|>"]:
        assert checkpoint.tokenizer.encode(text) == reference.encode(text)
    messages = [{"role": "user", "content": "Hello"}]
    rendered = checkpoint.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    assert checkpoint.chat_template == reference.chat_template
    assert checkpoint.generation_config["eos_token_id"] == 2
    assert checkpoint.eos_token_ids == {reference.convert_tokens_to_ids("<|im_end|>")}


def test_llama_tokenizer_adds_bos(tmp_path: Path):
    checkpoint = load_checkpoint(make_tiny_checkpoint(tmp_path, "llama"))
    assert checkpoint.tokenizer.encode("Hello")[0] == checkpoint.tokenizer.bos_token_id == 0


def test_skip_tokenizer_init_and_no_tokenizer(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    path = make_tiny_checkpoint(tmp_path, "llama")
    skipped = load_checkpoint(path, skip_tokenizer_init=True)
    assert skipped.tokenizer is None
    assert skipped.chat_template is not None  # still read from the files
    bare = make_tiny_checkpoint(tmp_path, "qwen2", with_tokenizer=False)
    with caplog.at_level("WARNING"):
        checkpoint = load_checkpoint(bare)
    assert checkpoint.tokenizer is None and checkpoint.chat_template is None
    assert "ships no tokenizer" in caplog.text
    assert checkpoint.eos_token_ids == {2}


def test_separate_tokenizer_path(tmp_path: Path):
    bare = make_tiny_checkpoint(tmp_path, "qwen2", with_tokenizer=False)
    with_tok = make_tiny_checkpoint(tmp_path, "qwen2", name="tok-source")
    checkpoint = load_checkpoint(bare, tokenizer=str(with_tok))
    assert checkpoint.tokenizer is not None and checkpoint.chat_template is not None


def test_missing_path_names_it(tmp_path: Path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelLoadError, match="no-such-model"):
        load_checkpoint(missing)


def test_directory_without_config(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_checkpoint(tmp_path / "empty")


def test_directory_without_weights(tmp_path: Path):
    path = make_tiny_checkpoint(tmp_path, "llama")
    (path / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="No weights found"):
        load_checkpoint(path)


def test_unknown_model_type_is_unsupported(tmp_path: Path):
    path = make_tiny_checkpoint(tmp_path, "llama")
    config = json.loads((path / "config.json").read_text())
    config["model_type"] = "no_such_arch"
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="no_such_arch"):
        load_checkpoint(path)


def test_missing_shard_file_named(tmp_path: Path):
    path = make_tiny_checkpoint(tmp_path, "qwen2", shards=3, subfolder="sub")
    (path / "sub" / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="model-00002-of-00003.safetensors"):
        load_checkpoint(path)


def test_tensor_missing_from_its_shard_named(tmp_path: Path):
    path = make_tiny_checkpoint(tmp_path, "llama", shards=2)
    shard = path / "model-00002-of-00002.safetensors"
    tensors = load_file(shard)
    victim = sorted(tensors)[0]
    del tensors[victim]
    save_file(tensors, str(shard), metadata={"format": "pt"})
    checkpoint = load_checkpoint(path)
    with pytest.raises(ModelLoadError, match=victim.replace(".", r"\.")):
        list(checkpoint.iter_weights())


def test_unread_shard_is_an_error(tmp_path: Path):
    path = make_tiny_checkpoint(tmp_path, "qwen3", shards=3)
    checkpoint = load_checkpoint(path)
    weights = checkpoint.iter_weights()
    next(weights)  # a loader that stops after the first tensor
    weights.close()
    with pytest.raises(ModelLoadError, match="model-0000[23]-of-00003.safetensors"):
        checkpoint.check_all_shards_read()


def test_index_pointing_outside_checkpoint_rejected(tmp_path: Path):
    path = make_tiny_checkpoint(tmp_path, "llama", shards=2)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../elsewhere.safetensors"
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelLoadError, match="outside the checkpoint"):
        load_checkpoint(path)


def test_bad_load_format(tmp_path: Path):
    with pytest.raises(ModelLoadError, match="load_format"):
        load_checkpoint(make_tiny_checkpoint(tmp_path, "llama"), load_format="pickle")


def test_dummy_weights_have_real_names_and_shapes(tmp_path: Path):
    path = make_tiny_checkpoint(tmp_path, "qwen3", tie_word_embeddings=True)
    reference = _reference_state(path)
    for file in path.glob("*.safetensors"):
        file.unlink()
    checkpoint = load_checkpoint(path, load_format="dummy")
    assert checkpoint.format == "dummy"
    loaded = dict(checkpoint.iter_weights())
    assert {k: v.shape for k, v in loaded.items()} == {k: v.shape for k, v in reference.items()}
    assert all(v.abs().max() <= 1e-3 for v in loaded.values())
    again = dict(checkpoint.iter_weights())
    assert all(torch.equal(loaded[k], again[k]) for k in loaded)


def test_bfloat16_checkpoint_keeps_its_dtype(tmp_path: Path):
    path = make_tiny_checkpoint(tmp_path, "llama", shards=2, dtype=torch.bfloat16)
    checkpoint = load_checkpoint(path)
    loaded = dict(checkpoint.iter_weights())
    assert {t.dtype for t in loaded.values()} == {torch.bfloat16}
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).state_dict()
    assert all(torch.equal(loaded[name], reference[name]) for name in loaded)
