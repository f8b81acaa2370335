"""The ssh backend: workers on other hosts, through the user's own OpenSSH.

Every connection goes through the ssh transport (tpuctl/ssh/): the user's
`ssh`, in BatchMode, sharing one ControlMaster per host, so every later
session to that host, and the next launch within a minute, skips the handshake.

A worker is one ssh session running a small agent (`agent.py`, sent as source
text together with `wire.py`). A launch happens in two steps, so that TF_CONFIG
can name a real port on every host before any training starts:

  reserve   one session per worker, concurrently (at most `fanout` hosts being
            connected at a time; connection failures retried), each agent binds
            and holds a free port on its host and says hello. An unreachable
            host fails the whole launch here, with nothing started anywhere.
            The first agent on each host also says whether the host has this
            tpuctl's runtime; if not, it is shipped before the host's other
            sessions open.
  start     each agent is sent its worker's argv and environment (one hex
            line on stdin, see `wire.pack`) and starts it in a new process group,
            handing it the held port and a control socket as a local launch does.

Control flows over the same session: the agent's stderr carries only its
`NONCE kind value` lines (ready, pgid, exit status), stdout carries the
worker's output, and lines on the agent's stdin signal the worker's group.
When the session ends for any reason (tpuctl killed, ssh killed, network gone
and noticed) the agent sees EOF on stdin and kills the group. As a last resort
tpuctl kills a group whose exit it never heard about with a separate
`kill -- -PGID` over ssh.

The modules, by job (this package file imports none of them, so that the
cheap `tpuctl.backends.ssh.runner` can name them without loading them); how
a host is reached, and the runtime shipped to it, is the transport's
(tpuctl/ssh/):

  placement  which host runs which task; paths as the hosts see them
  session    one agent session: spawn, hello, the worker's Handle
  sync       --sync: rsync, or a tar of the changed files without it
  selection, ignore_rules, globs  which files --sync sends
  starter    SshStarter, the Supervisor's Starter over ssh
  wire, agent  the remote agent's source (wire is also imported here; the
             transport's cache.py is sent between them)
  doctor     `tpuctl doctor --hosts/--tpu`: the probe on the hosts a launch would use
  environment  --requirements and --setup: each host's venv, made ready before each attempt's agents start
"""
