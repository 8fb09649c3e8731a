"""Every module's docstring examples run, against the installed package."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import cqopt


def _modules():
    yield "cqopt"
    for info in pkgutil.walk_packages(cqopt.__path__, prefix="cqopt."):
        if info.name != "cqopt.__main__":
            yield info.name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
