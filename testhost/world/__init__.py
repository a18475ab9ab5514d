"""The world a case runs in: the PostgreSQL cluster, its clock, Toxiproxy, the workspace and the store."""
