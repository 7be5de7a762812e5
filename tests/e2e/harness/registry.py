# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The registry of tests: @test appends a test function, in load order."""

__all__ = ["TESTS", "test"]

TESTS = []
_NAMES = set()


def test(fn):
    # -k selects by name and the reports name tests: a name is one test.
    if fn.__name__ in _NAMES:
        raise RuntimeError("two e2e tests are named %s (the second in %s)" %
                           (fn.__name__, fn.__code__.co_filename))
    _NAMES.add(fn.__name__)
    TESTS.append(fn)
    return fn
