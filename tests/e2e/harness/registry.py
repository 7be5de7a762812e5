# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The registry of tests: @test appends a test function, in load order."""


__all__ = ["TESTS", "test"]


# --- the tests ---------------------------------------------------------------------

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn
