"""The command table's handlers are named as `module:function` and imported only when their
command runs (importing every handler's module, the HTTP app among them, would add ~1 s to
every `retrieval` call, `--help` too): each name must resolve, to a function of (settings,
args)."""

from __future__ import annotations

import importlib
import inspect

from retrieval.cli import COMMANDS


def test_every_handler_resolves_to_a_function_of_settings_and_args():
    assert len(COMMANDS) >= 15
    for c in COMMANDS:
        module, _, name = c.handler.partition(":")
        fn = getattr(importlib.import_module(module), name, None)
        assert callable(fn), c.handler
        params = list(inspect.signature(fn).parameters)
        assert len(params) == 2, (c.handler, params)
