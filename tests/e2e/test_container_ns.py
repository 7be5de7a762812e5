# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# Issue 26 items 2-4: policies bound to Kubernetes namespaces, a policy tree
# laid out as kubelet ConfigMap volumes and watched by egressd, and the
# container's identity in list, audit and events. Real Podman + runc
# containers carrying the annotations CRI-O writes (io.kubernetes.pod.*,
# io.kubernetes.cri-o.*), through the shipped hooks.d files.

import json
import os
import shutil
import subprocess
import threading
import time

from harness import *  # noqa: F401,F403
from test_containers import oci_need, probe_lines, our_sandboxes, oci_hook_argv

NS_TREE = [None]


def crio_annotations(ns, pod, name="app", extra=None):
    """What CRI-O writes into config.json for a pod's container (the
    kubelet's labels and CRI-O's own keys), as podman --annotation flags."""
    ann = {"io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": pod,
           "io.kubernetes.pod.uid": "uid-%s-%s" % (pod, RAND),
           "io.kubernetes.container.name": name,
           "io.kubernetes.cri-o.ImageName": "registry.example/%s:1" % name,
           "io.kubernetes.cri-o.ContainerType": "container"}
    ann.update(extra or {})
    out = []
    for k, v in ann.items():
        out += ["--annotation", "%s=%s" % (k, v)]
    return out


def detach_if_attached(c, cg):
    """A test's cleanup: whatever the hook attached to cg goes."""
    sb = c.find_sandbox(cg)
    if sb:
        c.ctl("detach", "--id", str(sb["id"]))


def policy_doc(allow, tenant):
    return {"tenant": tenant, "execution_id": "static-%s" % RAND,
            "network": {"default": "deny", "outbound_allow": list(allow)}}


class Tree:
    """<dir>/<namespace>/ as kubelet ConfigMap volumes: ..TIMESTAMP/ with the
    files, ..data -> ..TIMESTAMP, NAME.json -> ..data/NAME.json; update()
    swaps the way the kubelet's AtomicWriter does."""

    def __init__(self, root):
        self.root = root
        self.seq = 0
        os.makedirs(root, mode=0o755, exist_ok=True)
        os.chmod(root, 0o755)

    def configmap(self, ns, files):
        d = os.path.join(self.root, ns)
        os.makedirs(d, mode=0o755, exist_ok=True)
        os.chmod(d, 0o755)
        self.seq += 1
        ts = "..%s_%06d" % (time.strftime("%Y_%m_%d_%H_%M_%S"), self.seq)
        os.mkdir(os.path.join(d, ts), 0o755)
        for name, doc in files.items():
            p = os.path.join(d, ts, name)
            with open(p, "w") as f:
                f.write(doc if isinstance(doc, str) else json.dumps(doc))
            os.chmod(p, 0o644)
        data = os.path.join(d, "..data")
        old = os.readlink(data) if os.path.islink(data) else None
        tmp = os.path.join(d, "..data_tmp")
        os.symlink(ts, tmp)
        os.rename(tmp, data)  # the atomic swap
        for name in files:
            link = os.path.join(d, name)
            if not os.path.islink(link):
                os.symlink(os.path.join("..data", name), link)
        # Keys gone from the ConfigMap lose their links; the old dir goes.
        for e in os.listdir(d):
            if not e.startswith(".") and e not in files:
                os.unlink(os.path.join(d, e))
        if old:
            shutil.rmtree(os.path.join(d, old))


def ns_setup(c):
    """Podman, and egressd restarted once with a policy tree of this run
    (and team-r requiring a policy)."""
    env = oci_need(c)
    if NS_TREE[0] is None:
        tree = Tree(os.path.join(c.work, "ptree-" + RAND))
        args = [a for a in c.daemon.extra_args]
        restart_daemon(c, args + ["--policy-dir", tree.root,
                                  "--require-policy-namespaces", "team-r,other"])
        NS_TREE[0] = tree
    return env, NS_TREE[0]


@test
def k8s_ns_policy_other_namespace_refused(c):
    env, tree = ns_setup(c)
    allowed, denied = c.tcp("ns-allow"), c.tcp("ns-deny")
    tree.configmap("team-a", {"narrow.json": policy_doc(["127.0.0.1:%d" % allowed.port],
                                                        "team-a-" + RAND)})
    tree.configmap("team-b", {"wide.json": policy_doc(
        ["127.0.0.1:%d" % allowed.port, "127.0.0.1:%d" % denied.port], "team-b-" + RAND)})
    # A link out of team-a's directory into team-b's (an admin's slip or a
    # hostile writer): refused by RESOLVE_BENEATH, not followed.
    os.symlink("../team-b/wide.json", os.path.join(tree.root, "team-a", "steal.json"))
    d0 = denied.accepted
    script = "/netprobe tcp 127.0.0.1 %d" % denied.port
    attacks = [
        ("another namespace's name", {"io.egressd.policy": "wide"}, "team-a"),
        ("a path into another namespace", {"io.egressd.policy": "../team-b/wide"}, "not a path"),
        ("a host path", {"io.egressd.policy": os.path.join(tree.root, "team-b/wide.json")},
         "not a path"),
        ("a link out of its directory", {"io.egressd.policy": "steal"}, "outside"),
        ("the kubelet's ..data", {"io.egressd.policy": "..data"}, "does not start with '.'"),
        # The pod sets containerd's namespace key as a pod annotation
        # (CRI-O copies it): the runtime's own key says team-a.
        ("a forged containerd namespace key",
         {"io.egressd.policy": "wide", "io.kubernetes.cri.sandbox-namespace": "team-b"},
         "forgery"),
    ]
    for what, extra, says in attacks:
        r = env.run(script, extra=crio_annotations("team-a", "evil-" + RAND, extra=extra))
        check(r.returncode != 0 and not probe_lines(r.stdout),
              "%s: podman run exit %d, out %r" % (what, r.returncode, r.stdout))
        check(says in r.stderr and "oci-hook createRuntime" in r.stderr,
              "%s: the refusal does not say %r: %r" % (what, says, r.stderr[-700:]))
    check(denied.accepted == d0, "a refused container reached the port only wide allows")
    # Twins: each namespace's own policy, by name, confines as written.
    r = env.run(script + "; /netprobe tcp 127.0.0.1 %d" % allowed.port,
                extra=crio_annotations("team-a", "good-" + RAND,
                                       extra={"io.egressd.policy": "narrow"}))
    check(probe_lines(r.stdout) == ["err EPERM", "ok"],
          "team-a with narrow: %d %r %r" % (r.returncode, r.stdout, r.stderr[-500:]))
    r = env.run(script, extra=crio_annotations("team-b", "wide-" + RAND,
                                               extra={"io.egressd.policy": "wide"}))
    check(probe_lines(r.stdout) == ["ok"] and denied.accepted == d0 + 1,
          "team-b with wide: %d %r %r" % (r.returncode, r.stdout, r.stderr[-500:]))


@test
def k8s_ns_default_missing_and_required(c):
    env, tree = ns_setup(c)
    allowed, denied = c.tcp("nsd-allow"), c.tcp("nsd-deny")
    tree.configmap("team-d", {"default.json": policy_doc(["127.0.0.1:%d" % allowed.port],
                                                         "team-d-" + RAND)})
    script = "/netprobe tcp 127.0.0.1 %d; /netprobe tcp 127.0.0.1 %d" % (denied.port,
                                                                         allowed.port)
    # Unannotated in team-d: its default.json, confined.
    r = env.run(script, extra=crio_annotations("team-d", "plain-" + RAND))
    check(probe_lines(r.stdout) == ["err EPERM", "ok"],
          "team-d default: %d %r %r" % (r.returncode, r.stdout, r.stderr[-500:]))
    # A name that does not exist: refused, naming the namespace and the name.
    r = env.run(script, extra=crio_annotations("team-d", "typo-" + RAND,
                                               extra={"io.egressd.policy": "nosuch"}))
    check(r.returncode != 0 and not probe_lines(r.stdout) and "team-d" in r.stderr and
          "nosuch" in r.stderr, "a missing policy: %d %r" % (r.returncode, r.stderr[-600:]))
    # team-r requires a policy and has no default: refused.
    r = env.run(script, extra=crio_annotations("team-r", "bare-" + RAND))
    check(r.returncode != 0 and not probe_lines(r.stdout) and "team-r" in r.stderr and
          "require" in r.stderr, "team-r unannotated: %d %r" % (r.returncode, r.stderr[-600:]))
    # Twin: team-x requires nothing and has no tree: it runs, unconfined.
    r = env.run(script, extra=crio_annotations("team-x", "free-" + RAND))
    check(probe_lines(r.stdout) == ["ok", "ok"],
          "team-x unannotated: %d %r %r" % (r.returncode, r.stdout, r.stderr[-500:]))


@test
def k8s_ns_identity_in_list_audit_events(c):
    env, tree = ns_setup(c)
    denied = c.tcp("nsi-deny")
    tree.configmap("team-i", {"web.json": policy_doc([], "team-i-" + RAND)})
    seen = {}
    before = {s["id"] for s in c.list_json()}

    # The container lists itself while it runs (egressctl list from the host).
    def watch():
        def listed():
            for s in our_sandboxes(c, before):
                if (s.get("container") or {}).get("namespace") == "team-i":
                    seen["sb"] = s
                    return True
            return False
        wait_until(listed, 20, 0.1)

    t = threading.Thread(target=watch)
    t.start()
    r = env.run("/netprobe tcp 127.0.0.1 %d; sleep 2" % denied.port,
                extra=crio_annotations("team-i", "id-" + RAND, name="web",
                                       extra={"io.egressd.policy": "web"}))
    t.join()
    check(probe_lines(r.stdout) == ["err EPERM"], "team-i: %d %r" % (r.returncode, r.stderr))
    sb = seen.get("sb")
    check(sb is not None, "the container's sandbox was never listed with its container")
    ctr = sb["container"]
    want = {"namespace": "team-i", "pod": "id-" + RAND, "pod_uid": "uid-id-%s-%s" % (RAND, RAND),
            "name": "web", "image": "registry.example/web:1", "runtime": "cri-o",
            "policy": "web"}
    for k, v in want.items():
        check(ctr.get(k) == v, "list: container.%s = %r, expected %r" % (k, ctr.get(k), v))
    check(len(ctr.get("id", "")) == 64, "container.id %r is not podman's id" % ctr.get("id"))
    # execution_id: the container id, not the policy's static one.
    check(sb["execution_id"] == ctr["id"],
          "execution_id %r is not the container id" % sb["execution_id"])
    recs = [x for x in obs_audit(c) if x.get("sandbox") == sb["id"]]
    check(any(x.get("type") == "execution" for x in recs) and
          all((x.get("container") or {}).get("id") == ctr["id"] for x in recs),
          "audit records of sandbox %d without its container: %r" % (sb["id"], recs))
    evs = [e for e in obs_events(c, "--sandbox", str(sb["id"]))
           if e.get("type") in ("deny", "connect_denied") or e.get("verdict") == "deny"]
    check(evs and all((e.get("container") or {}).get("pod") == "id-" + RAND for e in evs),
          "deny events without the container: %r" % evs[:3])
    r = c.ctl("list")
    check("team-i/id-%s/web" % RAND in r.stdout or sb["id"] not in
          [s["id"] for s in c.list_json()], "list's CONTAINER column: %r" % r.stdout[-600:])


@test
def k8s_configmap_swap_reaches_running_sandbox(c):
    env, tree = ns_setup(c)
    target = c.tcp("nsw-target")
    tree.configmap("team-w", {"app.json": policy_doc([], "team-w-" + RAND),
                              "spare.json": policy_doc([], "team-w-" + RAND)})
    alerts0 = len(obs_alerts(c))
    # The container probes the target every 0.2 s for up to 40 s.
    argv = env.podman_base() + [
        "run", "--rm", "--name", "nsw-" + RAND, "--network", "host",
        "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"] + \
        crio_annotations("team-w", "swap-" + RAND, extra={"io.egressd.policy": "app"}) + \
        ["--rootfs", env.rootfs, "/bin/sh", "-c",
         "i=0; while [ $i -lt 200 ]; do /netprobe tcp 127.0.0.1 %d; sleep 0.2; "
         "i=$((i+1)); done" % target.port]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    CLEANUP.push("podman nsw", lambda: run(env.podman_base() + ["rm", "-f", "nsw-" + RAND]))
    lines = []
    t = threading.Thread(target=lambda: [lines.append((time.monotonic(),
                                                       " ".join(l.split()[:2])))
                                         for l in p.stdout])
    t.start()
    try:
        check(wait_until(lambda: any(l == "err EPERM" for _, l in lines), 30, 0.1),
              "the container never probed (denied): %r" % lines[-3:])
        sb = [s for s in c.list_json()
              if (s.get("container") or {}).get("pod") == "swap-" + RAND]
        check(len(sb) == 1, "the container's sandbox: %r" % sb)
        sid, sha0 = sb[0]["id"], sb[0]["policy_sha256"]
        # An invalid new version: never applied, an alert names the file.
        tree.configmap("team-w", {"app.json": '{"tenant": "x", "network": {"default": "open"}}',
                                  "spare.json": policy_doc([], "team-w-" + RAND)})
        check(wait_until(lambda: any(a["type"] == "policy_invalid" and
                                     "team-w/app.json" in a.get("summary", "")
                                     for a in obs_alerts(c)[alerts0:]), 10, 0.2),
              "no policy_invalid alert naming team-w/app.json: %r" % obs_alerts(c)[alerts0:])
        s = [s for s in c.list_json() if s["id"] == sid][0]
        check(s["policy_sha256"] == sha0, "the invalid version replaced the policy")
        # The good new version: the swap as the kubelet does it, timed to
        # the container's first allowed connect.
        t0 = time.monotonic()
        tree.configmap("team-w", {"app.json": policy_doc(["127.0.0.1:%d" % target.port],
                                                         "team-w-" + RAND),
                                  "spare.json": policy_doc([], "team-w-" + RAND)})
        check(wait_until(lambda: any(ts > t0 and l == "ok" for ts, l in lines), 10, 0.05),
              "the new ConfigMap version did not reach the running container within 10 s: "
              "%r" % lines[-3:])
        took = min(ts for ts, l in lines if ts > t0 and l == "ok") - t0
        log("ConfigMap swap to the container's first allowed connect: %.2f s" % took)
        check(took < 10, "took %.2f s" % took)
        rec = [x for x in obs_audit(c) if x.get("type") == "policy_change" and
               x.get("sandbox") == sid and x.get("change") == "update"]
        check(rec and rec[-1].get("container", {}).get("policy") == "app",
              "no audited update with the container: %r" % rec)
        # Removed from the ConfigMap while in use: the sandbox keeps its
        # policy, an alert says so.
        s = [s for s in c.list_json() if s["id"] == sid][0]
        tree.configmap("team-w", {"spare.json": policy_doc([], "team-w-" + RAND)})
        check(wait_until(lambda: any(a["type"] == "policy_removed" and
                                     "team-w/app.json" in a.get("summary", "")
                                     for a in obs_alerts(c)[alerts0:]), 10, 0.2),
              "no policy_removed alert: %r" % obs_alerts(c)[alerts0:])
        s2 = [x for x in c.list_json() if x["id"] == sid][0]
        check(s2["policy_sha256"] == s["policy_sha256"], "the removal changed the policy")
        n = len(lines)
        check(wait_until(lambda: len(lines) > n + 2, 5, 0.1) and lines[-1][1] == "ok",
              "after the removal the container is not on its last policy: %r" % lines[-3:])
    finally:
        run(env.podman_base() + ["rm", "-f", "nsw-" + RAND], timeout=60)
        p.wait(30)
        t.join(5)


@test
def k8s_identity_survives_restart(c):
    """The container object lives in the policy document of the state file:
    a restarted egressd adopts the sandbox with it, and the watch still
    applies the tree to it."""
    env, tree = ns_setup(c)
    target = c.tcp("nsr-target")
    tree.configmap("team-s", {"app.json": policy_doc([], "team-s-" + RAND)})
    cg = c.mkcgroup("ns-restart")
    try:
        r = ctl_request(c.sock, {"op": "attach", "cgroup": cg,
                                 "policy_ref": {"namespace": "team-s", "name": "app"},
                                 "container": {"id": "ctr-" + RAND, "pod": "p-" + RAND},
                                 "execution_id": "exec-" + RAND})
        check(r.get("ok") and r["sandbox"]["container"]["namespace"] == "team-s",
              "attach by policy_ref: %r" % r)
        restart_daemon(c, list(c.daemon.extra_args))
        s = c.find_sandbox(cg)
        check(s is not None and s["container"] == {"id": "ctr-" + RAND, "pod": "p-" + RAND,
                                                   "namespace": "team-s", "policy": "app"} and
              s["execution_id"] == "exec-" + RAND, "after the restart: %r" % s)
        c.denied(cg, "tcp", "127.0.0.1", target.port)
        tree.configmap("team-s", {"app.json": policy_doc(["127.0.0.1:%d" % target.port],
                                                         "team-s-" + RAND)})
        check(wait_until(lambda: c.find_sandbox(cg)["policy_sha256"] != s["policy_sha256"],
                         10, 0.1), "the adopted sandbox did not get the new version")
        c.allowed(cg, "tcp", "127.0.0.1", target.port)
    finally:
        c.ctl("detach", "--cgroup", cg)
        cgroup_remove_tree(cg)


@test
def k8s_forged_pause_container_not_skipped_when_required(c):
    """rt-k8s finding 4: on a host without a CRI runtime whoever sets
    annotations sets the type keys too; with --require-annotation (every
    container must be confined) io.kubernetes.cri-o.ContainerType=sandbox
    made the hook skip the container as a pod's pause container: exit 0,
    any image unconfined. Twin: without --require-annotation the pause
    container is still skipped (exit 0, nothing attached)."""
    cg = c.mkcgroup("pause")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    holder = subprocess.Popen(["sleep", "30"], preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("holder", lambda: (holder.kill(), holder.wait()))
    st = {"ociVersion": "1.0.2", "id": "p-" + RAND, "status": "created", "pid": holder.pid,
          "bundle": os.path.join(c.work, "no-bundle-" + RAND),
          "annotations": {"io.kubernetes.pod.namespace": "nodefault-" + RAND.lower(),
                          "io.kubernetes.pod.name": "evil",
                          "io.kubernetes.cri-o.ContainerType": "sandbox"}}

    def hook(*opts):
        return subprocess.run(oci_hook_argv(c, "createRuntime", "--wait", "0", *opts),
                              input=json.dumps(st), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=CTL_TIMEOUT_S)
    try:
        r = hook("--require-annotation")
        check(r.returncode != 0 and "not starting it" in r.stderr,
              "a forged pause container under --require-annotation: exit %d %r"
              % (r.returncode, r.stderr))
        check(c.find_sandbox(cg) is None, "refused, yet attached")
        r = hook()
        check(r.returncode == 0 and c.find_sandbox(cg) is None,
              "the pause container without --require-annotation: %d %r"
              % (r.returncode, r.stderr))
    finally:
        detach_if_attached(c, cg)


@test
def k8s_tree_policy_cannot_claim_another_tenant(c):
    """rt-k8s finding 1: whoever writes namespace A's ConfigMap wrote a
    policy whose tenant is B's, with limits.tenant_egress_bytes: the
    attach of A's container capped every sandbox of B's tenant (and B's
    tenant-scoped approvals and billing would be A's too). A tree policy's
    tenant is its namespace. Twin: the victim sends 1 MiB freely before,
    and its own tenant's cap (a policy naming that tenant) does bind it."""
    from test_fastbpf import fb_policy, fb_check_free, fb_check_bound, CAP
    env, tree = ns_setup(c)
    sink = SinkServer()
    victim_tenant = "victim-" + RAND
    free = fb_policy(c, ["tcp/127.0.0.1:%d" % sink.port], victim_tenant, None)
    capper = fb_policy(c, ["tcp/127.0.0.1:9"], victim_tenant, CAP)
    ns = "rta-" + RAND
    tree.configmap(ns, {"evil.json": {"tenant": victim_tenant,
                                      "network": {"default": "deny", "outbound_allow": []},
                                      "limits": {"tenant_egress_bytes": CAP}}})
    cg = c.mkcgroup("claim")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    holder = subprocess.Popen(["sleep", "60"], preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("holder", lambda: (holder.kill(), holder.wait()))
    st = {"ociVersion": "1.0.2", "id": "t-" + RAND, "status": "created", "pid": holder.pid,
          "bundle": os.path.join(c.work, "no-bundle-" + RAND), "annotations": {
              "io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": "evil",
              "io.kubernetes.cri-o.ContainerType": "container", "io.egressd.policy": "evil"}}
    with Sandbox(c, free, "claim-victim") as victim:
        fb_check_free(c, victim, sink, "the victim before")
        r = subprocess.run(oci_hook_argv(c, "createRuntime"), input=json.dumps(st),
                           capture_output=True, text=True, timeout=CTL_TIMEOUT_S)
        sb = c.find_sandbox(cg)
        try:
            check(r.returncode == 0 and sb, "A's container: %d %r" % (r.returncode, r.stderr))
            check(sb["tenant"] == ns, "A's container is of tenant %r, not its namespace %r"
                  % (sb["tenant"], ns))
            fb_check_free(c, victim, sink, "the victim after A's ConfigMap named its tenant")
        finally:
            if sb:
                c.ctl("detach", "--id", str(sb["id"]))
        with Sandbox(c, capper, "claim-own-cap"):
            fb_check_bound(c, victim, sink, "the victim under its own tenant's cap")


@test
def k8s_unreadable_config_json_refused(c):
    """rt-k8s finding: a bundle whose config.json does not parse made the
    hook take the state's annotations instead, as if the bundle had none.
    The bundle's file is the record: one that is there but unreadable
    refuses the start. Twin: the same state with a readable config.json
    (a namespace whose default confines) attaches."""
    env, tree = ns_setup(c)
    ns = "cfg-" + RAND.lower()
    tree.configmap(ns, {"default.json": policy_doc(["127.0.0.1:9"], ns)})
    cg = c.mkcgroup("cfgjson")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    holder = subprocess.Popen(["sleep", "30"], preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("holder", lambda: (holder.kill(), holder.wait()))
    bundle = os.path.join(c.work, "bundle-cfg-" + RAND)
    os.makedirs(bundle, exist_ok=True)
    CLEANUP.push("bundle", shutil.rmtree, bundle, True)
    ann = {"io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": "p",
           "io.kubernetes.cri-o.ContainerType": "container"}
    st = {"ociVersion": "1.0.2", "id": "c-" + RAND, "status": "created", "pid": holder.pid,
          "bundle": bundle, "annotations": ann}

    def hook():
        return subprocess.run(oci_hook_argv(c, "createRuntime", "--wait", "0"),
                              input=json.dumps(st), capture_output=True, text=True,
                              timeout=CTL_TIMEOUT_S)
    cfg = os.path.join(bundle, "config.json")
    try:
        for what, text in (("truncated", '{"ociVersion": "1.0.2", "annotations": {'),
                           ("not an object", '["annotations"]')):
            with open(cfg, "w") as f:
                f.write(text)
            r = hook()
            check(r.returncode != 0 and "config.json is not usable" in r.stderr,
                  "a %s config.json: exit %d %r" % (what, r.returncode, r.stderr))
            check(c.find_sandbox(cg) is None, "a %s config.json, yet attached" % what)
        with open(cfg, "w") as f:
            json.dump({"ociVersion": "1.0.2", "annotations": ann}, f)
        r = hook()
        sb = c.find_sandbox(cg)
        check(r.returncode == 0 and sb is not None,
              "a readable config.json: exit %d %r" % (r.returncode, r.stderr))
    finally:
        detach_if_attached(c, cg)


@test
def k8s_unwatchable_namespace_is_polled_not_dropped(c):
    """rt-k8s finding: past 4,096 namespaces (or when the kernel refused an
    inotify watch) a namespace's directory was silently not watched: its
    ConfigMap updates never reached its sandboxes. Now it is polled, and
    an alert names it. 4,100 namespace directories make the cap real; a
    ConfigMap swap in one that is polled reaches its running sandbox
    within 10 s (the twin: the same swap in a watched one, earlier tests)."""
    env, tree = ns_setup(c)
    extra = ["zz%04d-%s" % (i, RAND.lower()) for i in range(4100)]
    for ns in extra:
        os.mkdir(os.path.join(tree.root, ns), 0o755)
    CLEANUP.push("namespaces", lambda: [shutil.rmtree(os.path.join(tree.root, ns), True)
                                        for ns in extra])
    alerts0 = len(obs_alerts(c))
    polled = []

    def find_polled():
        polled[:] = [a["evidence"]["file"].rsplit("/", 1)[1] for a in obs_alerts(c)[alerts0:]
                     if a["type"] == "policy_watch_degraded" and
                     "namespaces are watched" in a.get("summary", "")]
        return polled
    check(wait_until(find_polled, 30, 0.5),
          "no policy_watch_degraded alert past 4,096 namespaces: %r"
          % obs_alerts(c)[alerts0:][-3:])
    pt = obs_status(c)["policy_tree"]
    check(pt["watched"] == 4096 and pt["polled"] == pt["namespaces"] - 4096 > 0,
          "status policy_tree: %r" % pt)
    ns = ([p for p in polled if p in extra] or polled)[0]  # one of this test's own
    tree.configmap(ns, {"app.json": policy_doc([], ns)})
    cg = c.mkcgroup("polled")
    CLEANUP.push("cgroup", cgroup_remove_tree, cg)
    holder = subprocess.Popen(["sleep", "60"], preexec_fn=join_cgroup_fn(cg))
    CLEANUP.push("holder", lambda: (holder.kill(), holder.wait()))
    st = {"ociVersion": "1.0.2", "id": "pl-" + RAND, "status": "created", "pid": holder.pid,
          "bundle": os.path.join(c.work, "no-bundle-" + RAND), "annotations": {
              "io.kubernetes.pod.namespace": ns, "io.kubernetes.pod.name": "p",
              "io.kubernetes.cri-o.ContainerType": "container", "io.egressd.policy": "app"}}
    r = subprocess.run(oci_hook_argv(c, "createRuntime"), input=json.dumps(st),
                       capture_output=True, text=True, timeout=CTL_TIMEOUT_S)
    sb = c.find_sandbox(cg)
    try:
        check(r.returncode == 0 and sb, "the polled namespace's container: %d %r"
              % (r.returncode, r.stderr))
        sha0 = sb["policy_sha256"]
        tree.configmap(ns, {"app.json": policy_doc(["127.0.0.1:9"], ns)})
        check(wait_until(lambda: (c.find_sandbox(cg) or {}).get("policy_sha256") != sha0,
                         10, 0.2),
              "a ConfigMap swap in a polled namespace did not reach its sandbox in 10 s")
    finally:
        detach_if_attached(c, cg)
