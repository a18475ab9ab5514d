"""The implementation under test: its process, the fork server, its instances and the skewed clock."""
