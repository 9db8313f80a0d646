"""docs/configuration.md against the code: every flag of the command line and every declared environment variable.

The flags come from the parsers ``revolta_cli.main.build_parser`` builds; the variables from the two registries
(``revolta_kernels.envs`` and ``revolta_engine.envs``), read at run time. The variables' table is rendered here
from the registries; ``python packages/revolta-cli/tests/test_configuration_doc.py`` rewrites it in the doc.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from revolta_cli.main import build_parser
from revolta_engine import envs as engine_envs
from revolta_kernels.envs import EnvVar, parse_bool

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "configuration.md"
# The other documents this checkout's docs name REVOLTA_* variables in; each may name only declared ones.
DOCS_NAMING_VARIABLES = (DOC, ROOT / "README.md", ROOT / "docs" / "architecture.md", ROOT / "docs" / "performance.md")
BEGIN, END = "<!-- env-vars:begin -->", "<!-- env-vars:end -->"
DOCUMENTED_COMMANDS = ("serve", "chat", "generate")
_TYPE_NAMES: dict[Callable, str] = {str: "string", int: "integer", float: "number", parse_bool: "bool"}


def subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    """The parser of each ``revolta`` subcommand (``bench`` as its own subcommands: ``bench latency``, ...)."""
    found: dict[str, argparse.ArgumentParser] = {}

    def collect(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found[f"{prefix}{name}"] = sub
                    collect(sub, f"{prefix}{name} ")

    collect(build_parser(), "")
    return found


def option_strings(parser: argparse.ArgumentParser, *, with_help: bool = False) -> set[str]:
    """Every option spelling ``parser`` accepts (``-tp`` and ``--no-...`` forms included); ``-h``/``--help`` only
    when ``with_help``."""
    return {opt for action in parser._actions if with_help or not isinstance(action, argparse._HelpAction)
            for opt in action.option_strings}


def documented_options(text: str) -> set[str]:
    """The options the doc names in code spans, e.g. ``--max-model-len`` in `` `--max-model-len N` ``."""
    return set(re.findall(r"`(--?[a-z][a-z0-9-]*)(?=[`\s=\[])", text))


def type_name(var: EnvVar) -> str:
    """How the doc names a variable's type: its parse function's kind."""
    return _TYPE_NAMES.get(var.parse, getattr(var.parse, "__name__", "string").removeprefix("parse_"))


def default_text(var: EnvVar) -> str:
    """A variable's default as the doc shows it: ``1``/``0`` for flags, "unset" for an empty text or None."""
    if isinstance(var.default, bool):
        return "`1`" if var.default else "`0`"
    if var.default is None or var.default == "":
        return "unset"
    return f"`{var.default}`"


def render_env_table(variables: list[EnvVar]) -> str:
    """The Markdown table of ``variables`` that stands between the doc's env-vars markers."""
    rows = ["| variable | type | default | package | what it does |", "|---|---|---|---|---|"]
    for var in variables:
        doc = " ".join(var.doc.split()).replace("|", "\\|")
        rows.append(f"| `{var.name}` | {type_name(var)} | {default_text(var)} | {var.package} | {doc} |")
    return "\n".join(rows)


def env_block(text: str) -> str:
    """The text between the env-vars markers (stripped); an AssertionError when they are missing."""
    assert BEGIN in text and END in text, f"{DOC} lost its {BEGIN} / {END} markers"
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def rewrite_doc() -> None:
    """Put the table rendered from the registries between the markers of docs/configuration.md."""
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{BEGIN}\n{render_env_table(engine_envs.all_env_vars())}\n{END}{tail}")


def test_every_flag_of_serve_chat_generate_is_documented():
    parsers = subcommand_parsers()
    documented = documented_options(DOC.read_text())
    missing = {cmd: sorted(option_strings(parsers[cmd]) - documented) for cmd in DOCUMENTED_COMMANDS}
    missing = {cmd: opts for cmd, opts in missing.items() if opts}
    assert not missing, f"flags the parsers have and {DOC.name} does not name (as `--flag`): {missing}"


def test_every_documented_flag_exists():
    known = set().union(*(option_strings(p, with_help=True) for p in subcommand_parsers().values()))
    stale = sorted(documented_options(DOC.read_text()) - known)
    assert not stale, f"{DOC.name} names flags no revolta command accepts: {stale}"


def test_env_table_matches_the_registries():
    expected = render_env_table(engine_envs.all_env_vars())
    got = env_block(DOC.read_text())
    assert got == expected, (f"{DOC.name}'s environment table differs from the registries; run "
                             f"`python {Path(__file__).relative_to(ROOT)}` or put this between the markers:\n"
                             f"{expected}")


def test_docs_name_only_declared_variables():
    declared = {var.name for var in engine_envs.all_env_vars()}
    for path in DOCS_NAMING_VARIABLES:
        if not path.is_file():
            continue
        named = set(re.findall(r"REVOLTA_[A-Z0-9_]*[A-Z0-9]", path.read_text()))
        assert named <= declared, f"{path.name} names undeclared variables: {sorted(named - declared)}"


def test_vllm_aliases_are_read_by_the_code():
    aliases = set(re.findall(r"VLLM_[A-Z0-9_]*[A-Z0-9]", DOC.read_text()))
    assert aliases, f"{DOC.name} lists the vLLM variables it honours"
    sources = "\n".join(p.read_text() for p in (ROOT / "packages").glob("*/src/**/*.py"))
    unread = sorted(name for name in aliases if f'"{name}"' not in sources)
    assert not unread, f"{DOC.name} names vLLM variables no source file reads: {unread}"


def test_helpers_see_a_change():
    """The checks above fail when the doc and the code part: a flag or a variable the doc does not know."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--not-in-the-doc")
    assert "--not-in-the-doc" not in documented_options(DOC.read_text())
    assert "--not-in-the-doc" in option_strings(parser)
    fake = EnvVar("REVOLTA_NOT_IN_THE_DOC", int, 3, "a | b", "revolta-engine")
    table = render_env_table([fake])
    assert "| `REVOLTA_NOT_IN_THE_DOC` | integer | `3` | revolta-engine | a \\| b |" in table
    assert table not in env_block(DOC.read_text())


if __name__ == "__main__":
    rewrite_doc()
    print(f"rewrote the environment table of {DOC}", file=sys.stderr)
