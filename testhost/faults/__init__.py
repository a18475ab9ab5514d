"""What the host does to an implementation: the fault catalog, the bridge clock's holds, cancel-pass."""
