"""One case: its run, the barrier desk, requests and passes, and the facts it records."""
