"""Reference implementation of the Durable Schedule protocol v1, Gate A, on PostgreSQL."""
