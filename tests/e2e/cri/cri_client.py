#!/usr/bin/python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# A CRI client, the calls the kubelet makes, for tests/e2e/test_containerd.py:
#   cri_client.py SOCKET METHOD < request.json  ->  response JSON on stdout
# METHOD is a RuntimeService RPC (RunPodSandbox, CreateContainer, ...) of
# cri_min.proto; the request and response are its messages as JSON
# (protobuf's JSON mapping). The stubs are generated from cri_min.proto into
# $CRI_GEN (a directory of the test's) on first use, with Debian's
# python3-grpc-tools: nothing is downloaded. A gRPC error exits 1 with its
# code and details on stderr.
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def stubs(gen):
    if not os.path.exists(os.path.join(gen, "cri_min_pb2_grpc.py")):
        os.makedirs(gen, exist_ok=True)
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", HERE,
                        "--python_out", gen, "--grpc_python_out", gen,
                        os.path.join(HERE, "cri_min.proto")], check=True)
    sys.path.insert(0, gen)
    import cri_min_pb2
    import cri_min_pb2_grpc
    return cri_min_pb2, cri_min_pb2_grpc


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: cri_client.py SOCKET METHOD < request.json")
    sock, method = sys.argv[1], sys.argv[2]
    pb, grpc_pb = stubs(os.environ.get("CRI_GEN", os.path.join(HERE, "__gen__")))
    import grpc
    from google.protobuf import json_format
    req = json_format.ParseDict(json.load(sys.stdin), getattr(pb, method + "Request")())
    timeout = float(os.environ.get("CRI_TIMEOUT", "60"))
    with grpc.insecure_channel("unix://" + sock) as ch:
        try:
            resp = getattr(grpc_pb.RuntimeServiceStub(ch), method)(req, timeout=timeout)
        except grpc.RpcError as e:
            print("%s: %s: %s" % (method, e.code().name, e.details()), file=sys.stderr)
            sys.exit(1)
    print(json.dumps(json_format.MessageToDict(resp, preserving_proto_field_name=True)))


if __name__ == "__main__":
    main()
