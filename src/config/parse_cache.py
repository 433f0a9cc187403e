"""OmegaConf's parses of interpolation strings (`${...}`), remembered for the process.

Why: OmegaConf parses a string with its ANTLR grammar each time a node holding it is created, copied or
resolved (omegaconf/_utils.py get_value_kind, omegaconf/base.py _dereference_node_impl and
_maybe_resolve_interpolation), and verl's ppo_trainer config holds hundreds of interpolations. A preset sweep
(tests/launcher/test_presets.py) parsed the same few hundred strings about 80,000 times: 23% of its samples
in py-spy, more than verl's own checks; a dry run composes and resolves both configs several times over.

A parse is a pure function of (string, rule, lexer mode), and its tree is only read afterwards: OmegaConf's
GrammarVisitor (omegaconf/grammar_visitor.py) walks it and sets nothing on it, and each token keeps the input
stream it was read from (antlr4 Lexer's token source pair, antlr4/Token.py CommonToken.text), so the parser's
reuse for the next string (omegaconf/grammar_parser.py parse keeps one lexer and parser per thread) leaves an
earlier tree whole. A string that fails to parse is not remembered: its error is raised again each time.

`install()` puts the remembering parse where OmegaConf 2.3 calls it (the names `parse` in omegaconf.base and
omegaconf._utils). It only speeds OmegaConf up: where an OmegaConf holds those names differently it changes
nothing, and tests/launcher/test_parse_cache.py fails on the pinned one until this module is brought up to it.
"""
from __future__ import annotations

import functools
import importlib

# OmegaConf's modules that call grammar_parser.parse by the name they imported
CALLERS = ("omegaconf.base", "omegaconf._utils")
# distinct interpolation strings: verl's config and ours hold well under a thousand
MAX_STRINGS = 8192


@functools.lru_cache(maxsize=1)
def remembered_parse():
    """OmegaConf's own parse, remembering its trees: one for the process."""
    from omegaconf import grammar_parser

    return functools.lru_cache(maxsize=MAX_STRINGS)(grammar_parser.parse)


def install() -> bool:
    """Route OmegaConf's parses through the remembered parse (idempotent). False where this OmegaConf does not
    call `parse` from the modules in CALLERS (then OmegaConf is left as it is)."""
    modules = [importlib.import_module(name) for name in CALLERS]
    ours = remembered_parse()
    if not all(getattr(m, "parse", None) in (ours.__wrapped__, ours) for m in modules):
        return False
    for module in modules:
        module.parse = ours
    return True


def installed() -> bool:
    """Whether OmegaConf's callers parse through the remembered parse."""
    return all(getattr(importlib.import_module(name), "parse", None) is remembered_parse() for name in CALLERS)
