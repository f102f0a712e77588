"""The embedded backend: real ``horovodrun`` (gloo, CPU) on this machine, no cluster."""
