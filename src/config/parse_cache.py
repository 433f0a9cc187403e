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

# OmegaConf's modules that call grammar_parser.parse by the name they imported
CALLERS = ("omegaconf.base", "omegaconf._utils")
# distinct interpolation strings: verl's config and ours hold well under a thousand
MAX_STRINGS = 8192


def install() -> bool:
    """Route OmegaConf's parses through one remembered parse (idempotent). False where this OmegaConf does
    not call `parse` from the modules in CALLERS (then OmegaConf is left as it is)."""
    import importlib

    from omegaconf import grammar_parser

    modules = [importlib.import_module(name) for name in CALLERS]
    original = getattr(grammar_parser.parse, "__wrapped__", grammar_parser.parse)
    if not all(getattr(m, "parse", None) in (original, _remembered.get(original)) for m in modules):
        return False
    remembered = _remembered.setdefault(original, functools.lru_cache(maxsize=MAX_STRINGS)(original))
    for module in modules:
        module.parse = remembered
    return True


def installed() -> bool:
    """Whether OmegaConf's callers parse through the remembered parse."""
    import importlib

    return all(getattr(importlib.import_module(name), "parse", None) in _remembered.values() for name in CALLERS)


# OmegaConf's parse -> its remembered form (one per process)
_remembered: dict = {}
