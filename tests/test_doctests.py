"""Every module's docstring examples run, against the installed package."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ["catalog", "optimizer", "costmodel", "charts", "cli"]


def _modules():
    for package in PACKAGES:
        pkg = importlib.import_module(package)
        yield package
        for info in pkgutil.iter_modules(pkg.__path__, prefix=f"{package}."):
            yield info.name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
