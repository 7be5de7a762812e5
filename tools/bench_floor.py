# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The floor of the connect benchmark (tools/bench.py, docs/benchmarks.md).

A cgroup of its own with a program that only allows (tools/bench/floor/
empty.bpf.c) at every hook egressd attaches to the loop's sandbox: the same
connect loop there measures what that many program runs cost on this
machine before any of them touches a map (bpf_stats ns per connect/close,
and the connect rate against no sandbox). What egressd adds on top is what
a data layout can change; the floor only fewer program runs can.

Attached with BPF_PROG_ATTACH (bpftool, multi): removing the cgroup
releases the attachments, removing the pins the programs, both on cleanup.
"""
import json
import os
import shutil
import subprocess

# egressd's program name -> bpftool's attach type at the same hook.
ATTACH_TYPE = {
    "egr_connect4": "connect4", "egr_connect6": "connect6",
    "egr_sendmsg4": "sendmsg4", "egr_sendmsg6": "sendmsg6",
    "egr_recvmsg4": "recvmsg4", "egr_recvmsg6": "recvmsg6",
    "egr_getpeername4": "getpeername4", "egr_getpeername6": "getpeername6",
    "egr_bind4": "bind4", "egr_bind6": "bind6",
    "egr_post_bind4": "post_bind4", "egr_post_bind6": "post_bind6",
    "egr_sock_create": "sock_create", "egr_sock_release": "sock_release",
    "egr_setsockopt": "setsockopt",
    "egr_skb_egress": "egress", "egr_skb_ingress": "ingress",
}


def _bpftool(args):
    return subprocess.run(["bpftool"] + args, check=True, capture_output=True, text=True,
                          timeout=30).stdout


class Floor:
    """Empty programs at the hooks of egressd's programs `names`, on cgroup
    `cgroup` (made and removed by the caller). ids: {egressd's name: id of
    the empty program at that hook}, so the caller's tables line up."""

    def __init__(self, obj, pin_dir):
        if not os.path.isfile(obj):
            raise RuntimeError(f"{obj} is missing: run `make bench`")
        self.obj = obj
        self.pin_dir = pin_dir
        self.ids = {}
        self.skipped = []

    def attach(self, cgroup, names):
        _bpftool(["prog", "loadall", self.obj, self.pin_dir])
        for name in sorted(names):
            kind = ATTACH_TYPE.get(name)
            pin = os.path.join(self.pin_dir, "flr_" + name[len("egr_"):])
            if kind is None or not os.path.exists(pin):
                self.skipped.append(name)
                continue
            _bpftool(["cgroup", "attach", cgroup, kind, "pinned", pin, "multi"])
            info = json.loads(_bpftool(["-j", "prog", "show", "pinned", pin]))
            self.ids[name] = (info[0] if isinstance(info, list) else info)["id"]
        if "egr_connect4" not in self.ids:
            raise RuntimeError(f"no empty connect4 attached to {cgroup}")
        return self.ids

    def cleanup(self):
        """The pins (the cgroup's removal, by the caller, releases the
        attachments). Never raises: it runs from cleanup paths."""
        if os.path.isdir(self.pin_dir):
            shutil.rmtree(self.pin_dir, ignore_errors=True)
        return not os.path.exists(self.pin_dir)
