"""The environment each ssh host runs a launch's workers in (--requirements, --setup): a venv of tpuctl's over the
host's own Python, with its site-packages visible (the image's TensorFlow and libtpu stay the ones in use), holding
the exact wheels one resolution chose, built once per lock and reused; --setup run once in it. docs/environments.md
says what lands where.

  host_env, host_build  the program that runs on a host (standard library, sent as source): the warm check, the one
                        resolution, the build from a lock's wheels, --setup, the wheels handed on
  host_copy             its part that packs a built environment and unpacks it on another host, checked as it comes
  remote                that program as it is sent, and its answers read back
  spec, lock            what the launch asks (known before any host is reached: the dry run's step), and the lock
  hosts                 each attempt's step: the check on every host, the resolution, the builds, --setup
  wheels                where a lock's wheels are kept (this machine, the run's bucket) and how hosts get them
  copies                one build copied to the other hosts of the same Python instead of a build on each
"""
