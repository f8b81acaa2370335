"""Port reservations: distinct, held against other binders, and exclusive across launches."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import pytest

from tpuctl.launch import ports


def test_reserved_ports_are_distinct_and_held() -> None:
    held = ports.reserve(8)
    try:
        assert len(set(held.ports)) == 8
        for port in held.ports:
            with socket.socket() as other, pytest.raises(OSError):
                other.bind(("0.0.0.0", port))  # what TensorFlow's gRPC server would do
    finally:
        held.release()


def test_a_port_handed_to_a_worker_stays_off_limits_to_other_launches() -> None:
    held = ports.reserve(4)
    try:
        held.close_sockets()  # the workers now own the ports; only the locks remain
        probe = textwrap.dedent(
            """
            from tpuctl.launch import ports
            others = ports.reserve(200)
            print(" ".join(map(str, others.ports)))
            others.release()
            """
        )
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
        assert not set(map(int, out.split())) & set(held.ports)
    finally:
        held.release()


def test_release_frees_the_ports() -> None:
    held = ports.reserve(2)
    port = held.ports[0]
    held.release()
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))
