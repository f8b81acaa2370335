from tpuctl.runtime.profile_capture import main

main()
