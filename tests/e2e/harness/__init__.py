# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The egressd end-to-end test harness.

A test module (tests/e2e/test_<area>.py) does `from harness import *` and
registers its tests with @test; tests/e2e/run.py runs them (harness.runner).

  core      run identity (RUN_ID, IF_TAG), log, the cleanup stack (CLEANUP),
            check, wait_until, sysctls, run/must, cgroup removal
  servers   loopback TCP/UDP servers, NetNs (a netns behind a veth pair)
  ctx       Daemon (egressd), Ctx (the context `c` every test gets), Sandbox
  registry  @test and TESTS
  confine, obs, metering, adv, dns
            the helpers of each area's tests (obs_*, in_sandbox, adv_run,
            Dnsmasq, dns_ok, ...)
  runner    test discovery, setup, the main loop (-k, -v, --list, --build)
"""

from . import core, servers, ctx, registry, confine, obs, metering, adv, dns
from .core import *        # noqa: F401,F403
from .servers import *     # noqa: F401,F403
from .ctx import *         # noqa: F401,F403
from .registry import *    # noqa: F401,F403
from .confine import *     # noqa: F401,F403
from .obs import *         # noqa: F401,F403
from .metering import *    # noqa: F401,F403
from .adv import *         # noqa: F401,F403
from .dns import *         # noqa: F401,F403

__all__ = (core.__all__ + servers.__all__ + ctx.__all__ + registry.__all__ + confine.__all__ +
           obs.__all__ + metering.__all__ + adv.__all__ + dns.__all__)
