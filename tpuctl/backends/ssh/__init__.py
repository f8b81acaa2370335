"""The ssh backend: workers on other hosts, through the user's own OpenSSH.

Every connection is `ssh` with the user's config, agent, known_hosts and
ProxyJump, plus BatchMode (never a prompt) and connection sharing: the first
session to a host becomes its ControlMaster (a socket under
$TMPDIR/tpuctl-$UID/ssh), so every later session to that host, and the next
launch within a minute, skips the handshake.

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
cheap `tpuctl.backends.ssh.runner` can name them without loading them):

  options    SshOptions: the `ssh` command line, the ControlMaster directory
  fanout     run_everywhere (one command on many hosts) and `parallel`
  placement  which host runs which task; paths as the hosts see them
  session    one agent session: spawn, hello, the worker's Handle
  sync       --sync: rsync, or a tar of the changed files without it
  backend    SshStarter, the Supervisor's Starter over ssh
  wire, cache, agent  the remote agent's source (wire and cache are also imported here);
             cache checks the host's copy of tpuctl's runtime, which every worker imports
  install    sent after cache's text only to a host that lacks that copy: writes it
"""
