"""Engine flags reach ``EngineArgs`` through every command that builds an engine (parsing only, no engine)."""

from __future__ import annotations

import pytest

from revolta_cli.engine_flags import engine_args_from
from revolta_cli.main import build_parser

COMMANDS = [["serve"], ["generate", "hello"], ["chat"], ["bench", "throughput"]]


@pytest.mark.parametrize("command", COMMANDS)
def test_activation_quant_flag_reaches_engine_args(command):
    args = engine_args_from(build_parser().parse_args([*command, "--activation-quant", "int8"]))
    assert args.activation_quant == "int8"
    assert "activation_quant" in args.explicit


def test_activation_quant_left_unset_stays_the_engine_default():
    args = engine_args_from(build_parser().parse_args(["serve", "--activation-quant", "none"]))
    assert args.activation_quant == "none" and "activation_quant" in args.explicit
    args = engine_args_from(build_parser().parse_args(["serve"]))
    assert args.activation_quant == "none" and "activation_quant" not in args.explicit  # reported as "default"


def test_activation_quant_rejects_an_unknown_choice(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--activation-quant", "int4"])
    assert "invalid choice: 'int4'" in capsys.readouterr().err


def test_speculative_config_flag_is_a_json_object(capsys):
    args = engine_args_from(build_parser().parse_args(
        ["serve", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']))
    assert args.speculative_config == {"method": "ngram", "num_speculative_tokens": 3}
    for bad in ("{bad", "[1, 2]"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", "--speculative-config", bad])
    err = capsys.readouterr().err
    assert "not valid JSON" in err and "expected a JSON object" in err


def test_scheduling_policy_flag(capsys):
    args = engine_args_from(build_parser().parse_args(["serve", "--scheduling-policy", "priority"]))
    assert args.scheduling_policy == "priority" and "scheduling_policy" in args.explicit
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--scheduling-policy", "lifo"])
    assert "invalid choice: 'lifo'" in capsys.readouterr().err


@pytest.mark.parametrize("command", COMMANDS)
def test_a_vllm_command_line_parses(command):
    """The flags vLLM users pass (the Volta forks' READMEs) reach EngineArgs: --model, --trust-remote-code,
    --quantization and the generation config."""
    args = engine_args_from(build_parser().parse_args([
        *command, "--model", "/models/Qwen3.5-27B-AWQ", "--trust-remote-code", "--quantization", "awq_marlin",
        "--generation-config", "vllm", "--override-generation-config", '{"temperature": 0.7}', "-tp", "2"]))
    assert args.model == "/models/Qwen3.5-27B-AWQ" and args.trust_remote_code and args.quantization == "awq_marlin"
    assert args.generation_config == "vllm" and args.override_generation_config == {"temperature": 0.7}
    assert args.tensor_parallel_size == 2


def test_serve_accepts_vllm_flags_that_change_nothing_here(capsys):
    from revolta_cli.serve import run

    ns = build_parser().parse_args(["serve", "--disable-log-requests", "--enable-chunked-prefill"])
    assert ns.disable_log_requests and ns.enable_chunked_prefill
    assert run(build_parser().parse_args(["serve", "--no-enable-chunked-prefill"])) == 2
    assert "always chunked" in capsys.readouterr().err


def test_model_positional_and_option_must_agree():
    assert engine_args_from(build_parser().parse_args(["serve", "m", "--model", "m"])).model == "m"
    with pytest.raises(SystemExit, match="two models"):
        engine_args_from(build_parser().parse_args(["serve", "a", "--model", "b"]))


def test_cors_lists_are_json(capsys):
    ns = build_parser().parse_args(["serve", "--allowed-origins", '["https://a.example"]'])
    assert ns.allowed_origins == ["https://a.example"] and ns.allowed_headers == ["*"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--allowed-origins", "https://a.example"])
    assert "not valid JSON" in capsys.readouterr().err


def test_default_chat_template_kwargs_is_a_json_object(capsys):
    ns = build_parser().parse_args(["serve", "--default-chat-template-kwargs", '{"enable_thinking": false}'])
    assert ns.default_chat_template_kwargs == {"enable_thinking": False}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--default-chat-template-kwargs", '["enable_thinking"]'])
    assert "expected a JSON object" in capsys.readouterr().err


def test_stats_log_interval_comes_from_the_environment(monkeypatch):
    from revolta_cli.serve import log_stats_interval

    monkeypatch.delenv("REVOLTA_LOG_STATS_INTERVAL", raising=False)
    monkeypatch.delenv("VLLM_LOG_STATS_INTERVAL", raising=False)
    assert log_stats_interval() == 10.0
    monkeypatch.setenv("VLLM_LOG_STATS_INTERVAL", "3")
    assert log_stats_interval() == 3.0
    monkeypatch.setenv("REVOLTA_LOG_STATS_INTERVAL", "0.5")
    assert log_stats_interval() == 0.5
    for bad in ("soon", "0"):
        monkeypatch.setenv("REVOLTA_LOG_STATS_INTERVAL", bad)
        with pytest.raises(SystemExit, match="REVOLTA_LOG_STATS_INTERVAL"):
            log_stats_interval()


def test_hf_overrides_and_the_older_rope_flags_become_one_override():
    yarn = '{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}'
    args = engine_args_from(build_parser().parse_args(["serve", "--rope-scaling", yarn, "--rope-theta", "5e5"]))
    assert args.hf_overrides == {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 32768, "rope_theta": 5e5}}
    args = engine_args_from(build_parser().parse_args(
        ["generate", "hi", "--hf-overrides", '{"max_position_embeddings": 4096}', "--rope-scaling", yarn]))
    assert args.hf_overrides["max_position_embeddings"] == 4096 and args.hf_overrides["rope_scaling"]["factor"] == 4.0
    assert engine_args_from(build_parser().parse_args(["serve"])).hf_overrides is None
