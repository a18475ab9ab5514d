"""The barrier catalog and the wire protocol between an implementation and the TestHost."""
