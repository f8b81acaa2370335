"""The ssh transport: how tpuctl reaches hosts, whatever it does there.

Every connection is `ssh` with the user's config, agent, known_hosts and
ProxyJump, plus BatchMode (never a prompt) and connection sharing: the first
session to a host becomes its ControlMaster (a socket under
$TMPDIR/tpuctl-$UID/ssh), so every later session to that host, and the next
command within a minute, skips the handshake.

A launch over ssh (tpuctl/backends/ssh/), `tpuctl doctor --hosts/--tpu`,
`tpuctl profile` of an ssh run, `tpuctl ssh` and `--cleanup` all reach their
hosts through this package, so each reaches a host the same way. It imports no
backend and no command; they import it.

The modules, by job:

  connection   Connection: the --ssh-* and --fanout options, as launch, ssh and profile take them
  client_args  SshOptions: the `ssh` command line, the ControlMaster directory
  fanout       run_everywhere (one command on many hosts) and `parallel`
  tpu_cleanup  what `--cleanup` runs on every TPU host (launch and `tpuctl ssh`)
  shipment     this tpuctl's runtime as one shipment: its files, their manifest and digest
  remote_source  the modules that run on a host as source (cache, install), as they are sent
  cache        the check of a host's copy of the runtime (shipped as source, run by
               `python -S`); install writes that copy where it is missing
  profile      `tpuctl profile` of an ssh run: the capture on its first host, the files back
  command      `tpuctl ssh`: the hosts of a TPU VM slice, a command run on them all at once
"""
