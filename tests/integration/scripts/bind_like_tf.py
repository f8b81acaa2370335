"""Binds this worker's TF_CONFIG port the ways a server does (gRPC: dual-stack [::]; IPv4 0.0.0.0;
IPv6-only [::]), dials 127.0.0.1 as a peer would, and connects out from a wildcard socket as a client
would; writes what it saw, as JSON, to $EXPOSURE_OUT/<worker index>.json. No TensorFlow."""
import json
import os
import socket
import sys

port = int(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"][int(os.environ["TPUCTL_WORKER_INDEX"])].rsplit(":", 1)[1])
seen = {"port": port, "python": sys.executable}

with socket.socket(socket.AF_INET6) as dual:
    dual.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    dual.bind(("::", port))
    dual.listen()
    seen["dual"] = dual.getsockname()[0]
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        seen["peer_via_127"] = True
with socket.socket(socket.AF_INET) as v4:
    v4.bind(("0.0.0.0", port))
    seen["v4"] = v4.getsockname()[0]
with socket.socket(socket.AF_INET6) as v6:
    v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    v6.bind(("::", port))
    seen["v6only"] = v6.getsockname()[0]
target = os.environ.get("EXPOSURE_TARGET")
if target:
    host, target_port = target.rsplit(":", 1)
    with socket.socket(socket.AF_INET) as client:
        client.bind(("0.0.0.0", 0))  # a client that binds first (some do): must keep its outbound route
        client.settimeout(5)
        client.connect((host, int(target_port)))
        seen["outbound_from"] = client.getsockname()[0]
with open(os.path.join(os.environ["EXPOSURE_OUT"], os.environ["TPUCTL_WORKER_INDEX"] + ".json"), "w", encoding="utf-8") as out:
    json.dump(seen, out)
