"""What the tests' clusters put on this machine, shared by the control plane, the scripted and
the emulated cluster: the names that mark it (:mod:`.marks`), the bridge and network namespaces
(:mod:`.network`), the cgroups (:mod:`.cgroups`), and ending a process we started
(:mod:`.processes`)."""
