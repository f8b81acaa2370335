from tpuctl.runtime.bootstrap import main

main()
