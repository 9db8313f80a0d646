"""Structured output with xgrammar: compiled grammars, one matcher per sequence, and the token mask.

:class:`GrammarBackend` (one per engine) turns a request's :class:`StructuredOutputsParams` into a compiled
grammar when the request is added, so a bad schema fails that request alone and compilation stays off the
per-token path; equal constraints are compiled once. Each sequence gets a :class:`GrammarState` whose matcher
has accepted exactly the sequence's output tokens, so a sequence preempted and recomputed keeps its state.
:class:`GrammarMask` sets the logits of tokens the grammar forbids to ``-inf`` before sampling.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import torch

from revolta_engine.errors import StructuredOutputError
from revolta_engine.structured_outputs import MAX_JSON_WHITESPACE, PARAM, StructuredOutputsParams

if TYPE_CHECKING:
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerBase

    from revolta_engine.sample.sampler import SamplingRow

logger = logging.getLogger(__name__)

# xgrammar's C++ errors start with "[hh:mm:ss] /path/file.cc:123: "; the rest is the message a user needs.
_CPP_PREFIX = re.compile(r"^\[[\d:]+\]\s+\S+:\d+:\s*")
_WHAT = {"json": "JSON schema", "regex": "regex", "choice": "choice", "grammar": "grammar",
         "json_object": "JSON object grammar", "structural_tag": "structural tag"}


def _clean(exc: BaseException) -> str:
    text = _CPP_PREFIX.sub("", str(exc).strip())
    text = text.replace("Check failed: (error.empty()) is false: ", "")
    return text.splitlines()[0] if text else type(exc).__name__


def choice_grammar(choices: list[str]) -> str:
    """An EBNF grammar whose language is exactly ``choices``."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


class GrammarState:
    """The grammar matcher of one sequence; it has accepted exactly the sequence's output tokens."""

    def __init__(self, matcher: xgr.GrammarMatcher, vocab_size: int) -> None:
        self.matcher = matcher
        self.vocab_size = vocab_size  # bits per bitmask row
        self.num_accepted = 0

    def accept(self, token_id: int) -> bool:
        """Advance past a sampled token; False if the grammar does not allow it (should not happen: masked)."""
        ok = bool(self.matcher.accept_token(token_id))
        if ok:
            self.num_accepted += 1
        return ok

    @property
    def terminated(self) -> bool:
        """True once the grammar has ended (its stop token was accepted)."""
        return bool(self.matcher.is_terminated())

    @property
    def can_end(self) -> bool:
        """True when the output so far is complete, so EOS is allowed now."""
        return bool(self.matcher.is_completed())


class GrammarBackend:
    """Compiles structured output constraints for one engine's tokenizer and logits width.

    xgrammar's tokenizer info is built on first use (most engines never see a structured request).
    ``vocab_size`` is the width of the model's logits, which may exceed the tokenizer's vocabulary (padded
    embeddings): ids past the tokenizer's are never allowed.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase | None, vocab_size: int, eos_token_ids: set[int],
                 cache_size: int = 128) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = sorted(eos_token_ids)
        self.cache_size = cache_size
        self._compiler: xgr.GrammarCompiler | None = None
        self._info_vocab = vocab_size
        self._cache: OrderedDict[tuple[str, str, bool], xgr.CompiledGrammar] = OrderedDict()

    def _get_compiler(self) -> xgr.GrammarCompiler:
        if self._compiler is None:
            import xgrammar as xgr

            if self.tokenizer is None:
                raise StructuredOutputError("structured output needs the model's tokenizer, and this engine "
                                            "runs without one (skip_tokenizer_init)", param=PARAM)
            self._info_vocab = max(self.vocab_size, len(self.tokenizer))
            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self._info_vocab,
                                                      stop_token_ids=self.eos_token_ids or None)
            self._compiler = xgr.GrammarCompiler(info, max_threads=max(1, min(8, os.cpu_count() or 1)),
                                                 cache_enabled=False)
            logger.info("Structured output ready: xgrammar over a %d-token vocabulary (%s), stop tokens %s",
                        self._info_vocab, info.vocab_type.name.lower(), self.eos_token_ids)
        return self._compiler

    def compile(self, params: StructuredOutputsParams) -> xgr.CompiledGrammar:
        """The compiled grammar of ``params`` (cached); :class:`StructuredOutputError` if it cannot compile."""
        params.validate()
        key = params.cache_key()
        compiled = self._cache.get(key)
        if compiled is not None:
            self._cache.move_to_end(key)
            return compiled
        compiler = self._get_compiler()
        kind, value = key[0], getattr(params, key[0])
        try:
            compiled = self._compile(compiler, kind, value, params.disable_any_whitespace)
        except StructuredOutputError:
            raise
        except Exception as exc:  # xgrammar raises RuntimeError/ValueError (and pydantic errors) with a reason
            raise StructuredOutputError(f"the {_WHAT[kind]} cannot be compiled: {_clean(exc)}",
                                        param=f"{PARAM}.{kind}") from exc
        self._cache[key] = compiled
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return compiled

    @staticmethod
    def _compile(compiler: xgr.GrammarCompiler, kind: str, value: Any, compact: bool) -> xgr.CompiledGrammar:
        layout: dict[str, Any] = ({"any_whitespace": False} if compact else
                                  {"any_whitespace": True, "max_whitespace_cnt": MAX_JSON_WHITESPACE})
        if kind == "json":
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError as exc:
                    raise StructuredOutputError(f"the JSON schema is not valid JSON: {exc}",
                                                param=f"{PARAM}.json") from exc
            if not isinstance(value, dict | bool):
                raise StructuredOutputError("a JSON schema must be an object (or true/false)",
                                            param=f"{PARAM}.json")
            return compiler.compile_json_schema(json.dumps(value), **layout)
        if kind == "json_object":
            return compiler.compile_json_schema('{"type": "object"}', **layout)
        if kind == "regex":
            return compiler.compile_regex(value)
        if kind == "choice":
            return compiler.compile_grammar(choice_grammar(value))
        if kind == "grammar":
            return compiler.compile_grammar(value)
        if kind == "structural_tag":
            return compiler.compile_structural_tag(value if isinstance(value, str) else json.dumps(value))
        raise StructuredOutputError(f"unknown structured output kind {kind!r}", param=PARAM)

    def new_state(self, compiled: xgr.CompiledGrammar) -> GrammarState:
        """A fresh matcher (one per sequence) at the start of ``compiled``."""
        import xgrammar as xgr

        return GrammarState(xgr.GrammarMatcher(compiled), self._info_vocab)


class GrammarMask:
    """Applies the grammar masks of a batch's constrained rows to its logits, in place."""

    def __init__(self) -> None:
        self._bitmask: torch.Tensor | None = None

    def _buffer(self, rows: int, words: int) -> torch.Tensor:
        buf = self._bitmask
        if buf is None or buf.shape[0] < rows or buf.shape[1] != words:
            buf = self._bitmask = torch.empty((max(rows, 8), words), dtype=torch.int32)
        return buf

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow]) -> None:
        """Set forbidden tokens' logits to ``-inf`` for every row that carries a grammar."""
        import xgrammar as xgr

        states = [(i, r.grammar) for i, r in enumerate(rows) if r.grammar is not None]
        words = (states[0][1].vocab_size + 31) // 32
        bitmask = self._buffer(len(rows), words)
        indices = [i for i, state in states if state.matcher.fill_next_token_bitmask(bitmask, i)]
        if not indices:
            return  # every constrained row allows every token this step
        mask = bitmask[: len(rows)]
        width = min(logits.shape[-1], words * 32)
        if logits.device.type == "cpu":
            xgr.apply_token_bitmask_inplace(logits, mask, vocab_size=width, indices=indices, backend="cpu")
        else:  # plain torch ops: runs on every GPU (no Triton or JIT kernel build, so Volta too)
            xgr.apply_token_bitmask_inplace(logits, mask.to(logits.device, non_blocking=True), vocab_size=width,
                                            indices=indices, backend="torch_native")


def advance_grammar(request: Any, token: int) -> None:
    """Feed a sampled token to the request's matcher; the request ends when its grammar does."""
    from revolta_engine.core.request import RequestStatus

    grammar = request.grammar
    assert grammar is not None
    if not grammar.accept(token):
        logger.error("request %s: the grammar rejected sampled token %d; stopping it", request.request_id, token)
        request.status = RequestStatus.FINISHED_STOPPED
    elif grammar.terminated and not request.status.finished:
        request.status = RequestStatus.FINISHED_STOPPED  # e.g. ignore_eos: the grammar's end is still the end
