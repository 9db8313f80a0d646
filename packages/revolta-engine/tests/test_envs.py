"""Every ``REVOLTA_*`` variable is declared once in a registry (``revolta_kernels.envs``, ``revolta_engine.envs``)
and read only through it; C++ reads no environment at all.

Two checks: a scan of every package's ``src/`` and ``csrc/`` (a read of the environment outside the registries,
or of an undeclared name anywhere, fails naming file:line), and a run of a tiny CPU engine (and the command line's
serve configuration) under a recording ``os.environ`` whose every ``REVOLTA_*`` key read must be declared.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, MutableMapping
from pathlib import Path

import pytest

from revolta_engine import envs

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ROOT / "packages"
PY_SUFFIXES = {".py"}
CPP_SUFFIXES = {".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp"}
REGISTRIES = {PACKAGES / "revolta-kernels/src/revolta_kernels/envs.py",
              PACKAGES / "revolta-engine/src/revolta_engine/envs.py"}
NAME = re.compile(r"\bREVOLTA_[A-Z0-9_]+\b")
# A read of the environment: os.environ[...] / .get / "X" in os.environ, os.getenv, a bare environ or getenv.
PY_READ = re.compile(r"\b(?:os\.)?environ\b|\bgetenv\b")
CPP_READ = re.compile(r"\b(?:std::)?(?:secure_)?getenv\b")


def declared_names() -> set[str]:
    """Every name the registries declare."""
    return {var.name for var in envs.all_env_vars()}


def scan_source(path: Path, text: str, declared: set[str], *, registry: bool) -> list[str]:
    """``file:line: why`` for each environment read in ``text`` that breaks the rules (``registry``: the file is
    one of the envs.py registries, which may read the environment, but only declared names)."""
    problems = []
    cpp = path.suffix in CPP_SUFFIXES
    for lineno, line in enumerate(text.splitlines(), 1):
        code = line.split("//")[0] if cpp else line.split("#")[0]
        where = f"{path}:{lineno}"
        if cpp:
            if CPP_READ.search(code):
                problems.append(f"{where}: C++ reads the environment (pass the value as a call argument)")
            continue
        if not PY_READ.search(code):
            continue
        undeclared = sorted(set(NAME.findall(code)) - declared)
        if undeclared:
            problems.append(f"{where}: reads undeclared {', '.join(undeclared)} (declare it in an envs.py)")
        elif not registry:
            problems.append(f"{where}: reads os.environ outside the registries (use the EnvVar of envs.py)")
    return problems


def source_files() -> Iterator[Path]:
    """Every Python file under a package's ``src/`` and every C/C++/CUDA file under its ``csrc/``."""
    for package in sorted(PACKAGES.iterdir()):
        for sub, suffixes in (("src", PY_SUFFIXES), ("csrc", CPP_SUFFIXES)):
            for path in sorted((package / sub).rglob("*")):
                if path.suffix in suffixes and path.is_file():
                    yield path


def test_no_source_reads_the_environment_outside_the_registries():
    declared = declared_names()
    files = list(source_files())
    assert any(p.suffix == ".cuh" for p in files) and any(p in REGISTRIES for p in files), "the scan found nothing"
    problems = [problem for path in files
                for problem in scan_source(path.relative_to(ROOT), path.read_text(errors="replace"), declared,
                                           registry=path in REGISTRIES)]
    assert not problems, "\n".join(problems)


def test_the_scan_finds_each_kind_of_raw_read():
    declared = {"REVOLTA_DEVICE"}
    source = ('x = os.environ.get("REVOLTA_NOT_DECLARED")\n'
              'y = os.getenv("REVOLTA_DEVICE")\n'
              'z = os.environ[NAME]\n'
              'w = "REVOLTA_DEVICE"  # os.environ is only named in this comment\n')
    assert scan_source(Path("m.py"), source, declared, registry=False) == [
        "m.py:1: reads undeclared REVOLTA_NOT_DECLARED (declare it in an envs.py)",
        "m.py:2: reads os.environ outside the registries (use the EnvVar of envs.py)",
        "m.py:3: reads os.environ outside the registries (use the EnvVar of envs.py)",
    ]
    assert scan_source(Path("envs.py"), source, declared, registry=True) == [
        "envs.py:1: reads undeclared REVOLTA_NOT_DECLARED (declare it in an envs.py)"]
    cpp = 'const char* v = std::getenv("REVOLTA_DEVICE");\n// getenv in a comment is fine\n'
    assert scan_source(Path("k.cuh"), cpp, declared, registry=False) == [
        "k.cuh:1: C++ reads the environment (pass the value as a call argument)"]


class RecordingEnviron(MutableMapping[str, str]):
    """``os.environ`` that remembers every key looked up by name (bulk copies and iteration are not lookups)."""

    def __init__(self, real: MutableMapping[str, str]) -> None:
        self.real = real
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return self.real[key]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return key in self.real

    def __setitem__(self, key: str, value: str) -> None:
        self.real[key] = value

    def __delitem__(self, key: str) -> None:
        del self.real[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)

    def copy(self) -> dict[str, str]:
        return dict(self.real)

    def items(self):  # type: ignore[override]
        return self.real.items()

    def values(self):  # type: ignore[override]
        return self.real.values()

    def revolta_reads(self) -> set[str]:
        """The ``REVOLTA_*`` keys looked up so far."""
        return {key for key in self.read if key.startswith("REVOLTA_")}


@pytest.fixture
def recorded_environ(monkeypatch) -> RecordingEnviron:
    recorder = RecordingEnviron(os.environ)
    monkeypatch.setattr(os, "environ", recorder)
    return recorder


def test_a_cpu_engine_reads_only_declared_variables(tiny_llama, recorded_environ):
    from revolta_engine import LLM, SamplingParams

    llm = LLM(str(tiny_llama), dtype="float32", max_model_len=128, kv_cache_memory_bytes=1 << 22)
    out = llm.generate({"prompt_token_ids": [5, 9, 17, 33]}, SamplingParams(temperature=0.0, max_tokens=4))
    assert len(out[0].outputs[0].token_ids) == 4
    report = llm.llm_engine.config_report()
    assert ("kv_cache_memory_bytes", 1 << 22, "user") in report
    reads = recorded_environ.revolta_reads()
    assert envs.DEVICE.name in reads, "the recorder saw no lookup: is os.environ still the one the engine reads?"
    assert not reads - declared_names(), f"undeclared variables read: {sorted(reads - declared_names())}"


def test_the_serve_configuration_reads_only_declared_variables(recorded_environ):
    pytest.importorskip("revolta_cli")
    from revolta_cli.engine_flags import engine_args_from
    from revolta_cli.main import build_parser
    from revolta_cli.serve import log_stats_interval

    ns = build_parser().parse_args(["serve", "--max-model-len", "64"])
    assert engine_args_from(ns).max_model_len == 64
    assert log_stats_interval() > 0
    reads = recorded_environ.revolta_reads()
    assert envs.LOG_STATS_INTERVAL.name in reads
    assert not reads - declared_names(), f"undeclared variables read: {sorted(reads - declared_names())}"


def test_the_report_lists_every_set_variable(tiny_llama, monkeypatch):
    from revolta_engine import LLM

    monkeypatch.setenv("REVOLTA_ALLOW_LONG_MAX_MODEL_LEN", "1")
    monkeypatch.setenv("VLLM_LOG_STATS_INTERVAL", "3")
    report = LLM(str(tiny_llama), dtype="float32", max_model_len=128).llm_engine.config_report()
    assert ("REVOLTA_ALLOW_LONG_MAX_MODEL_LEN", "1", "env") in report
    assert ("VLLM_LOG_STATS_INTERVAL", "3", "env") in report
    assert {name for name, _, _ in report} >= {name for name, _ in envs.set_env_vars()}
