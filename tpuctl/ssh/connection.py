"""How to reach hosts, as options: `tpuctl launch --hosts/--tpu`, `tpuctl ssh` and `tpuctl profile` take the same ones.

Cheap to import (click and the option fields only), since `launch --help` and `ssh --help` read it; the
ssh machinery (client_args) loads only when the options are turned into an ssh command line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from tpuctl.inputs.errors import TpuctlError
from tpuctl.launch.option_fields import option

if TYPE_CHECKING:
    from tpuctl.ssh.client_args import SshOptions

DEFAULT_FANOUT = 16  # the same as tpuctl.ssh.client_args.DEFAULT_FANOUT, without importing it for --help


@dataclass(frozen=True)
class Connection:
    """How to reach hosts: `tpuctl launch --hosts/--tpu`, `tpuctl ssh` and `tpuctl profile` take the same options."""

    ssh_user: str | None = option("--ssh-user", metavar="USER", help="Remote user.  [default: from your ssh config, else yours]")
    ssh_key: str | None = option(
        "--ssh-key", type=click.Path(exists=True, dir_okay=False), help="Identity file (ssh -i).  [default: your agent and ssh config]"
    )
    ssh_option: tuple[str, ...] = option(
        "--ssh-option",
        multiple=True,
        default=(),
        metavar="NAME=VALUE",
        help="An ssh option (ssh -o) for every connection, e.g. ProxyJump=bastion (repeatable).",
    )
    ssh_config: str | None = option(
        "--ssh-config", type=click.Path(exists=True, dir_okay=False), help="ssh config file to use instead of ~/.ssh/config (ssh -F)."
    )
    fanout: int = option(
        "--fanout", type=click.IntRange(min=1), default=DEFAULT_FANOUT, show_default=True, help="Hosts being connected to at the same time."
    )

    def ssh_options(self) -> SshOptions:
        """The checked options as the ssh machinery takes them."""
        from tpuctl.inputs.parse import tool_file
        from tpuctl.ssh.client_args import SshOptions, checked_config

        for value in self.ssh_option:
            # What `ssh -o` takes: NAME=VALUE (or NAME VALUE).
            if "=" not in value.strip(" =") and " " not in value.strip():
                raise TpuctlError(f"--ssh-option {value!r} is not NAME=VALUE", hint="e.g. --ssh-option ProxyJump=bastion")
        return SshOptions(
            user=self.ssh_user,
            key=os.path.abspath(tool_file(self.ssh_key, "--ssh-key")) if self.ssh_key else None,
            options=tuple(self.ssh_option),
            config=os.path.abspath(checked_config(self.ssh_config)) if self.ssh_config else None,
            fanout=self.fanout,
        )
